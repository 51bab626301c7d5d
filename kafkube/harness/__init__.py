"""Local kafkube clusters, for `kafkube dev`, the tests and the benchmarks alike.

One way to run brokers on this machine, so that what the tests trust is what the benchmarks
measure and what `kafkube dev` gives a user:

- ``process``: one `kafkube broker` process on loopback (start, stop, SIGKILL, SIGSTOP and
  SIGCONT, restart on its ports and log dirs, its output kept and tailed);
- ``cluster``: ``LocalCluster``, N such brokers on the embedded SQLite coordination backend,
  processes only: what `kafkube dev` runs;
- ``metadata``: ``Cluster``, a ``LocalCluster`` seen through a Kafka client (topics,
  leaders, ISRs, waits on them); it needs confluent-kafka, a test dependency, so `kafkube
  dev` never imports it;
- ``waiting``, ``process_group``, ``ports``, ``metrics``, ``procstat``: the one
  ``wait_until``, the one process-group killer, free loopback ports, a broker's Prometheus
  samples, a process's CPU and memory;
- ``wire``, ``queue_checker``, ``txn_checker``: a raw Kafka client and the checkers of what
  a cluster did with a history of writes, shared by tests and benchmarks;
- ``control_plane``, ``kind`` and ``kafka_jars``: a real kube-apiserver on loopback, the kind
  cluster of the e2e tier with what runs on it, and Apache Kafka's jars for its tools. These
  drive a source checkout's scripts (``checkout``), so they work from a checkout only.

It ships with the product because `kafkube dev` uses it. broker/ never imports it (the
broker's layers stay below the command line: tests/unit/broker/test_layers.py); it imports
broker/ only for configuration and protocol pieces.
"""
