"""``python -m bench failover --kubernetes``: the failover figure of ``bench failover``, with
the brokers as pods of the reference deployment (deploy/kafkube.yaml) on a kind cluster the
e2e platform brings up here (or the cluster KAFKUBE_E2E_KUBECONFIG names).

A probe pod (tests/e2e/workload.py, ``acks=all``, idempotent) sends one numbered value every
15 ms to partition 0 of a topic with RF 3 and ``min.insync.replicas=2``, printing each send
and each acknowledgement with its wall-clock time; the bench follows its log. Each round
waits a random 0-2 s (one heartbeat interval: kills must not all fall at the same point of
the lease cycle), reads the leader of partition 0 and kills it (t0): by default a SIGKILL of
the broker's process from its node (a crash: no SIGTERM, no controlled shutdown, the pod left
alone; the kubelet restarts the container), with ``--delete-pods`` a deletion of its pod with
``--grace-period=0 --force`` (the kubelet then still sends SIGTERM first, so the broker mostly
shuts down in a controlled way; the StatefulSet recreates the pod on its volume). It measures
the **unavailability**: the longest time between two acknowledgements from t0 until the
broker is back. The next round starts once the pod was replaced or restarted, every broker
is Ready and no partition is under-replicated. At the end the partition is read back and
every acknowledged value must be there, where its acknowledgement said.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from bench.failover import summary
from kafkube.harness.kind.deployment import BOOTSTRAP, NAMESPACE, Brokers, deploy, undeploy
from kafkube.harness.kind.history import read_drain, read_produce
from kafkube.harness.kind.platform import (
    Cluster,
    build_images,
    existing_cluster,
    kind_down,
    kind_up,
)
from kafkube.harness.queue_checker import History

TOPIC = "kafkube-failover"
INTERVAL_S = 0.015
JITTER_S = 2.0  # broker.heartbeat.interval.ms's default


@dataclass
class Round:
    number: int
    killed: int
    unavailable_s: float | None = None
    whole_again_s: float | None = None


class ProbeLog:
    """Follows the probe pod's log (``kubectl logs -f``): send and ack times by value."""

    def __init__(self, cluster: Cluster, pod: str) -> None:
        self.sent: dict[int, float] = {}
        self.acked: dict[int, float] = {}
        self.lines: list[str] = []
        self.lock = threading.Lock()
        argv = [cluster.kubectl_bin, "-n", NAMESPACE, "logs", "-f", pod]
        if cluster.netns:
            argv = ["nsenter", f"--net=/var/run/netns/{cluster.netns}", "--", *argv]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                                        env={**os.environ, **cluster.env,
                                             "KUBECONFIG": str(cluster.kubeconfig)})
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            parts = line.split()
            with self.lock:
                self.lines.append(line)
                if parts[:1] == ["S"]:
                    self.sent[int(parts[1])] = int(parts[2]) / 1000
                elif parts[:1] == ["A"]:
                    self.acked[int(parts[1])] = int(parts[4]) / 1000

    def first_ack_after(self, moment: float) -> float | None:
        """When the first value sent after ``moment`` was acknowledged."""
        with self.lock:
            times = [self.acked[i] for i, at in self.sent.items()
                     if at > moment and i in self.acked]
        return min(times, default=None)

    def longest_silence(self, start: float, end: float) -> float:
        """The longest time between two acknowledgements from ``start`` to ``end``: the
        kubelet stops the container a moment after the deletion returns, so the first
        acks after it may still come from the old leader."""
        with self.lock:
            times = sorted(t for t in self.acked.values() if start <= t <= end)
        return max((b - a for a, b in pairwise(times)), default=0.0)

    def close(self) -> list[str]:
        self.process.wait(120)
        self.thread.join(30)
        return self.lines


def wait(predicate, timeout: float):
    deadline = time.monotonic() + timeout
    while (value := predicate()) is None:
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)
    return value


def incarnation(brokers: Brokers, broker: int) -> tuple[str, int]:
    """The broker's pod uid and container restarts: either changes once the kill took."""
    pod = json.loads(brokers.kubectl("get", "pod", f"kafkube-{broker}", "-o", "json"))
    restarts = sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", []))
    return pod["metadata"]["uid"], restarts


def run(kills: int, seed: int | None, delete_pods: bool = False,
        producer_props: dict[str, str] | None = None) -> tuple[int, list[str]]:
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    cluster = existing_cluster()
    ours = cluster is None
    if ours:
        print("building the images and bringing up a 4-node kind cluster ...", flush=True)
        build_images()
        cluster = kind_up("kafkube-bench")
    rounds: list[Round] = []
    lines: list[str] = []
    failed = False
    try:
        brokers = deploy(cluster)
        brokers.create_topic(TOPIC, 1)
        seconds = kills * 90 + 120
        pod = brokers.start("produce", BOOTSTRAP, TOPIC, "--partition", "0", "--acks", "all",
                            "--rate", str(1 / INTERVAL_S), "--seconds", str(seconds),
                            "--count", str(int(seconds / INTERVAL_S)), "--trace",
                            *(f"--config={k}={v}" for k, v in (producer_props or {}).items()))
        brokers.wait_running(pod, 120)
        probe = ProbeLog(cluster, pod)
        if wait(lambda: probe.first_ack_after(time.time() - 1), 120) is None:
            raise RuntimeError("the probe got no acknowledgement within 120 s")
        print(f"probe: one value every {INTERVAL_S * 1000:.0f} ms to {TOPIC}-0 (acks=all, "
              f"idempotent); kill-time jitter uniform 0-{JITTER_S:.0f} s, seed {seed}",
              flush=True)
        for number in range(1, kills + 1):
            time.sleep(rng.uniform(0, JITTER_S))  # the jitter itself, not a synchronisation
            leader = brokers.describe(TOPIC)[0][0]
            r = Round(number, leader)
            rounds.append(r)
            was = incarnation(brokers, leader)
            t0 = time.time()
            if delete_pods:
                brokers.kubectl("delete", "pod", f"kafkube-{leader}", "--grace-period=0",
                                "--force")
            else:
                brokers.crash(leader)
            # Until the pod is replaced or its container restarted, "whole" is the old one.
            if wait(lambda b=leader, was=was: (incarnation(brokers, b) != was) or None,
                    120) is None:
                raise RuntimeError(f"kafkube-{leader} was neither replaced nor restarted")
            brokers.wait_whole()
            r.whole_again_s = time.time() - t0
            acked = wait(lambda t0=t0: probe.first_ack_after(time.time() - 1), 60)
            if acked is None:
                print(f"kill {number}: the probe is not acknowledged since", flush=True)
                failed = True
                break
            r.unavailable_s = probe.longest_silence(t0 - 1, acked)
            print(f"kill {number}/{kills}: kafkube-{leader} (leader); writes stopped for "
                  f"{r.unavailable_s:.2f} s at most; back and in every ISR after "
                  f"{r.whole_again_s:.1f} s", flush=True)
        brokers.kubectl("delete", "pod", pod, "--wait=false")  # SIGTERM: it flushes and ends
        history = History()
        probe_lines = probe.close()
        saved = Path(tempfile.gettempdir()) / f"kafkube-failover-probe-{seed}.log"
        saved.write_text("".join(probe_lines))
        print(f"the probe's log: {saved}", flush=True)
        produced = read_produce(probe_lines, history)
        read_drain(brokers.run("drain", BOOTSTRAP, TOPIC, timeout=600), history)
        report = history.check()
        lines = ["",
                 summary("unavailability (longest time between two acks after the deletion)",
                         [r.unavailable_s for r in rounds if r.unavailable_s is not None]),
                 summary("broker back and every partition in sync again",
                         [r.whole_again_s for r in rounds if r.whole_again_s is not None]),
                 f"probe: {produced.sent} sent, {produced.acked} acknowledged; "
                 + ("no acknowledged value lost" if report.ok(idempotent=True)
                    else report.summary())]
        failed = failed or not report.ok(idempotent=True)
    finally:
        if ours:
            kind_down("kafkube-bench")
        else:
            undeploy(cluster)
    return (1 if failed else 0), lines

