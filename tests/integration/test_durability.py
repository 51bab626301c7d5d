"""Durability under broker faults: no acknowledged write is lost (notes/perf_reliability.md B).

Kafka's ``replication_test.py`` and Jepsen's queue workload, on a local 3-broker cluster:
producers write unique values with ``acks=all`` to a topic with RF 3 and
``min.insync.replicas=2`` while brokers are SIGKILLed and restarted (the leader of a
partition, then a random broker) or SIGSTOPped past their session timeout and resumed. A
consumer reads the partitions all along. At the end a fresh consumer drains every partition
from offset 0 to the high watermark and ``kafkube.harness.queue_checker`` checks the history: every
acknowledged (or ever-read) value is in the log, at the offset its ack reported, each offset
holds one value, offsets rise one by one, nothing appears that was never sent; with the
idempotent producer also no duplicates and per-producer order.

Bounded: a fixed number of fault rounds within a time budget, rate-limited producers with a
message cap, and every wait is a condition with a deadline. Loopback only.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kafkube.harness.metadata import Cluster
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until
from tests.support.log_batches import batches_holding

PARTITIONS = 3
SESSION_MS = 3000
CLUSTER_CONFIG = {
    "broker.session.timeout.ms": str(SESSION_MS),  # short leases, so faults resolve quickly
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "6000",  # a backstop: fencing should shrink the ISR first
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "auto.leader.rebalance.enable": "true",  # restarted brokers get leaderships back, too
    "leader.imbalance.check.interval.seconds": "5",
    "offsets.topic.replication.factor": "3",  # librdkafka looks up a coordinator for group.id
    "offsets.topic.num.partitions": "3",
}
TOPIC_CONFIG = {"min.insync.replicas": "2"}

PRODUCERS = 2
RATE = 400  # messages per second per producer
MAX_PER_PRODUCER = 150_000
MAX_QUEUED = 5_000  # per producer; beyond this, wait instead of queueing more
MESSAGE_TIMEOUT_MS = 30_000
MIN_ACKED = 1_000
MAX_GENERATIONS = 20  # producer instances per producer thread (a fatal error needs a new one)

KILL_ROUNDS = 6
PAUSE_ROUNDS = 4
FAULT_BUDGET = 120.0  # seconds; no new round starts after this
MIN_ROUNDS = 2
SHRINK_DEADLINE = 30.0  # the fault should show in the metadata by then (not asserted)
REJOIN_DEADLINE = 90.0
REJOIN_ANSWERS = 3  # metadata answers in a row showing the full ISR (one may be stale)
PROGRESS = 30  # new acks per partition that show the cluster writable
PROGRESS_DEADLINE = 45.0
HW_DEADLINE = 20.0


class Workload:
    """Rate-limited acks=all producers and one tailing consumer, all recording into a History.

    Producer ``p{i}`` writes ``p{i}-{seq}`` to partition ``seq % PARTITIONS``. A fatal
    producer error (possible with idempotence) is noted and the producer replaced, as
    ``p{i}.{generation}`` for the per-producer order check.
    """

    def __init__(self, bootstrap: str, topic: str, history: History, idempotent: bool) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.history = history
        self.idempotent = idempotent
        self.stopping = threading.Event()
        self.failures: list[BaseException] = []
        self.fatal_errors: list[str] = []
        self.resets = 0
        self.threads = [
            threading.Thread(target=self._guard, args=(self._produce, i), name=f"producer-{i}",
                             daemon=True)  # a stuck client never keeps pytest from exiting
            for i in range(PRODUCERS)
        ] + [threading.Thread(target=self._guard, args=(self._tail, 0), name="tail-consumer",
                              daemon=True)]

    def __enter__(self) -> Workload:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.stop()
            return
        try:  # the test already failed: stop, but let its own error through
            self.stop()
        except BaseException as error:
            print(f"workload stop after the failure: {error!r}")

    def stop(self) -> None:
        self.stopping.set()
        deadline = time.monotonic() + MESSAGE_TIMEOUT_MS / 1000 + 30
        for thread in self.threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        assert not alive, f"workload threads did not stop: {alive}"
        if self.failures:
            raise self.failures[0]

    def _guard(self, target: Callable[[int], None], index: int) -> None:
        try:
            target(index)
        except BaseException as exc:  # re-raised by stop(), in the test's thread
            self.failures.append(exc)
            self.stopping.set()

    def _producer(self, fatal: threading.Event) -> Producer:
        def on_error(err: KafkaError) -> None:
            if err.fatal():
                self.fatal_errors.append(str(err))
                fatal.set()

        config: dict[str, object] = {
            "bootstrap.servers": self.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            "request.timeout.ms": 10_000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            # One request in flight for the idempotent producer: with several, a leader change
            # between two of them (the first refused NOT_LEADER, the next accepted by the new
            # leader as OUT_OF_ORDER_SEQUENCE) makes librdkafka bump the epoch and resend
            # possibly-written messages, duplicating them against Apache Kafka too
            # (confluentinc/librdkafka#4953). The broker's dedupe is what this test checks.
            "max.in.flight.requests.per.connection": 1 if self.idempotent else 5,
            # Give up on a request to a paused broker after 10 s, not message.timeout.ms
            # (Kafka's own clients wait request.timeout.ms, 30 s): a quicker test, same logic.
            "socket.timeout.ms": 10_000,
            "socket.connection.setup.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 1000,
            "enable.idempotence": self.idempotent,
            "error_cb": on_error,
        }
        if not self.idempotent:
            config["retries"] = 1_000_000  # retried batches may be written twice
        return Producer(config)

    def _produce(self, index: int) -> None:
        history = self.history

        def on_delivery(err: KafkaError | None, msg) -> None:
            if err is None and msg.offset() is not None and msg.offset() >= 0:
                history.ack(msg.value(), msg.partition(), msg.offset())
            else:
                history.fail(msg.value(), err)

        generation = 0
        fatal = threading.Event()
        producer = self._producer(fatal)
        started = time.monotonic()
        seq = 0
        try:
            while not self.stopping.is_set() and seq < MAX_PER_PRODUCER:
                try:
                    if fatal.is_set():  # the instance fails all it holds; start a new one
                        if generation >= MAX_GENERATIONS:
                            history.note(f"p{index}: {generation} fatal errors, giving up")
                            break
                        self._close(producer, 0)
                        generation += 1
                        fatal = threading.Event()
                        producer = self._producer(fatal)
                        history.note(f"p{index}: fatal producer error, now generation "
                                     f"{generation}")
                        continue
                    wait = started + seq / RATE - time.monotonic()
                    if wait > 0:
                        producer.poll(min(wait, 0.1))
                        continue
                    if len(producer) >= MAX_QUEUED:
                        producer.poll(0.05)
                        continue
                    value = f"p{index}-{seq}".encode()
                    partition = seq % PARTITIONS
                    try:
                        producer.produce(self.topic, value=value, partition=partition,
                                         on_delivery=on_delivery)
                    except BufferError:
                        producer.poll(0.05)
                        continue
                    # Callbacks only run inside poll()/flush() on this thread, so recording
                    # after produce() still precedes the delivery report.
                    history.attempt(value, partition=partition,
                                    process=f"p{index}.{generation}", seq=seq)
                    seq += 1
                    producer.poll(0)
                except (KafkaException, SystemError) as exc:
                    # A fatal error can surface from produce() before poll() served error_cb,
                    # or from poll() as a SystemError: confluent_kafka ran a callback with the
                    # error pending. Either way this instance is done.
                    if isinstance(exc, SystemError) or _fatal(exc):
                        self.fatal_errors.append(repr(exc))
                        fatal.set()
                    else:  # e.g. a partition not in the metadata yet
                        history.note(f"p{index}: {exc!r}")
                        self.stopping.wait(0.05)
        finally:
            # Close here, on this thread: left to the garbage collector, the instance would run
            # its delivery callbacks wherever and whenever it happened to be collected.
            self._close(producer, MESSAGE_TIMEOUT_MS / 1000 + 5)
            del producer

    def _close(self, producer: Producer, timeout: float) -> None:
        """Wait up to ``timeout`` for outstanding deliveries, fail the rest (purge), and serve
        every delivery report."""
        for attempt in range(3):
            try:
                if attempt or producer.flush(timeout):
                    producer.purge()
                    producer.flush(10)
                return
            except (KafkaException, SystemError) as exc:
                self.history.note(f"closing a producer: {exc!r}")

    def _tail(self, _: int) -> None:
        """Read every partition from offset 0 as the log grows. A consumer only ever sees
        committed records, so whatever it reads must be in the final log at the same offset.
        A reset (out of range, truncation detected) starts a new read session at the next
        offset instead of jumping back to the beginning."""
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": f"durability-tail-{self.topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 100,
            "socket.timeout.ms": 10_000,
            "socket.connection.setup.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 1000,
        })
        positions = dict.fromkeys(range(PARTITIONS), 0)
        session = 0
        resets = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE,
                  KafkaError._LOG_TRUNCATION)
        try:
            consumer.assign([TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)])
            while not self.stopping.is_set():
                reset = False
                try:
                    batch = consumer.consume(1000, 0.2)
                except KafkaException as exc:
                    self.history.note(f"tail consumer: {exc!r}")
                    self.stopping.wait(0.5)
                    continue
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        if err.code() in resets:
                            self.history.note(f"tail consumer session {session}: {err}")
                            reset = True
                        continue
                    self.history.read(f"tail-{session}", msg.partition(), msg.offset(),
                                      msg.value())
                    positions[msg.partition()] = msg.offset() + 1
                if reset:
                    session += 1
                    self.resets += 1
                    consumer.assign([TopicPartition(self.topic, p, positions[p])
                                     for p in range(PARTITIONS)])
                    self.stopping.wait(0.5)
        finally:
            consumer.close()


def _fatal(exc: BaseException) -> bool:
    """A fatal client error, directly or as the cause of a SystemError."""
    while exc is not None:
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0].fatal()
        exc = exc.__cause__ or exc.__context__
    return False


def wait_for_progress(history: History, what: str, count: int = PROGRESS,
                      timeout: float = PROGRESS_DEADLINE) -> float:
    """Wait until every partition has ``count`` more acks; returns the seconds it took."""
    start = time.monotonic()
    before = {p: history.acked_count(p) for p in range(PARTITIONS)}
    wait_until(
        lambda: all(history.acked_count(p) >= before[p] + count for p in range(PARTITIONS)),
        timeout, f"{count} new acks on every partition {what}", interval=0.1,
    )
    return time.monotonic() - start


def observed_out(cluster: Cluster, topic: str, node: int) -> float | None:
    """Seconds until the metadata shows ``node`` out of every ISR and leadership; None if not
    by the deadline (the test goes on: progress and the final check are what count)."""
    start = time.monotonic()
    try:
        cluster.wait_for_isr_without(topic, node, SHRINK_DEADLINE)
    except AssertionError:
        return None
    return time.monotonic() - start


def drain(cluster: Cluster, topic: str, history: History, timeout: float = 120.0,
          partitions: int = PARTITIONS) -> None:
    """Read every partition from offset 0 to its high watermark with a fresh consumer and
    record it as the final log."""
    consumer = Consumer({
        "bootstrap.servers": cluster.bootstrap,
        "group.id": f"durability-drain-{topic}",
        "enable.auto.commit": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": True,
    })
    try:
        def watermarks(p: int) -> tuple[int, int] | None:
            try:
                return consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
            except KafkaException:
                return None

        ends: dict[int, int] = {}
        for p in range(partitions):
            # A leader elected moments ago may not have advanced its high watermark to what
            # the old one acknowledged yet; give it a while. If it never gets there, drain
            # anyway and let the checker name the missing values.
            acked_end = history.acked_end(p)
            try:
                wait_until(lambda p=p, end=acked_end: (m := watermarks(p)) and m[1] >= end,
                           HW_DEADLINE, f"the high watermark of {topic}-{p} at {acked_end}")
            except AssertionError as error:
                print(error)
            low, high = wait_until(lambda p=p: watermarks(p), 60, f"watermarks of {topic}-{p}")
            assert low == 0, f"{topic}-{p} starts at {low}: records were deleted"
            ends[p] = high
        records: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        done = {p for p, end in ends.items() if end == 0}
        errors: list[str] = []
        deadline = time.monotonic() + timeout
        while len(done) < partitions:
            assert time.monotonic() < deadline, (
                f"drain incomplete after {timeout}s: ends={ends}, read="
                f"{ {p: (r[-1][0] if r else None) for p, r in records.items()} }, "
                f"errors={errors[-5:]}")
            for msg in consumer.consume(10_000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        errors.append(str(err))
                    continue
                records[msg.partition()].append((msg.offset(), msg.value()))
                if msg.offset() >= ends[msg.partition()] - 1:
                    done.add(msg.partition())
    finally:
        consumer.close()
    for p, read in records.items():
        history.set_final(p, read)
    print(f"drained {topic}: high watermarks {ends}")


def run_faults(cluster: Cluster, topic: str, history: History, rounds: int,
               fault: Callable[[int, random.Random], str]) -> list[str]:
    """Run up to ``rounds`` rounds of ``fault`` within the time budget; returns the log."""
    log: list[str] = []
    budget = time.monotonic() + FAULT_BUDGET
    rng = random.Random(int(os.environ.get("KAFKUBE_DURABILITY_SEED", time.time_ns())))
    seed = rng.randrange(2**32)
    rng.seed(seed)
    log.append(f"seed {seed} (KAFKUBE_DURABILITY_SEED reruns it)")
    print(log[-1])
    wait_for_progress(history, "before the first fault", timeout=60)
    for r in range(rounds):
        if time.monotonic() > budget:
            log.append(f"time budget spent after {r} rounds")
            break
        log.append(f"round {r}: {fault(r, rng)}")
        print(log[-1])
    wait_for_progress(history, "after the last fault")
    completed = sum(1 for line in log if line.startswith("round "))
    assert completed >= MIN_ROUNDS, "\n".join(log)
    return log


def pick(cluster: Cluster, topic: str, r: int, rng: random.Random) -> tuple[int, str]:
    """Even rounds the leader of a partition (cycling), odd rounds any broker."""
    if r % 2 == 0:
        partition = (r // 2) % PARTITIONS
        node = cluster.leader_of(topic, partition)
        return node, f"broker {node} (leader of {topic}-{partition})"
    node = rng.randrange(cluster.size)
    return node, f"broker {node} (random)"


def check(topic: str, history: History, idempotent: bool, workload: Workload,
          clusters: Iterable[Cluster] = ()) -> None:
    """The history checked; with ``clusters``, a duplicate's batches are printed from every
    broker's log (tests/support/log_batches.py says what they tell)."""
    report = history.check()
    print(f"{topic}: {history.counts()}; tail consumer resets={workload.resets}; "
          f"fatal producer errors={workload.fatal_errors[:3]}")
    print(report.summary())
    for note in history.errors[:10]:
        print("note:", note)
    if report.duplicates and clusters:
        log_dirs = [broker.log_dir for cluster in clusters for broker in cluster.brokers]
        positions = [p for _, where in report.duplicates[:5] for p in where]
        for line in batches_holding(log_dirs, topic, positions):
            print("batch:", line)
    assert report.acked > MIN_ACKED, f"only {report.acked} acked writes:\n{report.summary()}"
    assert report.ok(idempotent), report.summary()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "non_idempotent"])
def test_acked_writes_survive_sigkill(cluster_factory, idempotent):
    cluster: Cluster = cluster_factory(3, CLUSTER_CONFIG)
    topic = f"durability-kill-{'idem' if idempotent else 'plain'}"
    cluster.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIG)
    history = History()

    def kill_round(r: int, rng: random.Random) -> str:
        node, who = pick(cluster, topic, r, rng)
        cluster.kill(node)
        out = observed_out(cluster, topic, node)
        writable = wait_for_progress(history, f"with broker {node} killed")
        cluster.restart(node)
        start = time.monotonic()
        cluster.wait_for_isr(topic, 3, REJOIN_DEADLINE, consecutive=REJOIN_ANSWERS)
        back = time.monotonic() - start
        return (f"SIGKILL {who}; out of ISR after "
                f"{'(not seen)' if out is None else f'{out:.1f}s'}; writable again after "
                f"{writable:.1f}s; restarted, back in every ISR after {back:.1f}s")

    with Workload(cluster.bootstrap, topic, history, idempotent) as workload:
        run_faults(cluster, topic, history, KILL_ROUNDS, kill_round)
    drain(cluster, topic, history)
    check(topic, history, idempotent, workload, (cluster,))


@pytest.mark.timeout(300)
def test_acked_writes_survive_sigstop(cluster_factory):
    """A paused broker (leader or controller included) is fenced after its session timeout;
    when it wakes up it must not act on its stale leadership."""
    cluster: Cluster = cluster_factory(3, CLUSTER_CONFIG)
    topic = "durability-pause"
    cluster.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIG)
    history = History()

    def pause_round(r: int, rng: random.Random) -> str:
        if r % 4 == 1 and (controller := cluster.controller_id()) >= 0:
            node, who = controller, f"broker {controller} (controller)"
        else:
            node, who = pick(cluster, topic, r, rng)
        cluster.pause(node)
        paused_at = time.monotonic()
        out = observed_out(cluster, topic, node)
        writable = wait_for_progress(history, f"with broker {node} paused")
        # Hold the pause well past the session timeout whatever the metadata showed.
        time.sleep(max(0.0, paused_at + 2 * SESSION_MS / 1000 - time.monotonic()))
        held = time.monotonic() - paused_at
        cluster.resume(node)
        start = time.monotonic()
        cluster.wait_for_isr(topic, 3, REJOIN_DEADLINE, consecutive=REJOIN_ANSWERS)
        back = time.monotonic() - start
        return (f"SIGSTOP {who} for {held:.1f}s; out of ISR after "
                f"{'(not seen)' if out is None else f'{out:.1f}s'}; writable again after "
                f"{writable:.1f}s; SIGCONT, back in every ISR after {back:.1f}s")

    with Workload(cluster.bootstrap, topic, history, idempotent=True) as workload:
        run_faults(cluster, topic, history, PAUSE_ROUNDS, pause_round)
    drain(cluster, topic, history)
    check(topic, history, True, workload, (cluster,))
