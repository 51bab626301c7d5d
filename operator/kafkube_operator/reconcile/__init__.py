"""The steps that apply a model to the cluster, one module per resource kind."""
