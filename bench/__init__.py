"""Throughput benchmarks for kafkube: a real broker process driven by confluent-kafka.

The broker and the client run in separate processes so that each gets its own GIL, as
they would in production; timings therefore include the loopback TCP path and the
broker's whole request pipeline, not just the storage layer. Run ``python -m bench -h``.
"""
