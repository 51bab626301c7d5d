"""Process-wide pieces with no Kafka semantics, below every layer: the metrics registry, the
garbage collector's tuning, the event-loop watchdog, and the log line for a failure that
repeats."""
