"""The active controller's decisions: pure functions from one cluster image to the next."""
