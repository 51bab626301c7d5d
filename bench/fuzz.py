"""Structure-aware fuzzing of every API and version the broker serves.

For each request, pick an API and version the broker registers, build a valid request of
it from kio's schema (names of a topic and group that exist, a valid record batch where
records go, short timeouts), change one to three of its fields to values that break rules
(empty, huge, negative, extreme, null; record batches whose contents are wrong under a
correct CRC), and sometimes flip or cut bytes of the encoded frame. Each frame goes out
with an ApiVersions probe behind it on the same connection: the broker must answer, or
close the connection (framing errors only); a silent connection is a hang.

Along the way and at the end: the broker's log holds no handler failure, a fresh client
produces and reads back a record every ``check_every`` frames, and the broker's memory
stays within a bound. ``python -m bench fuzz`` runs it for a long time (``make fuzz``);
``tests/integration/test_fuzz.py`` runs a short pass in CI.
"""

from __future__ import annotations

import dataclasses
import random
import re
import socket
import struct
import time
import typing
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from functools import cache, cached_property
from pathlib import Path
from types import UnionType
from typing import Any

from kio.index import load_request_schema

from broker.handlers import load_all
from broker.protocol.batch_codec import CODEC_GZIP, CODEC_NONE, Record, compress, encode_batch
from broker.protocol.bounds import MAX_ENTRIES
from broker.protocol.codec import RequestHeader, encode_request
from kafkube.harness.procstat import rss_bytes

TOPIC = "fuzz"
GROUP = "fuzz-group"
PROBE_API = 18
# A probe answered only after SLOW_AFTER is "late": a frame naming a hundred thousand
# things takes the broker seconds, and a connection is served in order, as in Kafka. A
# broker silent for HANG_AFTER, far beyond any such frame, is hung: it took no byte of the
# frame and sent no byte of an answer for that long. Silence, not the total, is judged, so
# a broker streaming a 100 MB answer is slow, never hung (see ``Fuzzer.send``).
SLOW_AFTER = 3.0
HANG_AFTER = 30.0
# APIs that legitimately wait on a timeout the request carries (a mutated frame may carry
# a long one): a probe behind these is given up after SLOW_AFTER and counted as waiting.
WAITING_APIS = frozenset({0, 1, 11, 14, 19, 20, 21, 37})
_I32 = struct.Struct(">i")
_INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


# -- valid requests ----------------------------------------------------------------------


def valid_batch(count: int = 3, codec: int = CODEC_NONE) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([Record(i, now, b"k%d" % i, b"fuzz-%d" % i) for i in range(count)],
                        0, codec=codec)


def _field_value(name: str, kafka_type: str | None, hint: Any) -> Any:
    """A plausible valid value for one field, by its Kafka type and name."""
    if kafka_type in _INTS:
        if "replica" in name or name.endswith("broker_id") or name == "leader_id":
            return -1
        if "acks" in name:
            return 1
        if "epoch" in name or "generation" in name:
            return -1
        if name in ("max_bytes", "partition_max_bytes", "response_partition_limit"):
            return 1 << 20
        if "num_partitions" in name or name == "count":
            return 1
        if "replication_factor" in name:
            return 1
        return 0
    if kafka_type == "string":
        if "topic" in name or name == "name":
            return TOPIC
        if "group" in name or name == "key":
            return GROUP
        return "fuzz"
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return timedelta(milliseconds=50)
    if kafka_type == "bool":
        return False
    if kafka_type == "bytes":
        return b"fuzz"
    if kafka_type == "records":
        return valid_batch()
    if kafka_type == "uuid":
        return uuid.uuid4()
    return _value_of_type(hint)


def _unwrap(hint: Any) -> Any:
    """``X`` of ``X | None``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) in (typing.Union, UnionType) and args else hint


def _value_of_type(hint: Any) -> Any:
    hint = _unwrap(hint)
    if typing.get_origin(hint) is tuple:
        (element, *_) = typing.get_args(hint)
        return (build_valid(element),) if dataclasses.is_dataclass(element) else ()
    if dataclasses.is_dataclass(hint):
        return build_valid(hint)
    return None


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def build_valid(cls: type) -> Any:
    """A valid instance of a kio schema class."""
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        kafka_type = f.metadata.get("kafka_type")
        hint = _unwrap(hints[f.name])
        if typing.get_origin(hint) is tuple and kafka_type is not None:  # primitives
            values[f.name] = (_field_value(f.name, kafka_type, typing.get_args(hint)[0]),)
        else:
            values[f.name] = _field_value(f.name, kafka_type, hint)
    return cls(**values)


# -- breaking them -----------------------------------------------------------------------


def _bad_batches(rng: random.Random) -> list[bytes | None]:
    good = bytearray(valid_batch())
    body = bytes(good[61:])
    junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 60)))

    def around(payload: bytes, count: int, codec: int = 0) -> bytes:
        head = bytearray(good[:61])
        struct.pack_into(">i", head, 8, 49 + len(payload))
        struct.pack_into(">h", head, 21, codec)
        struct.pack_into(">i", head, 23, count - 1)
        struct.pack_into(">i", head, 57, count)
        return _with_crc(bytes(head) + payload)

    return [None, b"", junk, around(junk, 3), around(body[:-2], 3), around(body, 5),
            around(junk, 2, codec=rng.choice([1, 2, 3, 4])),
            around(compress(CODEC_GZIP, junk), 1, codec=CODEC_GZIP),
            valid_batch(codec=rng.choice([1, 2, 3, 4]))]


def _with_crc(batch: bytes) -> bytes:
    import crc32c

    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def _bad_value(rng: random.Random, kafka_type: str | None, current: Any) -> Any:
    """A value of the field's type that breaks a rule; None only where the caller allows
    it (see ``mutate``)."""
    if kafka_type in _INTS:
        bits = _INTS[kafka_type]
        return rng.choice([0, 1, -1, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1,
                           rng.randrange(-(2 ** (bits - 1)), 2 ** (bits - 1))])
    if kafka_type == "string":
        return rng.choice([None, "", "x" * 300, "n" * 40_000, "é\u0000\uffff",
                           "".join(chr(rng.randrange(32, 127)) for _ in range(8))])
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return timedelta(milliseconds=rng.choice([-1, 0, 1]))
    if kafka_type == "bool":
        return not current
    if kafka_type == "bytes":
        return rng.choice([None, b"", bytes(rng.randrange(256) for _ in range(40))])
    if kafka_type == "records":
        return rng.choice(_bad_batches(rng))
    if kafka_type == "uuid":
        return rng.choice([uuid.UUID(int=0), uuid.UUID(int=1), uuid.uuid4()])
    return current


def mutate(rng: random.Random, obj: Any) -> Any:
    """``obj`` with one field, somewhere in it, changed to a value that breaks a rule but
    not the protocol: null only where the schema allows it, so the frame stays well formed
    (``mutate_bytes`` breaks frames)."""
    fields = dataclasses.fields(obj)
    if not fields:
        return obj
    f = rng.choice(fields)
    current = getattr(obj, f.name)
    kafka_type = f.metadata.get("kafka_type")
    nullable = type(None) in typing.get_args(_hints(type(obj))[f.name])
    new = _mutated_field(rng, kafka_type, current)
    if new is None and not nullable:
        return obj
    return dataclasses.replace(obj, **{f.name: new})


def _mutated_field(rng: random.Random, kafka_type: str | None, current: Any) -> Any:
    if isinstance(current, tuple):
        choice = rng.randrange(5)
        if choice == 0:
            new: Any = ()
        elif choice == 1:
            new = None
        elif choice == 2 and current:
            new = current * rng.choice([2, 50])
        elif current and dataclasses.is_dataclass(current[0]):
            new = (mutate(rng, current[0]), *current[1:])
        else:  # an array of primitives: its elements may not be null
            new = tuple(v for c in current
                        if (v := _bad_value(rng, kafka_type, c)) is not None)
    elif dataclasses.is_dataclass(current):
        new = None if rng.random() < 0.2 else mutate(rng, current)
    else:
        new = _bad_value(rng, kafka_type, current)
    return new


def entries(obj: Any) -> int:
    """Array elements in a request, nested ones included (``bounds.MAX_ENTRIES``)."""
    if not dataclasses.is_dataclass(obj):
        return 0
    total = 0
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, tuple):
            total += len(value)
            if value and dataclasses.is_dataclass(value[0]):
                total += sum(entries(v) for v in value)
        else:
            total += entries(value)
    return total


def mutate_bytes(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        if len(data) <= 12:
            break
        pos = rng.randrange(12, len(data))  # keep size, api key, version, correlation id
        kind = rng.randrange(3)
        if kind == 0:
            data[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:
            del data[pos : pos + rng.randint(1, 8)]
        else:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    _I32.pack_into(data, 0, len(data) - 4)
    return bytes(data)


# -- running -----------------------------------------------------------------------------


@dataclasses.dataclass
class FuzzStats:
    frames: int = 0
    answered: int = 0
    closed: int = 0
    late: int = 0
    waiting: int = 0
    unencodable: int = 0
    health_checks: int = 0
    peak_rss: int = 0
    by_api: Counter[int] = dataclasses.field(default_factory=Counter)
    closed_by_api: Counter[int] = dataclasses.field(default_factory=Counter)
    # Closed after a frame whose bytes were left whole: a request that decoded and got no
    # answer, which must never happen (key, version).
    closed_intact: Counter[tuple[int, int]] = dataclasses.field(default_factory=Counter)
    late_by_api: Counter[int] = dataclasses.field(default_factory=Counter)
    hangs_by_api: Counter[int] = dataclasses.field(default_factory=Counter)
    # The first frames that went unanswered (key, version, size, the frame's start as hex).
    hang_samples: list[tuple[int, int, int, str]] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.frames} frames over {len(self.by_api)} APIs: {self.answered} answered "
                f"({self.late} after {SLOW_AFTER:.0f} s), {self.closed} closed, "
                f"{self.waiting} waiting on a timeout they carry, "
                f"{self.unencodable} not encodable (skipped); {self.health_checks} health "
                f"checks; peak RSS {self.peak_rss / 2**20:.0f} MiB")


class Fuzzer:
    def __init__(self, bootstrap: str, seed: int) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.address = (host, int(port))
        self.rng = random.Random(seed)
        self.sock: socket.socket | None = None
        self.answers = AnswerScanner()
        self.correlation_id = 0
        self.stats = FuzzStats()

    @cached_property
    def targets(self) -> list[tuple[int, int, Any]]:
        """(api key, version, a valid request) of everything the broker serves; built on
        first use (seconds of kio), so a test sending frames of its own does not wait."""
        return [(key, version, build_valid(load_request_schema(key, version)))
                for key, spec in sorted(load_all().items())
                for version in range(spec.accepts_from, spec.max_version + 1)]

    def _connect(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection(self.address, timeout=10)
            self.answers = AnswerScanner()
        return self.sock

    def _drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None

    def next_frame(self) -> tuple[int, int, bytes, bool] | None:
        """(api key, version, frame, whether it may be refused as malformed: its bytes cut
        or flipped, or too many entries)."""
        key, version, valid = self.rng.choice(self.targets)
        request = valid
        for _ in range(self.rng.randint(1, 3)):
            request = mutate(self.rng, request)
        self.correlation_id = (self.correlation_id + 2) % 2**31
        try:
            data = encode_request(RequestHeader(key, version, self.correlation_id, "fuzz"),
                                  request)
        except Exception:  # kio refuses values its schema cannot carry: not a frame
            self.stats.unencodable += 1
            return None
        mangled = self.rng.random() < 0.2
        if mangled:
            data = mutate_bytes(self.rng, data)
        # Past the broker's element limit a request is refused as malformed, like a frame
        # past socket.request.max.bytes: a close is its answer.
        return key, version, data, mangled or entries(request) > MAX_ENTRIES

    def send_one(self) -> None:
        built = self.next_frame()
        if built is not None:
            self.send(*built)

    def send(self, key: int, version: int, data: bytes, mangled: bool) -> str:
        """Send one frame (its correlation id ``self.correlation_id``) with a probe behind
        it, count the outcome, and return it: answered, late, closed, waiting or hang."""
        probe_id = self.correlation_id + 1
        probe = encode_request(RequestHeader(PROBE_API, 0, probe_id, "fuzz-probe"),
                               load_request_schema(PROBE_API, 0)())
        self.stats.frames += 1
        self.stats.by_api[key] += 1
        sock = self._connect()
        try:
            outcome = self._send_all(sock, data + probe)
            if outcome is None:
                outcome = self._await_probe(sock, probe_id, key)
        except (ConnectionError, OSError):
            outcome = "closed"
        if outcome == "closed":
            self.stats.closed += 1
            self.stats.closed_by_api[key] += 1
            if not mangled:
                self.stats.closed_intact[(key, version)] += 1
            self._drop()
        elif outcome == "waiting":
            self.stats.waiting += 1
            self._drop()
        elif outcome == "hang":
            self.stats.hangs_by_api[key] += 1
            if len(self.stats.hang_samples) < 20:
                self.stats.hang_samples.append((key, version, len(data), data[:100].hex()))
            self._drop()
        else:
            self.stats.answered += 1
            if outcome == "late":
                self.stats.late += 1
                self.stats.late_by_api[key] += 1
        return outcome

    @staticmethod
    def _send_all(sock: socket.socket, data: bytes) -> str | None:
        """Send ``data``; "hang" if the broker took none of it for HANG_AFTER. sendall's
        timeout bounds the whole send: a broker slow to read 100 MB was counted "closed"
        after a frame it may well have answered."""
        sock.settimeout(HANG_AFTER)
        view = memoryview(data)
        while view:
            try:
                sent = sock.send(view)
            except TimeoutError:
                return "hang"
            view = view[sent:]
        return None

    def _await_probe(self, sock: socket.socket, probe_id: int, key: int) -> str:
        """Read answers until the probe's. Every byte that arrives is progress and moves
        the deadline; only a wait that ran out on the socket (the broker silent for the
        whole window) is a hang, so neither a long answer nor the fuzzer's own work is
        counted against the broker."""
        started = time.monotonic()
        waits = key in WAITING_APIS
        window = SLOW_AFTER if waits else HANG_AFTER
        deadline = started + window
        while True:
            sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                return "waiting" if waits else "hang"
            if not chunk:
                return "closed"
            if probe_id in self.answers.feed(chunk):
                return "late" if time.monotonic() - started > SLOW_AFTER else "answered"
            deadline = time.monotonic() + window


class AnswerScanner:
    """The correlation ids of the response frames in a byte stream, found without keeping
    the frames: only each one's first 8 bytes (size, correlation id) are held, the rest is
    counted off as it arrives. Appending every chunk to one ``bytes`` buffer was quadratic:
    the 100 MB answer to a FindCoordinator of 2,500 keys of 40,000 characters (it echoes
    them; seed 7) took the broker under a second to send and the fuzzer over 30 s to
    buffer, which it then reported as the broker's hang."""

    def __init__(self) -> None:
        self._head = bytearray()  # the start of the frame being read
        self._correlation = 0
        self._left = 0  # bytes of that frame's body still to come

    def feed(self, chunk: bytes) -> list[int]:
        """The correlation ids of the frames ``chunk`` completes, in order."""
        done = []
        pos, end = 0, len(chunk)
        while pos < end:
            if self._left:
                take = min(self._left, end - pos)
                self._left -= take
                pos += take
                if not self._left:
                    done.append(self._correlation)
                continue
            take = min(8 - len(self._head), end - pos)
            self._head += chunk[pos : pos + take]
            pos += take
            if len(self._head) == 8:
                size, self._correlation = struct.unpack(">ii", self._head)
                self._head.clear()
                self._left = max(size - 4, 0)
                if not self._left:
                    done.append(self._correlation)
        return done


def run(bootstrap: str, *, frames: int, seconds: float, seed: int, check_every: int,
        health: Callable[[], None], rss: Callable[[], int], failures: Callable[[], list[str]],
        progress: Callable[[FuzzStats], None] | None = None) -> FuzzStats:
    """Fuzz until ``frames`` frames or ``seconds`` pass; checks along the way raise
    AssertionError naming what broke."""
    fuzzer = Fuzzer(bootstrap, seed)
    stats = fuzzer.stats
    deadline = time.monotonic() + seconds
    while stats.frames < frames and time.monotonic() < deadline:
        fuzzer.send_one()
        if stats.frames and stats.frames % check_every == 0 and stats.health_checks < (
                stats.frames // check_every):
            health()
            stats.health_checks += 1
            stats.peak_rss = max(stats.peak_rss, rss())
            found = failures()
            assert not found, "the broker logged failures:\n" + "\n".join(found[:20])
            if progress is not None:
                progress(stats)
    fuzzer._drop()
    assert not stats.hangs_by_api, (
        f"the broker silent for {HANG_AFTER:.0f} s (reading nothing, answering nothing) "
        f"after requests of APIs {dict(stats.hangs_by_api)}; "
        f"first frames (api, version, size, start): {stats.hang_samples[:5]}")
    assert not stats.closed_intact, (
        f"connections closed after well-formed requests (api, version): "
        f"{dict(stats.closed_intact)}")
    return stats


def broker_failures(log_file: Path) -> list[str]:
    """Log lines of handler failures and errors: a request that parsed got no answer."""
    try:
        text = log_file.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines()
            if "handler failed" in line or " ERROR " in line or " CRITICAL " in line]


def broker_stalls(log_file: Path) -> list[str]:
    """The watchdog's reports of a held event loop, each with the stack that held it."""
    try:
        text = log_file.read_text(errors="replace")
    except FileNotFoundError:
        return []
    reports, current = [], None
    for line in text.splitlines():
        if " WARNING broker.common.watchdog: " in line:
            current = [line]
            reports.append(current)
        elif current is not None and line.startswith("  "):
            current.append(line)
        else:
            current = None
    return ["\n".join(report) for report in reports]


def main(argv: list[str]) -> int:
    """``python -m bench fuzz``: a long run against a fresh broker, with its figures."""
    import argparse
    import sys

    from confluent_kafka import Consumer, Producer, TopicPartition

    from bench.broker import BenchBroker

    parser = argparse.ArgumentParser(prog="python -m bench fuzz", description=__doc__)
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames (1,000,000)")
    parser.add_argument("--minutes", type=float, default=60.0, help="at most this long (60)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (random)")
    parser.add_argument("--check-every", type=int, default=5000,
                        help="frames between health checks (5000)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    started = time.monotonic()
    with BenchBroker(1) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fuzz-health",
                             "enable.auto.commit": False})
        sent = [0]

        def health() -> None:
            producer.produce("fuzz-health", b"health-%d" % sent[0], partition=0)
            assert producer.flush(30) == 0, "the broker stopped taking records"
            consumer.assign([TopicPartition("fuzz-health", 0, sent[0])])
            sent[0] += 1
            deadline = time.monotonic() + 30
            while (msg := consumer.poll(1)) is None:
                assert time.monotonic() < deadline, "the health record did not come back"
            assert msg.error() is None, msg.error()

        def progress(stats: FuzzStats) -> None:
            rate = stats.frames / (time.monotonic() - started)
            print(f"{stats.summary()}; {rate:.0f} frames/s", flush=True)

        health()
        start_rss = rss_bytes(broker.pid)
        log_file = broker.log_dir / "broker.log"
        try:
            stats = run(broker.bootstrap, frames=args.frames, seconds=args.minutes * 60,
                        seed=seed, check_every=args.check_every, health=health,
                        rss=lambda: rss_bytes(broker.pid),
                        failures=lambda: broker_failures(log_file), progress=progress)
        finally:
            stalls = broker_stalls(log_file)
            held = [float(m.group(1)) for r in stalls
                    if (m := re.search(r"was held for ([0-9.]+) s", r))]
            print(f"event-loop stalls the broker logged: {len(held)}, the longest "
                  f"{max(held, default=0):.1f} s")
            for report in stalls[:10]:
                print(report)
        consumer.close()
    # A stall as long as a session would cost the broker its liveness lease.
    session = 9.0  # broker.session.timeout.ms's default, which BenchBroker keeps
    assert max(held, default=0) < session, f"the event loop was held for {max(held):.1f} s"
    elapsed = time.monotonic() - started
    print(f"\n{stats.summary()}")
    print(f"{elapsed / 60:.1f} min, {stats.frames / elapsed:.0f} frames/s, seed {seed}; "
          f"RSS {start_rss / 2**20:.0f} MiB at the start, {stats.peak_rss / 2**20:.0f} MiB "
          f"at most")
    print("frames per API:", dict(sorted(stats.by_api.items())))
    print("closed per API:", dict(sorted(stats.closed_by_api.items())))
    print(f"answered after {SLOW_AFTER:.0f} s, per API:", dict(sorted(stats.late_by_api.items())))
    print("reproduce: " + " ".join([sys.executable, "-m", "bench", "fuzz", *argv,
                                     "--seed", str(seed)] if args.seed is None else
                                    [sys.executable, "-m", "bench", "fuzz", *argv]))
    return 0
