"""``python -m bench replicated``: produce throughput on a 3-broker cluster, replicated
(``acks=all``, RF 3, ``min.insync.replicas=2``) against unreplicated (``acks=1``, RF 1).

Both workloads run on the same cluster, each on its own topic, with the producer process of
``bench.clients.produce`` (confluent-kafka in its own process, the same settings as
``python -m bench produce`` apart from ``acks``). The partitions' leaders are spread over
the three brokers in both cases, so the difference is the replication: with RF 3 every
broker also fetches and writes the other brokers' partitions, and each produce request waits
for the followers.
"""

from __future__ import annotations

import time
from typing import Any

from bench import clients
from bench.cluster import BenchCluster
from kafkube.harness.procstat import cpu_seconds, machine_busy_seconds

IDLE_SAMPLE_S = 5.0
WORKLOADS: list[tuple[str, int, dict[str, str], dict[str, str]]] = [
    # name, replication factor, topic config, producer overrides
    ("acks=1 RF1", 1, {}, {"acks": "1"}),
    ("acks=all RF3", 3, {"min.insync.replicas": "2"}, {"acks": "all"}),
]


def run(records: int, record_size: int, partitions: int, repeat: int, timeout: float,
        extra: dict[str, str], keep: bool = False) -> list[str]:
    results: list[tuple[str, int, dict[str, Any]]] = []
    with BenchCluster(3, keep=keep) as cluster:
        print(f"cluster: 3 brokers on {cluster.bootstrap}, default settings; broker output "
              f"in {cluster.log_path}", flush=True)
        pids = cluster.pids()
        cpu0 = [cpu_seconds(pid) for pid in pids]
        time.sleep(IDLE_SAMPLE_S)  # a fixed span on purpose: this measures idling
        idle = [100 * (cpu_seconds(p) - c) / IDLE_SAMPLE_S for p, c in zip(pids, cpu0,
                                                                          strict=True)]
        print(f"idle brokers, over {IDLE_SAMPLE_S:.0f} s before the runs: {sum(idle):.1f}% of "
              f"one core ({'/'.join(f'{x:.1f}' for x in idle)}): metadata and controller "
              "polling", flush=True)
        for run_no in range(1, repeat + 1):
            for name, rf, config, overrides in WORKLOADS:
                topic = f"kafkube-bench-rf{rf}-{run_no}"
                cluster.create_topic(topic, partitions, rf, config, timeout=60.0)
                print(f"run {run_no}: {name} ...", flush=True)
                pids = cluster.pids()
                cpu0 = [cpu_seconds(pid) for pid in pids]
                busy0, wall0 = machine_busy_seconds(), time.monotonic()
                result = clients.run_in_process(
                    clients.produce,
                    (cluster.bootstrap, topic, partitions, records, record_size, timeout,
                     {**overrides, **extra}),
                    timeout + 30,
                )
                result["broker_cpu"] = [cpu_seconds(p) - c for p, c in zip(pids, cpu0,
                                                                         strict=True)]
                result["machine_busy"] = ((machine_busy_seconds() - busy0)
                                          / (time.monotonic() - wall0))
                dead = [i for i in range(cluster.size) if not cluster.alive(i)]
                if dead:
                    raise RuntimeError(f"broker(s) {dead} died; see {cluster.log_path}")
                results.append((name, run_no, result))
    return report(results)


def report(results: list[tuple[str, int, dict[str, Any]]]) -> list[str]:
    head = (f"{'workload':<13} {'run':>3} {'records':>9} {'MB/s':>7} {'records/s':>9} "
            f"{'seconds':>7}  {'brokers':>7} {'(0/1/2)':>11} {'client':>6} {'machine':>7} "
            f"{'s/GB':>5}")
    lines = [f"{'':51}|--------- CPU, % of one core ----------| brokers", head,
             "-" * len(head)]
    for name, run_no, r in results:
        secs = r["seconds"]
        brokers = sum(r["broker_cpu"])
        each = "/".join(f"{100 * c / secs:.0f}" for c in r["broker_cpu"])
        lines.append(
            f"{name:<13} {run_no:>3} {r['records']:>9} {r['bytes'] / secs / 1e6:>7.1f} "
            f"{r['records'] / secs:>9.0f} {secs:>7.2f}  {100 * brokers / secs:>6.0f}% "
            f"{each:>11} {100 * r['client_cpu'] / secs:>5.0f}% "
            f"{100 * r['machine_busy']:>6.0f}% {brokers / (r['bytes'] / 1e9):>5.2f}"
        )
    return lines
