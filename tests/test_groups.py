"""Consumer groups end to end: real clients against broker processes (issue #3).

Consumers run in processes of their own, so that one can be killed with SIGKILL. The same
module is their driver: ``python -m tests.test_groups consume ...`` subscribes with
confluent-kafka (librdkafka) or kafka-python, commits synchronously after every batch and
prints one JSON line per event (assignment change, records read, offsets committed), which
``ConsumerProc`` collects with the time each line arrived. The Java consumer is KafkaCheck's
``consume --group`` (tests/clients/java), observed through the broker (DescribeGroups).

What is shown: members share the partitions (librdkafka, kafka-python, Java); a SIGKILLed
member's partitions are taken over within session.timeout.ms plus a margin, with only its
uncommitted tail read twice; cooperative-sticky rebalances incrementally; consumers resume
at the committed offset, also after a broker restart (clean or SIGKILL), and a live group
rides out a broker crash; a restarted static member keeps its partitions and the
generation; bad group requests get Kafka's error codes and the broker keeps serving.

Every broker runs with ``group.initial.rebalance.delay.ms=0``. Kafka's default (3 s) makes
the first rebalance of an Empty group wait for more members to arrive; that is a production
setting to avoid a rebalance per joining member, and in tests it would only add 3 s to each
new group and blur the measured takeover time.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from broker.protocol.messages import build
from kafkube.harness.metrics import scrape
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, create_topic
from tests.test_bad_input import assert_no_broker_errors
from tests.test_compat_clients import ck_produce, topic_name

ROOT = Path(__file__).resolve().parent.parent
NO_DELAY = {"group.initial.rebalance.delay.ms": "0"}
SESSION_MS = 6000
HEARTBEAT_MS = 500
TAKEOVER_MARGIN_S = 4.0  # on top of session.timeout.ms: detection, rejoin, sync, callbacks
PROC_DEADLINE_S = 60  # a consumer process never outlives this, whatever the test does
GROUP_TIMEOUT_S = 20  # waiting for a group to settle

JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP = 11, 14, 12, 13
OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, DELETE_GROUPS = 8, 9, 16, 42


# =========================================================================== the consumer driver
# Runs in the child process (``python -m tests.test_groups consume ...``).


class Emitter:
    def __init__(self) -> None:
        self.assignment: set[int] = set()
        self.lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        with self.lock:
            print(json.dumps({"ev": event, **fields}), flush=True)

    def change(self, kind: str, partitions: list[int]) -> None:
        # Eager protocols revoke everything and assign the whole new share; cooperative ones
        # revoke and assign increments. Tracking the set covers both.
        if kind == "assign":
            self.assignment |= set(partitions)
        else:
            self.assignment -= set(partitions)
        self.emit("assignment", change=kind, delta=sorted(partitions),
                  partitions=sorted(self.assignment))


def _confluent_consumer(args: argparse.Namespace, out: Emitter):
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group, "client.id": args.name,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_ms, "heartbeat.interval.ms": HEARTBEAT_MS,
        "partition.assignment.strategy": args.strategy, "fetch.wait.max.ms": 100,
    }
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    if args.metadata_refresh_ms:
        conf["topic.metadata.refresh.interval.ms"] = args.metadata_refresh_ms
    if args.debug:
        conf["debug"] = "cgrp"
    consumer = Consumer(conf)
    consumer.subscribe(
        [args.topic],
        on_assign=lambda _c, ps: out.change("assign", [p.partition for p in ps]),
        on_revoke=lambda _c, ps: out.change("revoke", [p.partition for p in ps]),
        on_lost=lambda _c, ps: out.change("lost", [p.partition for p in ps]),
    )

    def poll(n: int) -> list[tuple[int, int, str]]:
        got = []
        for m in consumer.consume(n, 0.2):
            if m.error():
                out.emit("error", error=str(m.error()))
            else:
                got.append((m.partition(), m.offset(), (m.value() or b"").decode()))
        return got

    def commit(offsets: dict[int, int]) -> str | None:
        try:
            consumer.commit(offsets=[TopicPartition(args.topic, p, o) for p, o in offsets.items()],
                            asynchronous=False)
        except KafkaException as e:
            return str(e)
        return None

    return poll, commit, consumer.close


def _kafka_python_consumer(args: argparse.Namespace, out: Emitter):
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            out.change("revoke", [tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned):
            out.change("assign", [tp.partition for tp in assigned])

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.name,
        enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=args.session_ms, heartbeat_interval_ms=HEARTBEAT_MS,
        fetch_max_wait_ms=100, group_instance_id=args.instance_id,
    )
    consumer.subscribe([args.topic], listener=Listener())
    # Load the topic's metadata before the first JoinGroup. Otherwise the leader may assign
    # before it knows the topic, and the rejoin that follows can leave kafka-python 3.0.12
    # stuck with its heartbeat disabled: a rejoin asked for only by a metadata change, cut
    # short by the poll timeout, is never resumed (need_rejoin() is False by the next poll).
    if args.topic not in consumer.topics():
        raise SystemExit(f"no metadata for {args.topic}")

    def poll(n: int) -> list[tuple[int, int, str]]:
        batches = consumer.poll(timeout_ms=200, max_records=n)
        return [(tp.partition, m.offset, (m.value or b"").decode())
                for tp, ms in batches.items() for m in ms]

    def commit(offsets: dict[int, int]) -> str | None:
        try:
            consumer.commit({TopicPartition(args.topic, p): OffsetAndMetadata(o, "", -1)
                             for p, o in offsets.items()})
        except KafkaError as e:
            return repr(e)
        return None

    return poll, commit, consumer.close


def consume_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.test_groups consume")
    p.add_argument("bootstrap")
    p.add_argument("topic")
    p.add_argument("group")
    p.add_argument("--name", default="consumer")
    p.add_argument("--client", choices=["confluent", "kafka-python"], default="confluent")
    p.add_argument("--strategy", default="range,roundrobin")
    p.add_argument("--session-ms", type=int, default=SESSION_MS)
    p.add_argument("--instance-id")
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--max-records", type=int, default=0,
                   help="close cleanly after this many records (0: run until SIGTERM)")
    p.add_argument("--hang-after", type=int, default=0,
                   help="after this many records, read one more batch, print it, and hang "
                        "without committing it (a consumer stuck mid-batch, to be killed)")
    p.add_argument("--metadata-refresh-ms", type=int, default=0,
                   help="confluent: topic.metadata.refresh.interval.ms (0: the client's)")
    p.add_argument("--deadline", type=float, default=PROC_DEADLINE_S)
    p.add_argument("--debug", action="store_true", help="client debug logs on stderr")
    args = p.parse_args(argv)
    if args.debug:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s")

    out = Emitter()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    make = _confluent_consumer if args.client == "confluent" else _kafka_python_consumer
    poll, commit, close = make(args, out)
    out.emit("started")
    deadline = time.monotonic() + args.deadline
    count = 0
    while not stopping.is_set() and time.monotonic() < deadline:
        want = args.batch
        if args.max_records:
            if count >= args.max_records:
                break
            want = min(want, args.max_records - count)
        records = poll(want)
        if not records:
            continue
        out.emit("records", records=records)
        count += len(records)
        if args.hang_after and count > args.hang_after:
            out.emit("hang")
            while time.monotonic() < deadline:  # heartbeats go on in the client's thread
                time.sleep(0.1)
            break
        offsets: dict[int, int] = {}
        for part, offset, _ in records:
            offsets[part] = max(offsets.get(part, 0), offset + 1)
        error = commit(offsets)
        if error is None:
            out.emit("committed", offsets=sorted(offsets.items()))
        else:
            out.emit("commit_failed", error=error, offsets=sorted(offsets.items()))
    close()
    out.emit("closed", count=count)


# =========================================================================== the test side


class ConsumerProc:
    """A consumer process and the events it printed, each stamped with its arrival time."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, *opts: object) -> None:
        self.name = name
        argv = ["consume", bootstrap, topic, group, "--name", name, *map(str, opts)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.test_groups", *argv], cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, bufsize=1,
        )
        self.events: list[dict[str, Any]] = []
        self.other: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line) if line.startswith('{"ev"') else None
            except ValueError:  # interleaved with a client log line
                event = None
            if event is None:
                self.other.append(line)
            else:
                event["at"] = time.monotonic()
                self.events.append(event)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["ev"] == kind]

    @property
    def assignment(self) -> set[int]:
        changes = self.of("assignment")
        return set(changes[-1]["partitions"]) if changes else set()

    @property
    def records(self) -> list[tuple[int, int, str]]:
        return [tuple(r) for e in self.of("records") for r in e["records"]]

    @property
    def committed(self) -> dict[int, int]:
        last: dict[int, int] = {}
        for e in self.of("committed"):
            last.update(dict(e["offsets"]))
        return last

    def diagnostics(self) -> str:
        tail = [json.dumps(e) for e in list(self.events)[-15:]]
        return f"consumer {self.name} (exit {self.proc.poll()}):\n  " + "\n  ".join(
            tail + [line.rstrip() for line in self.other[-15:]]
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM: the driver leaves the group (close()) and exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            assert self.proc.wait(20) == 0, self.diagnostics()
        finally:
            self.kill()
        self._reader.join(5)

    def wait_exit(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code


class JavaConsumer:
    """KafkaCheck's ``consume --group`` (tests/clients/java), left running until killed.

    It reports only when it finishes, so tests look at it through the broker (DescribeGroups).
    """

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, *props: str) -> None:
        from tests.test_java_client import start_kafkacheck

        self.name = name
        args = ["consume", bootstrap, topic, 1_000_000, "--group", group, "--timeout-ms", 60_000]
        for prop in (f"client.id={name}", f"heartbeat.interval.ms={HEARTBEAT_MS}", *props):
            args += ["--prop", prop]
        self.argv, self.proc = start_kafkacheck(*args)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=10)

    def diagnostics(self) -> str:
        return f"java consumer {self.name} (exit {self.proc.poll()})"


class Consumers:
    """Starts consumer processes; kills whatever is left at the end of the test."""

    def __init__(self) -> None:
        self.started: list[ConsumerProc | JavaConsumer] = []

    def __call__(self, *args: object) -> ConsumerProc:
        proc = ConsumerProc(*args)
        self.started.append(proc)
        return proc

    def java(self, *args: str) -> JavaConsumer:
        proc = JavaConsumer(*args)
        self.started.append(proc)
        return proc


@pytest.fixture
def consumers(broker_factory):
    """Depends on broker_factory so that consumers are killed before the brokers stop."""
    started = Consumers()
    yield started
    for proc in started.started:
        proc.kill()


def dump(procs) -> str:
    return "\n".join(p.diagnostics() for p in procs)


def new_topic(bootstrap: str, partitions: int) -> str:
    name = topic_name("grp")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int,
            start: int = 0) -> None:
    """Values "<partition>-<index>": on a fresh topic, index i is at offset i."""
    records = [
        {"key": None, "value": f"{p}-{i}".encode(), "headers": [], "timestamp": 1_700_000_000_000,
         "partition": p}
        for i in range(start, start + per_partition) for p in range(partitions)
    ]
    assert ck_produce(bootstrap, topic, records) == []


def described(admin: AdminClient, group: str, attempts: int = 3):
    """DescribeGroups through librdkafka's admin client; a transport error (a connection
    the broker's restart broke) is retried."""
    for attempt in range(attempts):
        try:
            return admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
        except KafkaException:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def stable_shares(admin: AdminClient, group: str, members: int) -> dict[str, set[int]] | None:
    """client id -> partitions, from DescribeGroups, once the group is Stable with
    ``members`` members; None before that."""
    desc = described(admin, group)
    if desc.state != ConsumerGroupState.STABLE or len(desc.members) != members:
        return None
    return {
        m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in desc.members
    }


def partitioned(shares: list[set[int]], partitions: int) -> bool:
    """``shares`` are disjoint and together cover 0..partitions-1."""
    return sorted(p for share in shares for p in share) == list(range(partitions))


def stable_partitioned(admin: AdminClient, group: str, members: int, partitions: int):
    shares = stable_shares(admin, group, members)
    return shares if shares and partitioned(list(shares.values()), partitions) else None


def settled(admin: AdminClient, group: str, procs: list[ConsumerProc], partitions: int):
    """The broker's view (Stable, one member per process, disjoint shares covering every
    partition) agrees with what each process was told by its on_assign callback.

    A Stable group may briefly hold an assignment that misses partitions: a leader that
    assigned before it had the topic's metadata rejoins once it has it.
    """
    shares = stable_shares(admin, group, len(procs))
    if shares is None or set(shares) != {p.name for p in procs}:
        return None
    if any(shares[p.name] != p.assignment for p in procs):
        return None
    return shares if partitioned(list(shares.values()), partitions) else None


def wait_for(predicate, timeout: float, what: str, procs: list):
    """wait_until, with what the consumers printed when it times out."""
    try:
        return wait_until(predicate, timeout, what)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{dump(procs)}") from None


def wait_settled(admin, group, procs, partitions, timeout: float = GROUP_TIMEOUT_S):
    return wait_for(lambda: settled(admin, group, procs, partitions), timeout,
                    f"group {group} to be Stable with {len(procs)} members", procs)


def check_values(records: list[tuple[int, int, str]]) -> None:
    for part, offset, value in records:
        assert value == f"{part}-{offset}", f"partition {part} offset {offset} holds {value!r}"


# --------------------------------------------------------------------------- wire requests


def req(api_key: int, version: int, values: dict[str, Any]) -> Any:
    return build(load_request_schema(api_key, version), values)


def consumer_metadata(topic: str) -> bytes:
    """A ConsumerProtocolSubscription v0: the topic, no user data."""
    raw = topic.encode()
    return b"\x00\x00" + b"\x00\x00\x00\x01" + len(raw).to_bytes(2, "big") + raw + b"\xff" * 4


def find_coordinator(client: WireClient, group: str) -> Any:
    """What every client does first: it creates ``__consumer_offsets`` on first use."""
    response = client.request(req(10, 3, {"key": group, "key_type": 0}))
    assert response.error_code == ErrorCode.none, response
    return response


def join(client: WireClient, group: str, member_id: str = "", *, session_ms: int = 10_000,
         protocols: tuple[str, ...] = ("range",), protocol_type: str = "consumer",
         instance_id: str | None = None, version: int = 5) -> Any:
    return client.request(req(JOIN_GROUP, version, {
        "group_id": group, "session_timeout": timedelta(milliseconds=session_ms),
        "rebalance_timeout": timedelta(milliseconds=session_ms), "member_id": member_id,
        "group_instance_id": instance_id, "protocol_type": protocol_type,
        "protocols": [{"name": n, "metadata": consumer_metadata("t")} for n in protocols],
    }))


def sync(client: WireClient, group: str, generation: int, member_id: str,
         assignments: dict[str, bytes] | None = None) -> Any:
    return client.request(req(SYNC_GROUP, 3, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
    }))


def heartbeat(client: WireClient, group: str, generation: int, member_id: str) -> ErrorCode:
    return client.request(req(HEARTBEAT, 3, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
    })).error_code


def commit(client: WireClient, group: str, generation: int, member_id: str, topic: str,
           offset: int = 1) -> ErrorCode:
    response = client.request(req(OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}]}],
    }))
    ((partition,),) = [t.partitions for t in response.topics]
    return partition.error_code


def delete_groups(client: WireClient, *groups: str) -> dict[str, ErrorCode]:
    response = client.request(req(DELETE_GROUPS, 2, {"groups_names": list(groups)}))
    return {r.group_id: r.error_code for r in response.results}


def offset_fetch(client: WireClient, group: str, topic: str, partitions: int) -> dict[int, int]:
    response = client.request(req(OFFSET_FETCH, 7, {
        "group_id": group, "require_stable": True,
        "topics": [{"name": topic, "partition_indexes": list(range(partitions))}],
    }))
    assert response.error_code == ErrorCode.none, response
    (t,) = response.topics
    assert all(p.error_code == ErrorCode.none for p in t.partitions), response
    return {p.partition_index: p.committed_offset for p in t.partitions}


def current_generation(client: WireClient, group: str, member_id: str, limit: int = 50) -> int:
    """The group's generation, probed with Heartbeats on behalf of ``member_id``: only the
    right generation gets NONE (the others ILLEGAL_GENERATION). DescribeGroups has none."""
    for generation in range(1, limit):
        error = heartbeat(client, group, generation, member_id)
        if error == ErrorCode.none:
            return generation
        assert error == ErrorCode.illegal_generation, error
    raise AssertionError(f"no generation below {limit} accepted for {member_id}")


# --------------------------------------------------------------------------- 1. shares


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_three_consumers_share_six_partitions(broker_factory, consumers, client):
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 6), f"share-{client}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    procs = [consumers(f"c{i}", broker.bootstrap, topic, group, "--client", client)
             for i in range(3)]
    shares = wait_settled(admin, group, procs, 6)
    assert sorted(len(s) for s in shares.values()) == [2, 2, 2], shares

    # Records produced now reach exactly the member that owns their partition, once.
    produce(broker.bootstrap, topic, 6, 10)
    total = lambda: sum(len(p.records) for p in procs)  # noqa: E731
    wait_for(lambda: total() >= 60, 20, "60 records", procs)
    for p in procs:
        assert {part for part, _, _ in p.records} <= shares[p.name], dump(procs)
        check_values(p.records)
    everything = sorted(r for p in procs for r in p.records)
    assert everything == sorted(set(everything)) and len(everything) == 60, dump(procs)
    wait_for(lambda: all(p.committed == {q: 10 for q in shares[p.name]} for p in procs), 10,
             "every member to commit its share", procs)
    for p in procs:
        p.stop()


@pytest.mark.java
def test_three_java_consumers_share_six_partitions(broker_factory, consumers):
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 6), "share-java"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    procs = [consumers.java(f"j{i}", broker.bootstrap, topic, group) for i in range(3)]
    shares = wait_for(lambda: stable_partitioned(admin, group, 3, 6), 60,
                      "three Java consumers in a Stable group", procs)
    assert set(shares) == {"j0", "j1", "j2"}, shares
    assert all(len(s) == 2 for s in shares.values()), shares


# --------------------------------------------------------------------------- 2. SIGKILL


def test_killed_consumer_partitions_are_taken_over(broker_factory, consumers):
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 6), "takeover"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    opts = ("--strategy", "range", "--session-ms", SESSION_MS)
    # The victim reads 20 records (committing each batch), then one more batch that it never
    # commits: the uncommitted tail that at-least-once delivery hands to the survivors.
    victim = consumers("victim", broker.bootstrap, topic, group, *opts, "--hang-after", 20)
    survivors = [consumers(f"s{i}", broker.bootstrap, topic, group, *opts) for i in range(2)]
    procs = [victim, *survivors]
    shares = wait_settled(admin, group, procs, 6)
    assert len(shares["victim"]) == 2, shares

    per_partition = 20
    produce(broker.bootstrap, topic, 6, per_partition)
    wait_for(lambda: victim.of("hang"), 20, "the victim to stop mid-batch", procs)
    for s in survivors:
        wait_for(lambda s=s: s.committed == {q: per_partition for q in shares[s.name]}, 20,
                 f"{s.name} to commit its share", procs)
    victim_committed = victim.committed
    tail = {(part, o) for part, o, _ in victim.of("records")[-1]["records"]}
    assert tail and all(o >= victim_committed.get(part, 0) for part, o in tail), dump(procs)

    victim.kill()
    killed_at = time.monotonic()

    def taken_over():
        for s in survivors:
            changes = s.of("assignment")
            if not changes or changes[-1]["at"] < killed_at:
                return None
        if sorted(p for s in survivors for p in s.assignment) != list(range(6)):
            return None
        return max(s.of("assignment")[-1]["at"] for s in survivors)

    bound = SESSION_MS / 1000 + TAKEOVER_MARGIN_S
    done_at = wait_for(taken_over, bound + 5, "the survivors to own every partition", procs)
    takeover = done_at - killed_at
    print(f"takeover after SIGKILL: {takeover:.2f}s (session.timeout.ms={SESSION_MS})")
    assert takeover <= bound, f"takeover took {takeover:.2f}s, more than {bound}s\n{dump(procs)}"
    assert stable_shares(admin, group, 2) is not None

    # The survivors finish the victim's partitions and commit them.
    everything = {q: per_partition for q in range(6)}
    with WireClient.connect(broker.bootstrap) as client:
        wait_for(lambda: offset_fetch(client, group, topic, 6) == everything, 20,
                 "every partition committed to its end", procs)

    # At-least-once: nothing lost; the only records read twice are the victim's uncommitted
    # tail; survivors resumed each victim partition exactly at the victim's last commit.
    reads: dict[tuple[int, int], int] = {}
    for p in procs:
        check_values(p.records)
        for part, o, _ in p.records:
            reads[(part, o)] = reads.get((part, o), 0) + 1
    assert set(reads) == {(q, o) for q in range(6) for o in range(per_partition)}, dump(procs)
    twice = {k for k, n in reads.items() if n > 1}
    assert twice == tail, f"read twice: {sorted(twice)}, uncommitted tail {sorted(tail)}"
    assert max(reads.values()) == 2
    for part in shares["victim"]:
        if victim_committed.get(part, 0) < per_partition:
            resumed = min(o for s in survivors for q, o, _ in s.records if q == part)
            assert resumed == victim_committed.get(part, 0), (part, resumed, victim_committed)
    for s in survivors:
        s.stop()


# --------------------------------------------------------------------------- 3. cooperative


def test_cooperative_sticky_incremental_rebalance(broker_factory, consumers):
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 6), "coop"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    procs: list[ConsumerProc] = []
    for i in range(3):
        procs.append(consumers(f"c{i}", broker.bootstrap, topic, group,
                               "--strategy", "cooperative-sticky"))
        shares = wait_settled(admin, group, procs, 6)
        assert all(shares.values()), f"a member without partitions: {shares}"
    assert described(admin, group).partition_assignor == "cooperative-sticky"
    assert sorted(len(s) for s in shares.values()) == [2, 2, 2], shares

    # Incremental: a member gives up only what moves to a newcomer and keeps the rest, so
    # c0, which had all six partitions, never went back to owning nothing.
    first = procs[0].of("assignment")
    assert first[0]["partitions"] == list(range(6)), dump(procs)
    assert all(e["partitions"] for e in first), dump(procs)
    assert any(e["change"] == "revoke" and 0 < len(e["delta"]) < 6 for e in first), dump(procs)

    produce(broker.bootstrap, topic, 6, 5)
    wait_for(lambda: sum(len(p.records) for p in procs) >= 30, 20, "30 records", procs)
    everything = sorted(r for p in procs for r in p.records)
    assert len(everything) == 30 and len(set(everything)) == 30, dump(procs)
    for p in procs:
        assert {part for part, _, _ in p.records} <= shares[p.name]
        p.stop()


def test_added_partitions_are_assigned(broker_factory, consumers):
    """Partitions added to a subscribed topic reach the group: the leader notices them in
    its metadata and rejoins, and its JoinGroup rebalances a Stable group."""
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 2), "growing"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    procs = [consumers(f"c{i}", broker.bootstrap, topic, group, "--metadata-refresh-ms", 500)
             for i in range(2)]
    wait_settled(admin, group, procs, 2)
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(10)
    shares = wait_settled(admin, group, procs, 4)
    assert sorted(len(s) for s in shares.values()) == [2, 2], shares
    produce(broker.bootstrap, topic, 4, 3)
    wait_for(lambda: sum(len(p.records) for p in procs) >= 12, 20, "12 records", procs)
    assert sorted(r for p in procs for r in p.records) == sorted(
        (q, i, f"{q}-{i}") for q in range(4) for i in range(3)), dump(procs)
    for p in procs:
        p.stop()


# --------------------------------------------------------------------------- 4/5. resuming


@pytest.mark.parametrize("restart", ["none", "clean", "sigkill"])
def test_consumer_resumes_at_committed_offset(broker_factory, consumers, restart):
    """A consumer of the group resumes where the last one committed, not from the
    beginning and not further on; across a broker restart (SIGTERM or SIGKILL) too."""
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 3), f"resume-{restart}"
    produce(broker.bootstrap, topic, 3, 30)
    first = consumers("first", broker.bootstrap, topic, group, "--max-records", 40)
    assert first.wait_exit(30) == 0, first.diagnostics()
    committed = first.committed
    assert len(first.records) == 40 and first.of("closed"), first.diagnostics()
    assert sum(committed.values()) == 40, committed

    if restart == "clean":
        assert broker.stop() == 0
        broker.start()
    elif restart == "sigkill":
        broker.kill()
        broker.start()

    with WireClient.connect(broker.bootstrap) as client:
        want = {p: committed.get(p, -1) for p in range(3)}
        assert offset_fetch(client, group, topic, 3) == want
    lag = scrape(broker.metrics_port)
    for p in range(3):
        labels = f'group="{group}",partition="{p}",topic="{topic}"'
        if p in committed:
            assert lag[f"kafka_consumergroup_lag{{{labels}}}"] == 30 - committed[p]

    second = consumers("second", broker.bootstrap, topic, group)
    wait_for(lambda: len(second.records) >= 50, 30, "the rest of the records", [second])
    for p in range(3):
        offsets = [o for q, o, _ in second.records if q == p]
        assert offsets == list(range(committed.get(p, 0), 30)), (p, offsets, committed)
    both = sorted(first.records + second.records)
    assert len(both) == 90 and len(set(both)) == 90
    check_values(both)
    wait_for(lambda: second.committed == {p: 30 for p in range(3) if committed.get(p) != 30},
             10, "the final commits", [second])
    second.stop()
    with WireClient.connect(broker.bootstrap) as client:
        assert offset_fetch(client, group, topic, 3) == {0: 30, 1: 30, 2: 30}


def test_live_group_survives_broker_sigkill(broker_factory, consumers):
    """Members and their generation are in __consumer_offsets too: consumers that ride out
    a broker crash carry on in the same group without a rebalance or a duplicate."""
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 4), "live"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    procs = [consumers(f"c{i}", broker.bootstrap, topic, group, "--strategy", "range")
             for i in range(2)]
    shares = wait_settled(admin, group, procs, 4)
    produce(broker.bootstrap, topic, 4, 10)
    wait_for(lambda: all(p.committed == {q: 10 for q in shares[p.name]} for p in procs), 20,
             "every member to commit its share", procs)
    members = {m.client_id: m.member_id for m in described(admin, group).members}
    changes = {p.name: len(p.of("assignment")) for p in procs}

    broker.kill()
    broker.start()
    produce(broker.bootstrap, topic, 4, 10, start=10)
    wait_for(lambda: all(p.committed == {q: 20 for q in shares[p.name]} for p in procs), 30,
             "the members to carry on after the restart", procs)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert {m.client_id: m.member_id for m in described(admin, group).members} == members
    assert {p.name: len(p.of("assignment")) for p in procs} == changes, dump(procs)
    everything = sorted(r for p in procs for r in p.records)
    assert len(everything) == 80 and len(set(everything)) == 80, dump(procs)
    check_values(everything)
    for p in procs:
        p.stop()


def test_deleting_a_topic_deletes_its_committed_offsets(broker_factory, consumers):
    """Kafka drops a group's offsets for partitions that are deleted
    (GroupCoordinator.onPartitionsDeleted). Kept, they would apply to a new topic of the
    same name, and the group would skip the start of it."""
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 1), "reborn"
    produce(broker.bootstrap, topic, 1, 10)
    with WireClient.connect(broker.bootstrap) as client:
        find_coordinator(client, group)
        assert commit(client, group, -1, "", topic, offset=5) == ErrorCode.none
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic])[topic].result(10)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    produce(broker.bootstrap, topic, 1, 10)
    with WireClient.connect(broker.bootstrap) as client:
        assert offset_fetch(client, group, topic, 1) == {0: -1}
    reader = consumers("reader", broker.bootstrap, topic, group, "--max-records", 10)
    assert reader.wait_exit(30) == 0, reader.diagnostics()
    assert [o for _, o, _ in reader.records] == list(range(10)), reader.diagnostics()


# --------------------------------------------------------------------------- 7. static members


@pytest.mark.parametrize("client", ["confluent", pytest.param("java", marks=pytest.mark.java)])
def test_static_member_restart_keeps_assignment_without_rebalance(broker_factory, consumers,
                                                                   client):
    """KIP-345: a static member (group.instance.id) that comes back within its session
    replaces its old self: same partitions, same generation, the others undisturbed."""
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 4), f"static-{client}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    session_ms = 15_000  # the restart must fit in it

    def start(name: str):
        if client == "java":
            return consumers.java(name, broker.bootstrap, topic, group,
                                  f"group.instance.id=static-{name}",
                                  f"session.timeout.ms={session_ms}")
        return consumers(name, broker.bootstrap, topic, group, "--strategy", "range",
                         "--session-ms", session_ms, "--instance-id", f"static-{name}")

    # One by one: "a" joins twice (alone, then with "b"), so its last JoinGroup described
    # what it owned, which its restarted process cannot know.
    a = start("a")
    wait_for(lambda: stable_partitioned(admin, group, 1, 4), GROUP_TIMEOUT_S, "a alone", [a])
    b = start("b")
    shares = wait_for(lambda: stable_partitioned(admin, group, 2, 4), GROUP_TIMEOUT_S,
                      "a and b in a Stable group", [a, b])
    before = {m.client_id: m.member_id for m in described(admin, group).members}
    with WireClient.connect(broker.bootstrap) as client_:
        generation = current_generation(client_, group, before["b"])
    b_changes = len(b.of("assignment")) if client == "confluent" else 0

    a.kill()  # a static member sends no LeaveGroup anyway; this one does not even close
    killed_at = time.monotonic()
    a2 = start("a")

    def replaced():
        desc = described(admin, group)
        ids = {m.client_id: m.member_id for m in desc.members}
        if desc.state != ConsumerGroupState.STABLE or ids.get("a") in (None, before["a"]):
            return None
        return desc

    desc = wait_for(replaced, GROUP_TIMEOUT_S, "the restarted member", [a2, b])
    assert time.monotonic() - killed_at < session_ms / 1000, "restart slower than the session"
    after = {m.client_id: m.member_id for m in desc.members}
    assert after["b"] == before["b"], (before, after)
    assert {m.group_instance_id for m in desc.members} == {"static-a", "static-b"}
    with WireClient.connect(broker.bootstrap) as client_:
        error = heartbeat(client_, group, generation, after["b"])
        now = current_generation(client_, group, after["b"])
    assert error == ErrorCode.none, (
        f"generation {generation} -> {now}: the static member's return caused a rebalance"
    )
    assert stable_shares(admin, group, 2) == shares
    if client == "confluent":
        wait_for(lambda: a2.assignment, GROUP_TIMEOUT_S, "a's assignment", [a2, b])
        assert a2.assignment == shares["a"], dump([a2, b])
        assert len(b.of("assignment")) == b_changes, f"b was rebalanced\n{dump([a2, b])}"
        produce(broker.bootstrap, topic, 4, 3)
        wait_for(lambda: len(a2.records) + len(b.records) >= 12, 20, "12 records", [a2, b])
        assert {q for q, _, _ in a2.records} == shares["a"]
        assert {q for q, _, _ in b.records} == shares["b"]
        for p in (a2, b):
            p.stop()


# --------------------------------------------------------------------------- 6. bad input


def test_group_request_errors(broker_factory):
    broker = broker_factory(**NO_DELAY)
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "committed")
        find_coordinator(client, "g")
        # v4+: the first JoinGroup only hands out a member id (KIP-394).
        first = join(client, "g")
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        joined = join(client, "g", first.member_id)
        assert joined.error_code == ErrorCode.none, joined
        member, generation = joined.member_id, joined.generation_id
        assert joined.leader == member and [m.member_id for m in joined.members] == [member]
        synced = sync(client, "g", generation, member, {member: b"assignment"})
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"assignment")

        assert commit(client, "g", generation, member, "committed") == ErrorCode.none
        assert commit(client, "g", generation + 1, member, "committed") == (
            ErrorCode.illegal_generation)
        assert commit(client, "g", generation, "stranger", "committed") == (
            ErrorCode.unknown_member_id)
        assert heartbeat(client, "g", generation + 1, member) == ErrorCode.illegal_generation
        assert heartbeat(client, "g", generation, "stranger") == ErrorCode.unknown_member_id
        assert sync(client, "g", generation + 1, member).error_code == (
            ErrorCode.illegal_generation)

        # No protocol in common with the group, or another protocol type.
        assert join(client, "g", protocols=("roundrobin",), version=3).error_code == (
            ErrorCode.inconsistent_group_protocol)
        assert join(client, "g", protocol_type="connect", version=3).error_code == (
            ErrorCode.inconsistent_group_protocol)
        # Session timeouts outside group.{min,max}.session.timeout.ms (6 s, 30 min).
        for session_ms in (5999, 1_800_001):
            assert join(client, "g", session_ms=session_ms).error_code == (
                ErrorCode.invalid_session_timeout), session_ms
        # A static member id that does not match the instance's: fenced.
        static = join(client, "s", instance_id="i-1")
        assert static.error_code == ErrorCode.none, static
        assert join(client, "s", "other-id", instance_id="i-1").error_code == (
            ErrorCode.fenced_instance_id)

        assert delete_groups(client, "g", "nobody") == {
            "g": ErrorCode.non_empty_group, "nobody": ErrorCode.group_id_not_found,
        }
        left = client.request(req(LEAVE_GROUP, 2, {"group_id": "g", "member_id": member}))
        assert left.error_code == ErrorCode.none
        assert offset_fetch(client, "g", "committed", 1) == {0: 1}
        assert delete_groups(client, "g") == {"g": ErrorCode.none}
        assert offset_fetch(client, "g", "committed", 1) == {0: -1}
        assert delete_groups(client, "g") == {"g": ErrorCode.group_id_not_found}
        listed = client.request(req(LIST_GROUPS, 4, {"states_filter": []}))
        assert [g.group_id for g in listed.groups] == ["s"], listed
        # v5 (KIP-848): every group here is a classic one; type filters are case-blind.
        typed = client.request(req(LIST_GROUPS, 5, {"states_filter": [],
                                                    "types_filter": ["Classic"]}))
        assert [(g.group_id, g.group_type) for g in typed.groups] == [("s", "classic")]
        consumer = client.request(req(LIST_GROUPS, 5, {"states_filter": [],
                                                       "types_filter": ["consumer"]}))
        assert consumer.groups == ()
    assert_no_broker_errors(broker)


def test_empty_group_id_is_invalid(broker_factory):
    """Kafka refuses the empty group id in every membership API (isValidGroupId)."""
    broker = broker_factory(**NO_DELAY)
    with WireClient.connect(broker.bootstrap) as client:
        assert join(client, "").error_code == ErrorCode.invalid_group_id
        assert join(client, "", "some-member").error_code == ErrorCode.invalid_group_id
        assert sync(client, "", 1, "some-member").error_code == ErrorCode.invalid_group_id
        assert heartbeat(client, "", 1, "some-member") == ErrorCode.invalid_group_id
        left = client.request(req(LEAVE_GROUP, 2, {"group_id": "", "member_id": "some-member"}))
        assert left.error_code == ErrorCode.invalid_group_id
    assert_no_broker_errors(broker)


def test_empty_group_id_is_accepted_for_offsets(broker_factory):
    """Kafka keeps OffsetCommit and OffsetFetch working for the empty group id, for old
    clients that commit without a group ("For backwards compatibility, we support offset
    commits for the empty groupId", GroupCoordinatorService.commitOffsets)."""
    broker = broker_factory(**NO_DELAY)
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "anonymous")
        assert commit(client, "", -1, "", "anonymous", offset=42) == ErrorCode.none
        assert offset_fetch(client, "", "anonymous", 1) == {0: 42}
    assert_no_broker_errors(broker)


# =========================================================================== entry point

if __name__ == "__main__":
    if sys.argv[1:2] != ["consume"]:
        sys.exit("usage: python -m tests.test_groups consume <bootstrap> <topic> <group> ...")
    consume_main(sys.argv[2:])


def test_names_too_long_to_store_are_refused_up_front(broker_factory):
    """A flexible request can carry a 40,000-character name; the offsets topic and the
    legacy responses cannot hold one. Such names are refused before any state exists, so
    ListGroups v0 keeps working for everyone."""
    broker = broker_factory(**NO_DELAY)
    huge = "g" * 40_000
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "named")
        response = client.request(req(OFFSET_COMMIT, 9, {
            "group_id": huge, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": "named", "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}))
        assert response.topics[0].partitions[0].error_code == ErrorCode.invalid_group_id
        assert join(client, huge, version=9).error_code == ErrorCode.invalid_group_id
        find_coordinator(client, "ok")
        assert join(client, "ok", instance_id="i" * 40_000, version=9).error_code == (
            ErrorCode.invalid_request)
        assert join(client, "ok", protocol_type="p" * 40_000, version=9).error_code == (
            ErrorCode.invalid_request)
        assert join(client, "ok", protocols=("r" * 40_000,), version=9).error_code == (
            ErrorCode.invalid_request)
        for version in (0, 2, 5):
            listed = client.request(req(LIST_GROUPS, version, {"states_filter": [],
                                                               "types_filter": []}))
            assert listed.error_code == ErrorCode.none and listed.groups == (), listed
        # A commit for a topic the cluster does not have is refused, as Kafka refuses it.
        assert commit(client, "ok", -1, "", "no-such-topic") == (
            ErrorCode.unknown_topic_or_partition)
    assert_no_broker_errors(broker)


def test_generated_member_ids_stay_storable():
    from broker.coordinator.classic_membership import _new_member_id
    from broker.coordinator.group_store import MAX_NAME_BYTES

    assert _new_member_id("rdkafka").startswith("rdkafka-")
    long_id = _new_member_id("é" * 20_000)  # 40,000 bytes of client id
    assert len(long_id.encode()) <= MAX_NAME_BYTES
    assert long_id.startswith("é" * 100)
