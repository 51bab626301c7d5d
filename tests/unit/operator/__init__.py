"""Unit tests of the operator (operator/kafkube_operator): its models, passes and
reconcile steps against in-memory fakes; golden files in golden/."""
