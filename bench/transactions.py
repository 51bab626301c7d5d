"""``python -m bench transactions``: transactional produce throughput, kafkube beside Apache
Kafka, in one run, on both transaction protocols.

The cluster shape is that of ``bench compare``'s acks=all produce figure (its workload 2):
3 brokers, topics of 16 partitions with RF 3 and ``min.insync.replicas=2``, the broker
settings of ``bench.systems.SHARED_BROKER_CONFIG``. Kafka runs first on a fresh cluster,
stopped before kafkube's fresh cluster starts (``bench.systems.running``). Both clusters are
new, so both finalize ``transaction.version`` 2 (KIP-890 part 2); which protocol a
transaction uses is the client's choice.

On each cluster, after an untimed warm-up (every producer, ``--warmup-records`` each), three
producer processes, each to a topic of its own, ``--records`` values of 1 KiB sent
round-robin over the partitions:

1. **idempotent**, the baseline: confluent-kafka (librdkafka), ``bench.clients``'s settings
   (linger.ms=5, batch.size=1 MiB, no compression), ``enable.idempotence=true``, acks=all;
   timed from the first ``produce()`` to the last delivery report (``bench.clients.produce``);
2. **transactional, TV1**: the same librdkafka producer with a ``transactional.id``.
   librdkafka speaks the protocol before KIP-890 part 2 (AddPartitionsToTxn before the
   records, EndTxn v4 or below, no epoch bump per transaction) whatever the cluster
   finalizes. ``init_transactions()`` (untimed), then ``begin_transaction()``,
   ``--transaction-size`` records, ``commit_transaction()``, again and again; timed from the
   first ``produce()`` to the return of the last commit. Commit latency is the time
   ``commit_transaction()`` takes (it flushes what is still queued, then ends the
   transaction through the coordinator);
3. **transactional, TV2**: the same loop with the Apache Kafka Java client of the Kafka
   release under test (``TxnCheck bench``, tests/clients/java-txn, run with the Kafka
   jars of ``bench.kafka``), which picks transaction.version 2 from the finalized feature:
   EndTxn v5 bumping the epoch, Produce v12 adding the partitions, no AddPartitionsToTxn.
   Settings: ``bench.compare_workloads.JAVA_PRODUCER`` (linger.ms=5, batch.size=1 MiB, no
   compression, buffer.memory 64 MiB) with acks=all and idempotence.

Proof of the protocol, in the raw table: ``kafka-features.sh describe``
(``org.apache.kafka.tools.FeatureCommand``) on each cluster; on kafkube, the requests each
broker answered per API version over the run (``kafka_network_requests_total``, metrics on
for that; they are on by default); for the Java client, its own ``isTransactionV2Enabled()``,
its debug line "Updating isTV2 enabled to ..." and the API versions of the requests it sent
(its NetworkClient's debug lines, filtered to a file).

Figures: MB/s (10^6 B of values), records/s, transactions/s, commit latency p50/p99, and the
ratio kafkube / Kafka; the raw table adds broker CPU and the end offsets' excess over the
records written (``markers``: the commit markers, one per partition and transaction).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from bench import clients, kafka
from bench.arguments import comma_list
from bench.compare_workloads import JAVA_PRODUCER
from bench.figures import Figure, percentile, raw_table, table
from bench.profile import PySpy, summarise
from bench.run_info import ROOT, commit, load_average, machine
from bench.systems import PARTITIONS, SYSTEMS, Meter, Running, create_topic, measure_each, running
from kafkube.harness import kafka_jars
from kafkube.harness.checkout import cache_dir
from kafkube.harness.process_group import kill_group

BROKERS, RF = 3, 3  # bench compare's workload 2: acks=all, RF 3, minISR 2, 3 brokers
TOPIC_CONFIG = {"min.insync.replicas": "2"}
IDEMPOTENT = {"acks": "all", "enable.idempotence": True}
NAMES = {1: "idempotent producer (baseline)",
         2: "transactional producer, TV1 protocol",
         3: "transactional producer, TV2 protocol"}
CLIENTS = {1: "rdkafka", 2: "rdkafka", 3: "java"}
# The Java producer: bench compare's settings (those of bench.clients.PRODUCER_CONFIG), with
# acks=all and idempotence as a transactional producer needs (TxnCheck sets both anyway).
JAVA_TXN_PRODUCER = {**JAVA_PRODUCER, "acks": "all", "enable.idempotence": "true"}
JAVA_TXN_DIR = ROOT / "tests" / "clients" / "java-txn"
# kafkube's metrics that show the protocol spoken (served requests by API and version).
SERVED_APIS = ("EndTxn", "AddPartitionsToTxn", "Produce")
_METRICS_LINE = re.compile(r"kafkube broker (\d+) listening on .*?metrics on http://\*:(\d+)/")
_SAMPLE = re.compile(r'^kafka_network_requests_total\{api="(\w+)",version="(\d+)"\}\s+(\S+)$')
_LATENCY = re.compile(r'^kafka_network_request_latency_seconds_(sum|count)\{api="(\w+)"\}\s+(\S+)$')
_FEATURE = re.compile(r"Feature: (\S+)\s+SupportedMinVersion: (\S+)\s+SupportedMaxVersion: "
                      r"(\S+)\s+FinalizedVersionLevel: (\S+)")
_SENT = re.compile(r"Sending (\w+) request with header RequestHeader\(apiKey=\w+, "
                   r"apiVersion=(\d+)")
_TV2_LINE = re.compile(r"Updating isTV2 enabled to \S+ with FinalizedFeaturesEpoch \S+")
# The Java client's log: warnings to stderr; its sent requests' headers and its TV2 decision
# (both debug lines) to a file, the other debug lines of those two classes dropped. (Kafka's
# LogContext loggers format a message before handing it on, so the filter sees it whole.)
JAVA_LOG4J = """status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
appender.proto.type = File
appender.proto.name = PROTO
appender.proto.fileName = {path}
appender.proto.layout.type = PatternLayout
appender.proto.layout.pattern = %m%n
appender.proto.filter.tv.type = RegexFilter
appender.proto.filter.tv.regex = .*(Sending .* request with header|Updating isTV2).*
appender.proto.filter.tv.useRawMsg = true
appender.proto.filter.tv.onMatch = ACCEPT
appender.proto.filter.tv.onMismatch = DENY
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
logger.nc.name = org.apache.kafka.clients.NetworkClient
logger.nc.level = DEBUG
logger.nc.additivity = false
logger.nc.appenderRef.proto.ref = PROTO
logger.nc.appenderRef.err.ref = STDERR
logger.nc.appenderRef.err.level = WARN
logger.tm.name = org.apache.kafka.clients.producer.internals.TransactionManager
logger.tm.level = DEBUG
logger.tm.additivity = false
logger.tm.appenderRef.proto.ref = PROTO
logger.tm.appenderRef.err.ref = STDERR
logger.tm.appenderRef.err.level = WARN
"""


def commit_figures(commit_ms: list[float]) -> dict[str, Any]:
    return {"transactions": len(commit_ms), "commit_p50_ms": round(percentile(commit_ms, 0.5), 2),
            "commit_p99_ms": round(percentile(commit_ms, 0.99), 2),
            "commit_max_ms": round(max(commit_ms), 2),
            "commit_mean_ms": round(sum(commit_ms) / len(commit_ms), 2)}


def markers(bootstrap: str, topic: str, partitions: int, records: int, txn_size: int,
            delivered: int) -> dict[str, int]:
    """Untimed: the end offsets' excess over the records, the commit markers. The coordinator
    writes them after EndTxn has been answered, so the last ones may take a moment."""
    from confluent_kafka import Consumer, TopicPartition

    expected = sum(min(txn_size, records - s, partitions) for s in range(0, records, txn_size))
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-txn-offsets"})
    try:
        until = time.monotonic() + 10
        while True:
            end = sum(reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                      for p in range(partitions))
            if end - delivered >= expected or time.monotonic() > until:
                break
            time.sleep(0.1)
    finally:
        reader.close()
    return {"markers": end - delivered, "markers_expected": expected}


def transactional_produce(
    bootstrap: str, topic: str, partitions: int, records: int, record_size: int,
    txn_size: int, timeout: float,
) -> dict[str, Any]:
    """Send ``records`` values in transactions of ``txn_size``; runs in its own process."""
    from confluent_kafka import Producer

    deadline = time.monotonic() + timeout
    delivered = failed = 0
    first_error: str | None = None

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered, failed, first_error
        if err is None:
            delivered += 1
        else:
            failed += 1
            first_error = first_error or str(err)

    producer = Producer({"bootstrap.servers": bootstrap, "on_delivery": on_delivery,
                         **clients.PRODUCER_CONFIG, **IDEMPOTENT,
                         "transactional.id": f"bench-txn-{os.getpid()}-{time.time_ns()}"})
    clients.check_topic(producer, topic, partitions, deadline)
    t0 = time.perf_counter()
    producer.init_transactions(max(1.0, deadline - time.monotonic()))
    init_s = time.perf_counter() - t0
    payload = os.urandom(record_size)
    send, poll = producer.produce, producer.poll
    commits: list[float] = []
    cpu0, main0 = time.process_time(), time.thread_time()
    start = time.perf_counter()
    sent = 0
    while sent < records:
        producer.begin_transaction()
        for i in range(sent, min(records, sent + txn_size)):
            while True:
                try:
                    send(topic, payload, partition=i % partitions)
                    break
                except BufferError:
                    poll(0.01)
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"only {i} of {records} queued") from None
            if not i & 0x3FF:
                poll(0)
        sent = min(records, sent + txn_size)
        began = time.perf_counter()
        producer.commit_transaction(max(1.0, deadline - time.monotonic()))
        commits.append(1e3 * (time.perf_counter() - began))
    seconds = time.perf_counter() - start
    cpu, main = time.process_time() - cpu0, time.thread_time() - main0
    producer.poll(0)
    if failed or delivered != records:
        raise RuntimeError(f"{delivered} of {records} delivered, {failed} failed "
                           f"({first_error})")
    return {"records": delivered, "bytes": delivered * record_size, "seconds": seconds,
            "client_cpu": cpu, "client_main_cpu": main,
            "init_transactions_ms": round(1e3 * init_s, 1), **commit_figures(commits),
            **markers(bootstrap, topic, partitions, records, txn_size, delivered)}


# -- the Java client (transaction.version 2) ------------------------------------------------

def ensure_java_txn(timeout: float = 900.0) -> Path:
    """Build TxnCheck (tests/clients/java-txn/setup.sh, a no-op once built); its classes dir.
    It is compiled against the suite's kafka-clients and run here with the Kafka jars of
    ``bench.kafka`` (``TxnCheck bench`` uses the producer API only)."""
    done = subprocess.run(["bash", str(JAVA_TXN_DIR / "setup.sh")], capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{JAVA_TXN_DIR / 'setup.sh'} failed:\n{done.stderr[-4000:]}")
    cache = cache_dir()
    classes = cache / "java-txn-classes"
    if not (classes / "TxnCheck.class").is_file():
        raise RuntimeError(f"no TxnCheck.class in {classes} after setup.sh")
    return classes


def java_transactional_produce(bootstrap: str, topic: str, records: int,
                               args: argparse.Namespace) -> dict[str, Any]:
    """``TxnCheck bench`` in a JVM of its own (kafka-producer-perf-test.sh's JVM options),
    with the Kafka release's client jars; its JSON, with the requests it sent by version."""
    with tempfile.TemporaryDirectory(prefix="kafkube-bench-java-txn-") as tmp:
        proto_log, config = Path(tmp) / "protocol.log", Path(tmp) / "log4j2.properties"
        config.write_text(JAVA_LOG4J.format(path=proto_log))
        command = [
            *kafka._SETPRIV, "java", f"-Xmx{kafka.TOOL_HEAP}", *kafka.JVM_PERFORMANCE_OPTS,
            f"-Dlog4j2.configurationFile={config}", "-cp",
            f"{args.java_classes}{os.pathsep}{args.libs}/*", "TxnCheck", "bench",
            "--bootstrap", bootstrap, "--topic", topic,
            "--transactional-id", f"bench-txn-java-{time.time_ns()}",
            "--records", str(records), "--per-transaction", str(args.transaction_size),
            "--record-size", str(args.record_size), "--timeout-s", str(int(args.timeout)),
            *(f"--producer-prop={k}={v}" for k, v in JAVA_TXN_PRODUCER.items()),
        ]
        with (Path(tmp) / "out").open("w+") as out, (Path(tmp) / "err").open("w+") as err:
            proc = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                code = proc.wait(args.timeout + 120)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                kill_group(proc, 0)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        result = json.loads(lines[-1]) if lines else {}
        if code != 0 or not result.get("ok"):  # keep its whole output and request log
            kept = Path(tempfile.mkdtemp(prefix="kafkube-bench-java-txn-failed-"))
            shutil.copytree(tmp, kept, dirs_exist_ok=True)
            raise RuntimeError(f"TxnCheck bench failed (exit {code}; its stdout, stderr and "
                               f"sent requests kept in {kept}): {stdout[-2000:]}"
                               f"{stderr[-3000:]}")
        log_text = proto_log.read_text(errors="replace") if proto_log.exists() else ""
    sent = Counter(f"{api} v{version}" for api, version in _SENT.findall(log_text))
    tv2_lines = sorted(set(_TV2_LINE.findall(log_text)))
    partitions = result["partitions"]
    raw = {"records": result["records"], "bytes": result["records"] * args.record_size,
           "seconds": result["seconds"], "client_cpu": result["client_cpu"],
           "init_transactions_ms": round(result["init_transactions_ms"], 1),
           **commit_figures(result["commit_ms"]),
           **markers(bootstrap, topic, partitions, records, args.transaction_size,
                     result["records"]),
           "client": f"kafka-clients {result['client_version']}",
           "client_tv2": result["transaction_v2"],
           "client_log": "; ".join(tv2_lines) or "no isTV2 line",
           "client_sent": ", ".join(f"{k} x{n}" for k, n in sorted(sent.items())
                                    if k.split()[0] in ("END_TXN", "ADD_PARTITIONS_TO_TXN",
                                                        "PRODUCE", "INIT_PRODUCER_ID"))}
    if "ADD_PARTITIONS_TO_TXN" in raw["client_sent"] or not result["transaction_v2"]:
        raise RuntimeError(f"the Java client did not speak transaction.version 2: {raw}")
    return raw


# -- evidence: the finalized feature, the requests served ---------------------------------

def features(env: Running, libs: Path) -> dict[str, str]:
    """``kafka-features.sh describe``: feature -> "finalized N (supported A-B)"."""
    out = kafka.run_tool(libs, "FeatureCommand",
                         ["--bootstrap-server", env.bootstrap, "describe"], 120)
    return {name: f"finalized {level} (supported {low}-{high})"
            for name, low, high, level in _FEATURE.findall(out)}


def metrics_ports(env: Running) -> dict[int, int]:
    """kafkube: broker -> metrics port, from the brokers' listening lines in their log."""
    text = Path(env.where).read_text(errors="replace")
    return {int(node): int(port) for node, port in _METRICS_LINE.findall(text)}


def served(ports: dict[int, int]) -> dict[tuple[str, str, int], float]:
    """kafkube, for ``SERVED_APIS``: (API, version, broker) -> requests answered so far, and
    (API, "sum"/"count", broker) -> their latency histogram's sum (seconds) and count."""
    counts: dict[tuple[str, str, int], float] = {}
    for node, port in ports.items():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                match = _SAMPLE.match(line)
                if match and match[1] in SERVED_APIS:
                    counts[match[1], match[2], node] = float(match[3])
                match = _LATENCY.match(line)
                if match and match[2] in SERVED_APIS:
                    counts[match[2], match[1], node] = float(match[3])
    return counts


def served_text(before: dict[tuple[str, str, int], float],
                after: dict[tuple[str, str, int], float], brokers: int) -> dict[str, str]:
    """Per API: "v5: 101+99+100" (each broker's requests of that version over the span), and
    the mean time from decoded to answered over the span, all brokers, in ms."""
    out: dict[str, str] = {}

    def delta(api: str, key: str, broker: int) -> float:
        return after.get((api, key, broker), 0) - before.get((api, key, broker), 0)
    for api in SERVED_APIS:
        parts = []
        for version in sorted({int(v) for a, v, _ in after if a == api and v.isdigit()}):
            per = [int(delta(api, str(version), b)) for b in range(brokers)]
            if any(per):
                parts.append(f"v{version}: {'+'.join(map(str, per))}")
        out[f"served_{api}"] = ", ".join(parts) or "none"
        count = sum(delta(api, "count", b) for b in range(brokers))
        if count:
            seconds = sum(delta(api, "sum", b) for b in range(brokers))
            out[f"mean_ms_{api}"] = f"{1e3 * seconds / count:.1f}"
    return out


# -- the workloads --------------------------------------------------------------------------

def idempotent(env: Running, topic: str, records: int, args: argparse.Namespace
               ) -> dict[str, Any]:
    meter = Meter(env)
    return meter.done(clients.run_in_process(
        clients.produce, (env.bootstrap, topic, PARTITIONS, records, args.record_size,
                          args.timeout, IDEMPOTENT), args.timeout + 60))


def transactional(env: Running, topic: str, records: int, args: argparse.Namespace
                  ) -> dict[str, Any]:
    meter = Meter(env)
    return meter.done(clients.run_in_process(
        transactional_produce, (env.bootstrap, topic, PARTITIONS, records, args.record_size,
                                args.transaction_size, args.timeout), args.timeout + 60))


def java_transactional(env: Running, topic: str, records: int, args: argparse.Namespace
                       ) -> dict[str, Any]:
    meter = Meter(env)
    return meter.done(java_transactional_produce(env.bootstrap, topic, records, args))


WORKLOADS = {1: idempotent, 2: transactional, 3: java_transactional}


def run_system(system: str, args: argparse.Namespace, log: Any) -> list[Figure]:
    figures: list[Figure] = []

    def add(workload: int, metric: str, better: str, value: float, raw: dict[str, Any]) -> None:
        figures.append(Figure(workload, NAMES[workload], CLIENTS[workload], metric, better,
                              system, round(value, 3), raw))

    log(f"{system}: starting {BROKERS} brokers ...")
    with running(system, BROKERS, args, args.libs) as env:
        log(f"{system}: up on {env.bootstrap}")
        feature = features(env, args.libs)
        tv = feature.get("transaction.version", "not listed")
        log(f"  {system:<8} kafka-features.sh describe: transaction.version {tv}")
        ports = metrics_ports(env) if system == "kafkube" else {}
        if system == "kafkube" and len(ports) != BROKERS:
            raise RuntimeError(f"kafkube: metrics ports {ports}, not one per broker")
        if args.warmup_records:
            log(f"  {system:<8} warm-up: {args.warmup_records:,} records, each producer, "
                "untimed ...")
            for workload in args.workloads:
                create_topic(env, f"warmup-{workload}", RF, TOPIC_CONFIG)
                WORKLOADS[workload](env, f"warmup-{workload}", args.warmup_records, args)
        for workload in args.workloads:
            topic = f"txn-bench-{workload}"
            create_topic(env, topic, RF, TOPIC_CONFIG)
            before = served(ports)
            with contextlib.ExitStack() as spies:
                if args.profile and system == "kafkube":
                    for node, pid in enumerate(env.pids()):
                        path = args.profile / f"kafkube-{workload}-broker-{node}.txt"
                        spies.enter_context(PySpy(pid, path))
                        args.profiles.append(path)
                raw = WORKLOADS[workload](env, topic, args.records, args)
            if workload > 1:
                raw["transaction.version"] = tv
            if ports:
                raw.update(served_text(before, served(ports), BROKERS))
            secs = raw["seconds"]
            add(workload, "MB/s", "higher", raw["bytes"] / secs / 1e6, raw)
            add(workload, "records/s", "higher", raw["records"] / secs, raw)
            line = f"{raw['bytes'] / secs / 1e6:.1f} MB/s, {raw['records'] / secs:,.0f} records/s"
            if workload > 1:
                add(workload, "transactions/s", "higher", raw["transactions"] / secs, raw)
                add(workload, "commit p50 ms", "lower", raw["commit_p50_ms"], raw)
                add(workload, "commit p99 ms", "lower", raw["commit_p99_ms"], raw)
                line += (f", {raw['transactions'] / secs:,.1f} transactions/s, commit p50 "
                         f"{raw['commit_p50_ms']} ms p99 {raw['commit_p99_ms']} ms")
            log(f"  {system:<8} {NAMES[workload]} ({CLIENTS[workload]}): {line}")
            for key in ("served_EndTxn", "served_AddPartitionsToTxn", "mean_ms_Produce",
                        "mean_ms_AddPartitionsToTxn", "mean_ms_EndTxn", "client_sent",
                        "client_log"):
                if key in raw:
                    log(f"  {system:<8}   {key}: {raw[key]}")
    log(f"{system}: stopped")
    return figures


def _rdkafka_version() -> str:
    import confluent_kafka

    return f"{confluent_kafka.version()} / librdkafka {confluent_kafka.libversion()[0]}"


def _command(argv: list[str]) -> str:
    python = os.path.relpath(sys.executable, Path.cwd())
    python = sys.executable if python.startswith("..") else python
    return shlex.join([python, "-m", "bench", "transactions", *argv])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench transactions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000,
                        help="records per timed producer run (300000)")
    parser.add_argument("--transaction-size", type=int, default=1000,
                        help="records per transaction (1000)")
    parser.add_argument("--record-size", type=int, default=1024, help="value bytes (1024)")
    parser.add_argument("--warmup-records", type=int, default=100_000,
                        help="records each producer sends untimed on every fresh cluster "
                             "first (100000; 0 for none)")
    parser.add_argument("--systems", type=comma_list(SYSTEMS), default=list(SYSTEMS),
                        help="kafka,kafkube (both; one alone prints no ratios)")
    parser.add_argument("--workloads", type=comma_list(None, int), default=sorted(WORKLOADS),
                        help="1 idempotent, 2 transactional TV1 (librdkafka), 3 transactional "
                             "TV2 (Java client); default 1,2,3")
    parser.add_argument("--kafka-heap", default="1G", help="each Kafka node's -Xmx/-Xms (1G)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds allowed per client run (300)")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="sample each kafkube broker with py-spy during the timed runs "
                             "(raw stacks and a summary into DIR; needs py-spy)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the clusters' data dirs and logs (kept anyway on failure)")
    args = parser.parse_args(argv)
    if min(args.records, args.transaction_size, args.record_size) < 1 \
            or args.warmup_records < 0:
        parser.error("--records, --transaction-size and --record-size must be at least 1")
    if not set(args.workloads) <= set(WORKLOADS):
        parser.error(f"--workloads: each of {sorted(WORKLOADS)}")
    # kafkube's metrics on (their default, 9404; here a free port per broker): the requests
    # served by API version show which transaction protocol each producer spoke.
    args.kafkube_config = [("kafkube.metrics.port", "0")]
    args.profiles = []
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)

    def on_term(_sig: int, _frame: Any) -> None:  # unwind through every finally, as Ctrl-C
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    wall0 = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - wall0:7.1f}s] {text}", flush=True)

    java_settings = " ".join(f"{k}={v}" for k, v in JAVA_TXN_PRODUCER.items())
    header = [
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}, commit {commit()}, `{_command(argv)}`",
        f"- machine: {machine()}; load average at start {load_average()}",
        f"- {BROKERS} brokers, topics of {PARTITIONS} partitions, RF {RF}, min.insync.replicas "
        f"2, acks=all; {args.records:,} records of {args.record_size} B per producer "
        f"({args.records * args.record_size / 1e6:.0f} MB), transactions of "
        f"{args.transaction_size:,}; linger.ms={clients.PRODUCER_CONFIG['linger.ms']}, "
        f"batch.size={clients.PRODUCER_CONFIG['batch.size']}, compression none; "
        f"{args.warmup_records:,} records per producer untimed first",
        f"- Apache Kafka {kafka_jars.version()}: KRaft, 3 combined broker+controller nodes, "
        f"-Xmx{args.kafka_heap}; kafkube: `python -m kafkube broker`, metrics on",
        f"- clients: confluent-kafka {_rdkafka_version()} (TV1 protocol); Apache Kafka Java "
        f"client {kafka_jars.version()} (TV2), {java_settings}, JVM -Xmx{kafka.TOOL_HEAP} G1, "
        f"{kafka.java_version()}",
    ]
    print("\n".join(header), flush=True)
    # The Kafka jars: Kafka's brokers and tools, and the Java client that TxnCheck runs with.
    args.libs = kafka_jars.ensure_jars()
    args.java_classes = ensure_java_txn() if 3 in args.workloads else None
    outcome = measure_each(args.systems, lambda system: run_system(system, args, log))
    if outcome is None:
        return 130
    figures, failed = outcome
    header.append(f"- took {(time.monotonic() - wall0) / 60:.1f} min; load average at end "
                  f"{load_average()}")
    print()
    print("\n".join(header[1:]))
    if figures:
        print()
        print(table(figures, markdown=True))
        print()
        print(raw_table(figures))
    for path in args.profiles:
        print(f"\nbroker profile, {path.stem} (py-spy; raw stacks: {path}):")
        print(summarise(path, top=25))
    print(f"\nratio: kafkube / Kafka\nmachine: {machine()}\ncommand: {_command(argv)}")
    if failed is not None:
        print(f"FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
