"""Unit tests of kafkube.harness' pure parts: how it reads what clients printed."""
