"""Consumer processes for the group tests, and what the broker says of their group:
``ConsumerProc`` runs consumer_driver.py in a process of its own (so that it can be
SIGKILLed) and collects the JSON lines it prints; ``JavaConsumer`` is KafkaCheck's
``consume --group``; the rest waits for a group to settle, as DescribeGroups shows it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kafkube.harness.waiting import wait_until
from tests.integration.test_compat_clients import ck_produce, topic_name
from tests.support import REPO

ROOT = REPO
NO_DELAY = {"group.initial.rebalance.delay.ms": "0"}
SESSION_MS = 6000
HEARTBEAT_MS = 500
TAKEOVER_MARGIN_S = 4.0  # on top of session.timeout.ms: detection, rejoin, sync, callbacks
PROC_DEADLINE_S = 60  # a consumer process never outlives this, whatever the test does
GROUP_TIMEOUT_S = 20  # waiting for a group to settle


# =========================================================================== the test side


class ConsumerProc:
    """A consumer process and the events it printed, each stamped with its arrival time."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, *opts: object) -> None:
        self.name = name
        argv = ["consume", bootstrap, topic, group, "--name", name, *map(str, opts)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.groups.consumer_driver", *argv], cwd=ROOT,
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
        from tests.integration.test_java_client import start_kafkacheck

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
