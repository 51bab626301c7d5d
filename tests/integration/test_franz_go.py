"""franz-go, the Go Kafka client, against a 3-broker cluster (RF 3, min.insync.replicas 2).

franz-go takes paths the Java client and librdkafka do not: it pipelines transactional produce
requests on one connection while one of them waits for the coordinator's verification, and its
GroupTransactSession aborts a transaction whenever the group rebalances under it. It found a
real bug that way (issue 28: those pipelined requests appended out of order and were refused
with OUT_OF_ORDER_SEQUENCE_NUMBER), so it is one of the suite's clients.

The program is tests/clients/franz-go (``franzcheck``), built from the Go module proxy by its
setup.sh (called from scripts/setup.sh); each run prints one JSON object that the tests here
check against what Python reads back with confluent_kafka. A missing or stale build fails the
tests: the suite promises this client works.

The etl test runs at each transaction.version in ``TRANSACTION_VERSIONS``; the idempotent
producer does not depend on it. At level 2 franz-go showed a second problem: a leader gave
the coordinator's CONCURRENT_TRANSACTIONS for a Produce v12's add (the previous transaction's
markers still being written) to the producer as NOT_ENOUGH_REPLICAS at once, which cost
franz-go a metadata refresh, up to 5 s, per transaction, until leaders retried the add
themselves as Kafka's do.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

import pytest

from kafkube.harness.checkout import cache_dir
from kafkube.harness.metadata import Cluster
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until
from tests.integration.test_durability import drain
from tests.integration.test_java_transactions import _committed, _fill
from tests.integration.test_transactions import _read_all
from tests.support import CLIENTS_DIR

FRANZ_DIR = CLIENTS_DIR / "franz-go"
# Past a run's own --timeout: the produce mode's --drain (30 s) and a margin.
GRACE_S = 45.0

SETTINGS = {
    "min.insync.replicas": "2",
    "transaction.state.log.num.partitions": "5",
    "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
}

# The transaction.version levels the etl test runs at: the cluster is set to each
# (Cluster.finalize_feature) before franz-go starts, and franz-go picks its protocol by what
# ApiVersions advertises (at 2: EndTxn v5 bumping the epoch, Produce v12 and TxnOffsetCommit
# v5 having the broker add the partition and the group).
TRANSACTION_VERSIONS = (1, 2)

ETL_RECORDS = 30_000
ETL_PARTITIONS = 6
ETL_TIMEOUT_S = 75  # a run takes 4-20 s on 2 busy cores
PRODUCE_RECORDS = 12_000
PRODUCE_PARTITIONS = 3
PRODUCE_RATE = 400  # records a second: the run lasts ~30 s, long enough for a leader's failover
PRODUCE_TIMEOUT_S = 90


# --------------------------------------------------------------------------- the program


def franzcheck() -> Path:
    """The built program; fails the test if it is missing or older than its sources."""
    hint = "build it with scripts/setup.sh (or: bash tests/clients/franz-go/setup.sh)"
    cache = cache_dir()
    out = cache / "franz-go"
    binary = out / "franzcheck"
    if not binary.is_file():
        pytest.fail(f"franzcheck is not built: {binary} is missing; {hint}", pytrace=False)
    # What setup.sh writes: `sha1sum` of every *.go, go.mod and go.sum, sorted by name.
    names = sorted([p.name for p in FRANZ_DIR.glob("*.go")] + ["go.mod", "go.sum"])
    wanted = "\n".join(f"{hashlib.sha1((FRANZ_DIR / n).read_bytes()).hexdigest()}  {n}"
                       for n in names)
    built = (out / ".inputs").read_text().strip() if (out / ".inputs").is_file() else ""
    if built != wanted:
        pytest.fail(f"{binary} is stale (a source, go.mod or go.sum changed); {hint}",
                    pytrace=False)
    return binary


class Run:
    """One started franzcheck. Output goes to files (a full pipe would block it); ``wait``
    parses the JSON line. Started with SIGKILL as its parent-death signal, so that a killed
    test run leaves no program behind."""

    def __init__(self, mode: str, options: dict[str, object], timeout_s: float,
                 scratch: Path) -> None:
        command = [str(franzcheck()), mode]
        for name, value in options.items():
            flag = f"--{name.replace('_', '-')}"
            # Go's flag package takes a boolean only as --flag=value.
            command += [f"{flag}={str(value).lower()}"] if isinstance(value, bool) else \
                [flag, str(value)]
        command += ["--timeout", f"{timeout_s:.0f}s"]
        if shutil.which("setpriv"):
            command[:0] = ["setpriv", "--pdeathsig", "KILL", "--"]
        self.argv = command
        self.timeout_s = timeout_s
        scratch.mkdir(parents=True, exist_ok=True)
        self.stdout_path, self.stderr_path = scratch / f"{mode}.out", scratch / f"{mode}.err"
        self._out: IO[bytes] = self.stdout_path.open("wb")
        self._err: IO[bytes] = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(command, stdout=self._out, stderr=self._err,
                                     stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL it if it still runs (a test that fails before ``wait``)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._out.close()
        self._err.close()

    def stderr_tail(self, lines: int = 40) -> str:
        text = self.stderr_path.read_bytes().decode(errors="replace")
        return "\n".join(text.strip().splitlines()[-lines:])

    def wait(self) -> dict[str, Any]:
        """Its JSON, once it has ended (bounded by its own deadline plus ``GRACE_S``)."""
        try:
            self.proc.wait(self.timeout_s + GRACE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            pytest.fail(f"{' '.join(self.argv)} did not end in {self.timeout_s + GRACE_S:.0f}s;"
                        f" stderr:\n{self.stderr_tail()}")
        finally:
            self._out.close()
            self._err.close()
        lines = self.stdout_path.read_text(errors="replace").splitlines()
        try:
            data = json.loads(lines[-1])
            assert isinstance(data, dict) and len(lines) == 1
        except (IndexError, ValueError, AssertionError):
            pytest.fail(f"{' '.join(self.argv)} (exit {self.proc.returncode}) printed no single"
                        f" JSON line: {lines[-3:]!r}\nstderr:\n{self.stderr_tail()}")
        assert data.get("ok") is (self.proc.returncode == 0), self.describe(data)
        return data

    def describe(self, data: dict[str, Any]) -> str:
        shown = {k: v for k, v in data.items() if k != "acked"}
        return (f"{' '.join(self.argv)}\nexit {self.proc.returncode}\n"
                f"result: {json.dumps(shown)[:4000]}\nstderr (last lines):\n{self.stderr_tail()}")


# --------------------------------------------------------------------------- etl


ETL_CASES = [pytest.param(tv, balancer, server_side,
                          id=f"tv{tv}-{balancer}-{'kip848' if server_side else 'classic'}")
             for tv, balancer, server_side in [
                 *((tv, b, False) for tv in TRANSACTION_VERSIONS
                   for b in ("range", "cooperative-sticky")),
                 (2, "range", True)]]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("transaction_version,balancer,server_side", ETL_CASES)
def test_franz_go_etl_is_exactly_once_through_rebalances_and_aborts(
        cluster_factory, transaction_version: int, balancer: str, server_side: bool,
        tmp_path: Path) -> None:
    """Three members copy the input in transactions while members leave and join and some
    transactions abort: read_committed, the output is every input record exactly once. With
    ``server_side``, the members speak Kafka 4's consumer group protocol (KIP-848): the broker
    assigns, and the transactions commit offsets with member epochs."""
    franzcheck()  # a missing build fails the test before any broker starts
    cluster: Cluster = cluster_factory(3, SETTINGS)
    cluster.finalize_feature("transaction.version", transaction_version)
    cluster.create_topic("franz-in", ETL_PARTITIONS, 3)
    cluster.create_topic("franz-out", ETL_PARTITIONS, 3)
    values = [f"r{i}" for i in range(ETL_RECORDS)]
    _fill(cluster, "franz-in", values, partitions=ETL_PARTITIONS)
    group = f"franz-etl-{balancer}"
    run = Run("etl", {
        "bootstrap": cluster.bootstrap, "input": "franz-in", "output": "franz-out",
        "group": group, "records": ETL_RECORDS, "members": 3, "leaves": 3,
        "balancer": balancer, "abort_rate": 0.1, "seed": 28, "poll_records": 500,
        "server_side": server_side,
    }, ETL_TIMEOUT_S, tmp_path / "franz")
    data = run.wait()
    print("etl: " + ", ".join(f"{k} {data.get(k)}" for k in (
        "transactions_committed", "aborts_chosen", "aborts_rebalance", "members_started",
        "members_left", "assignments", "revocations", "losses", "elapsed_ms")))
    assert data["ok"], run.describe(data)
    # The run must have had what it is about, or the rest proves little.
    assert data["aborts_chosen"] >= 1, run.describe(data)
    assert data["members_left"] >= 1 and data["members_started"] > 3, run.describe(data)
    assert data["revocations"] + data["losses"] >= 1, run.describe(data)

    out = Counter(v.decode() for _, _, v in
                  _read_all(cluster, "franz-out", ETL_PARTITIONS, "read_committed"))
    expected = Counter(f"{v}:etl" for v in values)
    missing, extra = expected - out, out - expected
    assert not missing and not extra, (
        f"read_committed: {sum(missing.values())} inputs missing (e.g. {sorted(missing)[:5]}), "
        f"{sum(extra.values())} extra (e.g. {sorted(extra.items())[:5]})\n" + run.describe(data))
    # What the aborted transactions wrote is in the log, hidden from read_committed only.
    raw = _read_all(cluster, "franz-out", ETL_PARTITIONS, "read_uncommitted")
    assert len(raw) >= ETL_RECORDS + data["records_aborted_flushed"], (len(raw), data)
    # The input offsets were committed in the transactions, up to the end.
    assert _committed(cluster, group, "franz-in", ETL_PARTITIONS) == ETL_RECORDS
    # franz-go spoke the protocol of the level: EndTxn v5 (its epoch bumped by each) at 2.
    end_txn = cluster.requests_served("EndTxn")
    assert end_txn and all((v >= 5) == (transaction_version >= 2) for v in end_txn), end_txn
    # And the group protocol asked for: KIP-848 heartbeats, or JoinGroup.
    assert bool(cluster.requests_served("ConsumerGroupHeartbeat")) == server_side
    assert bool(cluster.requests_served("JoinGroup")) != server_side


# --------------------------------------------------------------------------- produce


def _last_acked(progress: Path, partition: int) -> int:
    """The offset of the producer's latest ack in ``partition`` (its --progress-file); -1
    before the first."""
    try:
        data = json.loads(progress.read_text())
    except (OSError, ValueError):  # not written yet
        return -1
    return int(data["last_offsets"].get(str(partition), -1))


@pytest.mark.timeout(300)
def test_franz_go_idempotent_producer_keeps_every_ack_across_a_leader_kill(
        cluster_factory, tmp_path: Path) -> None:
    """The leader of partition 0 is SIGKILLed mid-run and started again: every acknowledged
    record is in the log exactly once, at its acknowledged offset, in order per partition."""
    topic = "franz-idem"
    franzcheck()  # a missing build fails the test before any broker starts
    cluster: Cluster = cluster_factory(3, SETTINGS)
    cluster.create_topic(topic, PRODUCE_PARTITIONS, 3)
    progress = tmp_path / "franz-progress.json"
    run = Run("produce", {
        "bootstrap": cluster.bootstrap, "topic": topic, "records": PRODUCE_RECORDS,
        "partitions": PRODUCE_PARTITIONS, "rate": PRODUCE_RATE, "prefix": "franz",
        "progress_file": progress,
    }, PRODUCE_TIMEOUT_S, tmp_path / "franz")
    try:
        wait_until(lambda: _last_acked(progress, 0) >= 300 or not run.alive(), 60,
                   "the producer's first acks in partition 0", interval=0.1)
        assert run.alive(), "the producer ended before the kill:\n" + run.stderr_tail()
        victim = cluster.leader_of(topic, 0)
        at_kill = _last_acked(progress, 0)
        cluster.kill(victim)
        killed_at = time.monotonic()
        cluster.wait_for_isr_without(topic, victim, 30)
        # Acknowledged writes go on through the new leader while the old one is down.
        wait_until(lambda: _last_acked(progress, 0) >= at_kill + 200, 30,
                   "acks in partition 0 from its new leader", interval=0.1)
        moved_in = time.monotonic() - killed_at
        still_running = run.alive()
        cluster.restart(victim)
    except BaseException:
        run.kill()
        raise
    data = run.wait()
    print(f"produce: killed broker {victim} (leader of {topic}-0) at its ack of offset "
          f"{at_kill}; acks went on after {moved_in:.1f}s; " + ", ".join(
              f"{k} {data.get(k)}" for k in ("acked_count", "failed_count", "unresolved",
                                             "violations_count", "elapsed_ms")))
    assert still_running, "the producer ended before the broker came back:\n" + run.describe(data)
    assert data["ok"], run.describe(data)
    cluster.wait_for_isr(topic, 3, 60)

    history = History()
    for n in range(data["sent"]):
        history.attempt(f"franz-{n}".encode(), n % PRODUCE_PARTITIONS, "franzcheck", n)
    for n, partition, offset in data["acked"]:
        history.ack(f"franz-{n}".encode(), partition, offset)
    for n in data["failed"]:
        history.fail(f"franz-{n}".encode())
    # drain waits for each high watermark to reach the highest acknowledged offset (a record
    # not read yet) before it reads to the end; what is missing after that is lost.
    drain(cluster, topic, history, partitions=PRODUCE_PARTITIONS)
    report = history.check()
    print(report.summary())
    assert report.acked == PRODUCE_RECORDS, report.summary()
    assert report.ok(idempotent=True), report.summary()
