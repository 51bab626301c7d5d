"""The kind cluster of the e2e tier, and what runs on it: the reference deployment and its
client pods (``deployment``), the operator installed by its chart (``operated``), the client
pods' output read into the queue checker's history (``history``), and producer streams
judged after a fault (``streams``).

Here rather than in tests/e2e because `python -m bench chaos` and `python -m bench failover
--kubernetes` drive the same cluster the same way, and benchmarks do not import tests. Here
rather than in bench because the e2e tests would then import a benchmark, and because what
they share is a local cluster, the harness's subject. Like ``control_plane`` it runs a
checkout's scripts (scripts/kind.sh, scripts/image.sh, scripts/helm.sh; see ``checkout``).
"""
