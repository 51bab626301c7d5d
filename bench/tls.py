"""``python -m bench tls``: what TLS costs, for kafkube and Apache Kafka, in one run.

One broker of each system in turn (Kafka first, stopped before kafkube starts), each with a
PLAINTEXT and an SSL listener on loopback (PEM key and trust stores, the same certificates
for both systems, TLS 1.3, no client authentication), the settings of
``bench.systems.SHARED_BROKER_CONFIG``. On each listener, a topic of ``--partitions``
partitions: an untimed warm-up, then the timed phases, each in a client process of its own
(confluent-kafka / librdkafka with ``bench.clients``' settings):

1. **produce**: ``--records`` values of ``--record-size`` bytes, acks=1, from the first
   ``produce()`` to the last delivery report;
2. **consume**: the same records read back from offset 0 without a group.

Figures: MB/s (10^6 B of values) and the broker's CPU seconds per GB, per system and
protocol; the TLS / PLAINTEXT ratio of each system and the kafkube / Kafka ratio of each.
Under TLS both lose zero-copy (sendfile): fetched bytes are read and encrypted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import shlex
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import clients, kafka
from bench.broker import BenchBroker
from bench.run_info import load_average, machine
from bench.systems import SHARED_BROKER_CONFIG
from kafkube.harness import kafka_jars
from kafkube.harness.procstat import cpu_seconds

PROTOCOLS = ("PLAINTEXT", "SSL")
SYSTEMS = ("kafka", "kafkube")


@dataclass(frozen=True)
class Broker:
    bootstraps: dict[str, str]  # by protocol
    pids: list[int]


def _certificates(root: Path) -> kafka.TlsFiles:
    from kafkube_operator.model.certificates import issue, new_ca

    now = dt.datetime.now(dt.UTC)
    ca = new_ca("bench CA", now)
    broker = issue(ca, "broker", now, ip_addresses=["127.0.0.1"], dns_names=["localhost"])
    (root / "ca.crt").write_text(ca.certificate)
    (root / "broker.pem").write_text(broker.keystore)
    return kafka.TlsFiles(root / "broker.pem", root / "ca.crt")


@contextlib.contextmanager
def _running(system: str, tls: kafka.TlsFiles, args: argparse.Namespace) -> Iterator[Broker]:
    if system == "kafka":
        with kafka.KafkaCluster(args.libs, 1, SHARED_BROKER_CONFIG, args.kafka_heap,
                                tls=tls) as cluster:
            yield Broker({"PLAINTEXT": cluster.bootstrap, "SSL": cluster.ssl_bootstrap},
                         cluster.pids())
        return
    overrides = {**SHARED_BROKER_CONFIG,
                 "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                 "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls.keystore),
                 "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls.ca)}
    with BenchBroker(args.partitions, overrides=overrides) as broker:
        yield Broker({"PLAINTEXT": broker.listeners["PLAINTEXT"],
                      "SSL": broker.listeners["SSL"]}, [broker.pid])


def _client_config(protocol: str, tls: kafka.TlsFiles) -> dict[str, str]:
    if protocol == "PLAINTEXT":
        return {}
    return {"security.protocol": "SSL", "ssl.ca.location": str(tls.ca)}


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)


def _phase(fn: Any, broker: Broker, bootstrap: str, topic: str, records: int,
           extra: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    before = sum(cpu_seconds(pid) for pid in broker.pids)
    raw = clients.run_in_process(
        fn, (bootstrap, topic, args.partitions, records, args.record_size, args.timeout, extra),
        args.timeout + 60)
    raw["broker_cpu"] = sum(cpu_seconds(pid) for pid in broker.pids) - before
    return raw


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="kafkube-bench-tls-") as tmp:
        tls = _certificates(Path(tmp))
        for system in args.systems:
            with _running(system, tls, args) as broker:
                for protocol in PROTOCOLS:
                    bootstrap = broker.bootstraps[protocol]
                    extra = _client_config(protocol, tls)
                    topic = f"bench-tls-{protocol.lower()}"
                    for name in (topic, f"{topic}-warmup"):
                        _create(broker.bootstraps["PLAINTEXT"], name, args.partitions)
                    clients.run_in_process(clients.produce, (
                        bootstrap, f"{topic}-warmup", args.partitions, args.warmup_records,
                        args.record_size, args.timeout, {"acks": "1", **extra}),
                        args.timeout + 60)
                    produced = _phase(clients.produce, broker, bootstrap, topic, args.records,
                                      {"acks": "1", **extra}, args)
                    consumed = _phase(clients.consume, broker, bootstrap, topic, args.records,
                                      extra, args)
                    for phase, raw in (("produce", produced), ("consume", consumed)):
                        rows.append({"system": system, "protocol": protocol, "phase": phase,
                                     "mbps": raw["bytes"] / raw["seconds"] / 1e6,
                                     "cpu_s_per_gb": raw["broker_cpu"] / (raw["bytes"] / 1e9),
                                     "seconds": raw["seconds"], "records": raw["records"]})
                    print(f"  {system} {protocol}: produce {rows[-2]['mbps']:.1f} MB/s, "
                          f"consume {rows[-1]['mbps']:.1f} MB/s", file=sys.stderr)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    def find(system: str, protocol: str, phase: str) -> dict[str, Any] | None:
        return next((r for r in rows if (r["system"], r["protocol"], r["phase"]) ==
                     (system, protocol, phase)), None)

    lines = ["| phase | system | PLAINTEXT MB/s | SSL MB/s | SSL / PLAINTEXT | "
             "broker CPU s/GB (PLAINTEXT → SSL) |", "|---|---|---:|---:|---:|---:|"]
    for phase in ("produce", "consume"):
        for system in SYSTEMS:
            plain, tls = find(system, "PLAINTEXT", phase), find(system, "SSL", phase)
            if plain is None or tls is None:
                continue
            lines.append(f"| {phase} | {system} | {plain['mbps']:.1f} | {tls['mbps']:.1f} | "
                         f"{tls['mbps'] / plain['mbps']:.2f} | {plain['cpu_s_per_gb']:.1f} → "
                         f"{tls['cpu_s_per_gb']:.1f} |")
        kafkube, kafka_tls = find("kafkube", "SSL", phase), find("kafka", "SSL", phase)
        if kafkube is not None and kafka_tls is not None:
            lines.append(f"| {phase} | kafkube / Kafka over SSL | | | "
                         f"{kafkube['mbps'] / kafka_tls['mbps']:.2f} | |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench tls", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--warmup-records", type=int, default=50_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--systems", type=lambda s: tuple(s.split(",")), default=SYSTEMS)
    parser.add_argument("--kafka-heap", default="1G")
    args = parser.parse_args(argv)
    if "kafka" in args.systems:
        args.libs = kafka_jars.ensure_jars()
    print(f"machine: {machine()}; load {load_average()}", file=sys.stderr)
    rows = run(args)
    print(f"\n$ python -m bench tls {shlex.join(argv)}\n")
    print(table(rows))
    return 0
