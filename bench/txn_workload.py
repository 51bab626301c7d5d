"""The transactional workload of ``python -m bench txn-chaos`` (bench/txn_chaos.py) and of
tests/integration/test_txn_chaos.py: transactional producers, read_committed consumers and the final
drain, all recording into a ``kafkube.harness.txn_checker.TxnHistory``.

Producers (confluent_kafka / librdkafka, each with a ``transactional.id`` of its own) run
transactions of a few records over at least two partitions each, and commit or abort them
at random (seeded), at a bounded rate and count. What the client saw becomes the
transaction's outcome: ``committed`` when ``commit_transaction`` returned; ``aborted`` when
no commit was asked for, or ``abort_transaction`` returned after a commit that needed an
abort; ``unknown`` when a commit was asked for and no definite answer came (timeouts
outlasting the retries, a fatal error). A producer instance that cannot go on (fatal, or an
unknown outcome) is replaced by a new one with the same ``transactional.id``: its
``init_transactions`` fences the old one and settles what it left open, as an application
restarting would.

Consumers read every partition read_committed from offset 0 all along, each a session per
assignment (a reset starts a new session at the positions reached). The drain reads every
partition from 0 with a fresh consumer, to the high watermark it found at its start, within
a deadline: where it stops short, the checker says ``unread``, not ``lost``.

Every loop is bounded in count and time: transactions per producer, attempts per client
call, producer instances per producer, drain attempts, deadlines on every wait.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kafkube.harness.txn_checker import Drained, Outcome, TxnHistory, value_of
from kafkube.harness.waiting import wait_until

TOPIC = "txn-chaos"
TXN_TOPIC = "__transaction_state"
TXN_PARTITIONS = 5
SESSION_MS = 3000
# The durability tests' short leases (tests/integration/test_durability.py), so a fault resolves in
# seconds, and the transaction log replicated as the topic is.
CLUSTER_CONFIG = {
    "broker.session.timeout.ms": str(SESSION_MS),
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "6000",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "5",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
TOPIC_CONFIG = {"min.insync.replicas": "2"}

TRANSACTION_TIMEOUT_MS = 30_000
INIT_TIMEOUT_S = 30.0
INIT_ATTEMPTS = 4  # per producer instance
COMMIT_TIMEOUT_S = 15.0
COMMIT_ATTEMPTS = 4  # retriable failures of commit_transaction before the outcome is unknown
ABORT_TIMEOUT_S = 15.0
ABORT_ATTEMPTS = 4
MAX_INSTANCES = 40  # producer instances per producer over a run
CLOSE_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = COMMIT_ATTEMPTS * COMMIT_TIMEOUT_S + ABORT_ATTEMPTS * ABORT_TIMEOUT_S + 60
CLIENT_TIMEOUTS: dict[str, Any] = {
    "socket.timeout.ms": 10_000,
    "socket.connection.setup.timeout.ms": 5000,
    "reconnect.backoff.max.ms": 1000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
}
RESETS = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE,
          KafkaError._LOG_TRUNCATION)


@dataclass(frozen=True)
class Load:
    """What the clients do; ``seed`` draws every producer's sizes, partitions and outcomes."""

    seed: int
    partitions: int = 6
    producers: int = 3
    consumers: int = 2
    writes: tuple[int, int] = (2, 6)  # records per transaction, at least two partitions
    commit_share: float = 0.6  # transactions asked to commit; the rest aborted
    rate: float = 5.0  # transactions a second per producer, at most
    max_txns: int = 20_000  # per producer

    @staticmethod
    def txn_id(index: int) -> str:
        return f"txn-producer-{index}"


def _error(exc: BaseException) -> KafkaError | None:
    """The KafkaError behind a client exception (a SystemError wraps one when confluent_kafka
    ran a callback with it pending); None if there is none."""
    while exc is not None:
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0]
        exc = exc.__cause__ or exc.__context__
    return None


def _fatal(exc: BaseException) -> bool:
    err = _error(exc)
    return err is None or err.fatal()


class Workload:
    """``load.producers`` producer threads and ``load.consumers`` consumer threads."""

    def __init__(self, bootstrap: str, topic: str, load: Load, history: TxnHistory,
                 logger: logging.Logger | None = None) -> None:
        self.bootstrap, self.topic, self.load, self.history = bootstrap, topic, load, history
        self.logger = logger
        self.stopping = threading.Event()
        self.failures: list[BaseException] = []
        self.notes: list[str] = []  # client errors worth reporting (not anomalies)
        self.instances = [0] * load.producers  # producer instances made, per producer
        self.resets = 0  # consumer sessions begun again after a reset
        self.threads = [
            threading.Thread(target=self._guard, args=(self._produce, i), name=f"txn-p{i}",
                             daemon=True)  # a stuck client never keeps the process alive
            for i in range(load.producers)
        ] + [threading.Thread(target=self._guard, args=(self._consume, i), name=f"txn-c{i}",
                              daemon=True) for i in range(load.consumers)]

    def start(self) -> Workload:
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Let every producer end its transaction, every consumer its poll; bounded."""
        self.stopping.set()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for thread in self.threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"workload threads did not stop in {STOP_TIMEOUT_S:.0f} s: "
                               f"{alive}")
        if self.failures:
            raise self.failures[0]

    def note(self, text: str) -> None:
        if len(self.notes) < 1000:
            self.notes.append(f"{time.strftime('%H:%M:%S')} {text}")

    def _guard(self, target: Callable[[int], None], index: int) -> None:
        try:
            target(index)
        except BaseException as exc:  # re-raised by stop(), in the caller's thread
            self.failures.append(exc)
            self.stopping.set()

    def _config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **CLIENT_TIMEOUTS,
                **({"logger": self.logger} if self.logger else {})}

    # -- producers ---------------------------------------------------------------------------

    def _new_producer(self, index: int) -> Producer | None:
        """A producer instance with ``init_transactions`` done; None if it failed."""
        self.instances[index] += 1
        producer = Producer({
            **self._config(),
            "transactional.id": self.load.txn_id(index),
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "message.timeout.ms": TRANSACTION_TIMEOUT_MS,  # librdkafka caps it there anyway
            "linger.ms": 5,
        })
        for attempt in range(INIT_ATTEMPTS):
            if self.stopping.is_set():
                break
            try:
                producer.init_transactions(INIT_TIMEOUT_S)
                return producer
            except (KafkaException, SystemError) as exc:
                self.note(f"p{index}: init_transactions ({attempt + 1}): {_error(exc) or exc!r}")
                if _fatal(exc) or not _error(exc).retriable():  # type: ignore[union-attr]
                    break
        self._close(producer)
        return None

    def _close(self, producer: Producer) -> None:
        """Fail whatever it still holds and serve every delivery report, on this thread."""
        try:
            producer.purge()
            producer.flush(CLOSE_TIMEOUT_S)
        except (KafkaException, SystemError, RuntimeError) as exc:
            self.note(f"closing a producer: {exc!r}")

    def _produce(self, index: int) -> None:
        rng = random.Random(f"{self.load.seed}-producer-{index}")
        producer: Producer | None = None
        started = time.monotonic()
        count = 0
        try:
            while not self.stopping.is_set() and count < self.load.max_txns:
                if producer is None:
                    if self.instances[index] >= MAX_INSTANCES:
                        raise RuntimeError(f"p{index}: {MAX_INSTANCES} producer instances, "
                                           f"none lasting; last notes: {self.notes[-5:]}")
                    producer = self._new_producer(index)
                    continue
                wait = started + count / self.load.rate - time.monotonic()
                if wait > 0:
                    self.stopping.wait(min(wait, 0.1))
                    continue
                name = f"p{index}.{count}"
                count += 1
                if not self._transaction(producer, index, name, rng):
                    self._close(producer)
                    producer = None
        finally:
            if producer is not None:
                self._close(producer)

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is None and msg.offset() is not None and msg.offset() >= 0:
            self.history.delivered(msg.value().decode(), msg.offset())

    def _transaction(self, producer: Producer, index: int, name: str,
                     rng: random.Random) -> bool:
        """One transaction, recorded with the outcome the client saw. False when this
        producer instance cannot go on."""
        size = rng.randint(*self.load.writes)
        parts = rng.sample(range(self.load.partitions), 2) + [
            rng.randrange(self.load.partitions) for _ in range(size - 2)]
        commit = rng.random() < self.load.commit_share
        notes: list[str] = []
        try:
            producer.begin_transaction()
        except (KafkaException, SystemError) as exc:
            self.note(f"p{index}: begin_transaction: {_error(exc) or exc!r}")
            return False
        self.history.begin(name, f"p{index}")
        try:
            for i, partition in enumerate(parts):
                value = value_of(name, i, size)
                self.history.write(name, partition, value)  # before: it may get written
                self._send(producer, partition, value)
        except (KafkaException, SystemError) as exc:
            notes.append(f"produce: {_error(exc) or exc!r}")
            commit = False  # never asked to commit: it must not be seen, whatever comes
        if not commit:
            self._flush(producer, notes)
        outcome = self._commit(producer, notes) if commit else None
        if outcome is None:  # asked to abort, or the commit needs an abort
            aborted = self._abort(producer, notes)
            # Without a commit asked for, nothing may make it visible.
            outcome = Outcome.ABORTED if aborted or not commit else Outcome.UNKNOWN
            healthy = aborted
        else:
            healthy = outcome is Outcome.COMMITTED
        self.history.end(name, outcome, notes)
        if notes:
            self.note(f"p{index} {name} {outcome.value}: {'; '.join(notes)}")
        try:
            producer.poll(0)  # serve the delivery reports
        except (KafkaException, SystemError) as exc:
            self.note(f"p{index}: poll: {exc!r}")
            healthy = False
        return healthy

    def _send(self, producer: Producer, partition: int, value: str) -> None:
        for _ in range(100):  # a full queue: wait for room, bounded
            try:
                producer.produce(self.topic, value.encode(), partition=partition,
                                 on_delivery=self._on_delivery)
                return
            except BufferError:
                producer.poll(0.1)
        raise KafkaException(KafkaError(KafkaError._QUEUE_FULL, "queue full for 10 s"))

    def _flush(self, producer: Producer, notes: list[str]) -> None:
        """Before an abort: the records written to their partitions first, so the abort has
        something to hide (librdkafka would otherwise drop most of them unsent)."""
        try:
            left = producer.flush(COMMIT_TIMEOUT_S)
            if left:
                notes.append(f"flush: {left} records not delivered in {COMMIT_TIMEOUT_S} s")
        except (KafkaException, SystemError) as exc:
            notes.append(f"flush: {_error(exc) or exc!r}")

    def _commit(self, producer: Producer, notes: list[str]) -> Outcome | None:
        """COMMITTED, UNKNOWN, or None when the client says the transaction needs an abort."""
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                producer.commit_transaction(COMMIT_TIMEOUT_S)
                return Outcome.COMMITTED
            except (KafkaException, SystemError) as exc:
                err = _error(exc)
                notes.append(f"commit ({attempt + 1}): {err or exc!r}")
                if err is None or err.fatal():
                    return Outcome.UNKNOWN
                if err.txn_requires_abort():
                    return None
                if not err.retriable():
                    return Outcome.UNKNOWN
        return Outcome.UNKNOWN

    def _abort(self, producer: Producer, notes: list[str]) -> bool:
        for attempt in range(ABORT_ATTEMPTS):
            try:
                producer.abort_transaction(ABORT_TIMEOUT_S)
                return True
            except (KafkaException, SystemError) as exc:
                err = _error(exc)
                notes.append(f"abort ({attempt + 1}): {err or exc!r}")
                if err is None or err.fatal() or not err.retriable():
                    return False
        return False

    # -- consumers ---------------------------------------------------------------------------

    def _consume(self, index: int) -> None:
        """Read every partition read_committed from offset 0 as the log grows."""
        consumer = Consumer({
            **self._config(),
            "group.id": f"txn-chaos-reader-{index}",  # assigned, never committed
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 100,
        })
        positions = dict.fromkeys(range(self.load.partitions), 0)
        sessions = 0

        def assign() -> str:
            session = f"c{index}.{sessions}"
            for partition, offset in positions.items():
                self.history.session(session, partition, offset)
            consumer.assign([TopicPartition(self.topic, p, o) for p, o in positions.items()])
            return session

        try:
            session = assign()
            while not self.stopping.is_set():
                try:
                    batch = consumer.consume(1000, 0.2)
                except KafkaException as exc:
                    self.note(f"c{index}: {exc!r}")
                    self.stopping.wait(0.5)
                    continue
                reset = False
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        if err.code() in RESETS:
                            self.note(f"c{index} session {sessions}: {err}")
                            reset = True
                        continue
                    self.history.read(session, msg.partition(), msg.offset(),
                                      msg.value().decode())
                    positions[msg.partition()] = msg.offset() + 1
                if reset:
                    sessions += 1
                    self.resets += 1
                    session = assign()
        finally:
            consumer.close()


def drain(bootstrap: str, topic: str, partitions: int, timeout: float = 120.0,
          logger: logging.Logger | None = None) -> dict[int, Drained]:
    """Every partition read read_committed from offset 0 with a fresh consumer, up to the
    high watermark found first; stops at ``timeout`` with what it has (the checker tells
    unread from lost by how far each partition got)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, **CLIENT_TIMEOUTS,
        **({"logger": logger} if logger else {}),
        "group.id": "txn-chaos-drain", "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "error",
        "enable.partition.eof": True,
    })
    deadline = time.monotonic() + timeout
    try:
        def high(p: int) -> tuple[int] | None:  # a tuple: an end of 0 is an answer too
            try:
                return (consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1],)
            except KafkaException:
                return None  # a leader being elected: ask again

        try:
            ends = {p: wait_until(lambda p=p: high(p), max(1.0, deadline - time.monotonic()),
                                  f"the end of {topic}-{p}", interval=0.5)[0]
                    for p in range(partitions)}
        except AssertionError:
            return {}  # a partition's end unknown: nothing drained, all unread
        records: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
        reached = dict.fromkeys(range(partitions), 0)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while any(reached[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                p, err = msg.partition(), msg.error()
                if err is None:
                    records[p].append((msg.offset(), msg.value().decode()))
                    reached[p] = max(reached[p], msg.offset() + 1)
                elif err.code() == KafkaError._PARTITION_EOF and msg.offset() is not None:
                    reached[p] = max(reached[p], msg.offset())  # past markers, aborted ones
            # The position moves past commit markers and aborted records, which are not
            # delivered; ask for it too.
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= 0:
                    reached[tp.partition] = max(reached[tp.partition], tp.offset)
        return {p: Drained(records[p], ends[p], reached[p]) for p in ends}
    finally:
        consumer.close()


def drain_into(history: TxnHistory, bootstrap: str, topic: str, partitions: int,
               attempts: int = 3, timeout: float = 120.0,
               logger: logging.Logger | None = None) -> int:
    """``drain`` until every partition is read to its end, at most ``attempts`` times, each
    partition's furthest read kept as the final read. Returns the attempts made."""
    best: dict[int, Drained] = {}
    made = 0
    while made < attempts and not (
            len(best) == partitions and all(d.complete for d in best.values())):
        made += 1
        for p, drained in drain(bootstrap, topic, partitions, timeout, logger).items():
            if p not in best or drained.reached > best[p].reached:
                best[p] = drained
    for p, drained in best.items():
        history.set_final(p, drained)
    return made
