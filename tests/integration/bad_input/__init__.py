"""A live broker against bad input: bad frames, bad records, bad requests. Each test keeps a
healthy connection beside the abuse (conftest.py): bad input costs the offending client its
connection or gets Kafka's error code, never the broker or its other clients."""
