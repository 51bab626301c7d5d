"""Issue 17's scale curves, kafkube beside Apache Kafka: how each system's costs grow with
the size of what it serves, so a cost that grows faster in kafkube shows before a user
finds it.

Two commands, each with its own docs section and chart:

- ``python -m bench scale-load`` (``load``): throughput, broker CPU per GB and broker memory
  against the number of partitions (``partitions``) and of producer connections
  (``connections``), sampled from /proc (``sampling``); reported by ``load_report``.
- ``python -m bench scale-recovery`` (``recovery_cli``): recovery after SIGKILL against GB of
  log (``recovery``), metadata propagation against partitions in one CreateTopics
  (``metadata``), and kafkube's cluster image on the Kubernetes backend (``image``),
  through per-broker wire probes (``probes``) on fresh clusters (``clusters``); reported by
  ``recovery_report``.

``report`` holds what both share: the docs section between its markers, tables, the
chart's frame, the reproducing command line and ``--render``.
"""
