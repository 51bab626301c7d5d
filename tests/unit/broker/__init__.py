"""Unit tests of the broker (broker/) and of the harness's pure parts."""
