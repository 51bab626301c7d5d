"""Pure functions from a resource's spec to the Kubernetes objects and plans it calls for: no
API calls here, so every decision is tested without a cluster."""
