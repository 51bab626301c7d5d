"""Compatibility with the Apache Kafka Java client (kafka-clients from Maven Central).

The client is driven by tests/clients/java/KafkaCheck.java, compiled by
tests/clients/java/setup.sh (called from scripts/setup.sh) into ~/.cache/kafkube. Each run of
the program prints one JSON object; these tests assert on it. Missing Java or jars make the
tests fail, not skip: the suite promises the Java client works.

Records follow the scheme documented at the top of KafkaCheck.java; ``expected_value`` below is
an independent Python copy so that printed records can be checked here as well.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafkube.harness.checkout import cache_dir
from tests.support import CLIENTS_DIR

pytestmark = pytest.mark.java

JAVA_DIR = CLIENTS_DIR / "java"
RUN_TIMEOUT = 180  # seconds for one JVM run; KafkaCheck's own client timeouts are shorter
MIB = 1024 * 1024
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


# --------------------------------------------------------------------------- locating the build


def java_build_dirs() -> tuple[Path, Path]:
    """(classes dir, jar dir) as written by tests/clients/java/setup.sh."""
    cache = cache_dir()
    return cache / "java-classes", cache / "java-lib"


def _sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def java_command() -> list[str]:
    """The command prefix that runs KafkaCheck; fails the test if the build is missing."""
    hint = "install it with scripts/setup.sh (or: bash tests/clients/java/setup.sh)"
    java = shutil.which("java")
    if java is None:
        pytest.fail(f"Java client tests need a JDK: no `java` on PATH; {hint}", pytrace=False)
    classes, lib = java_build_dirs()
    if not (classes / "KafkaCheck.class").is_file():
        pytest.fail(f"KafkaCheck is not compiled: {classes}/KafkaCheck.class is missing; {hint}",
                    pytrace=False)
    if not list(lib.glob("kafka-clients-*.jar")):
        pytest.fail(f"the kafka-clients jar is missing from {lib}; {hint}", pytrace=False)
    inputs = (classes / ".inputs").read_text().split() if (classes / ".inputs").is_file() else []
    wanted = [_sha1(JAVA_DIR / "KafkaCheck.java"), _sha1(JAVA_DIR / "pom.xml")]
    if inputs != wanted:
        pytest.fail(f"the compiled KafkaCheck in {classes} is stale (KafkaCheck.java or pom.xml "
                    f"changed); {hint}", pytrace=False)
    return [java, "-cp", f"{classes}{os.pathsep}{lib / '*'}", "KafkaCheck"]


# --------------------------------------------------------------------------- running it


@dataclass
class Run:
    argv: list[str]
    code: int
    data: dict[str, Any]
    stderr: str

    def describe(self) -> str:
        err = "\n".join(self.stderr.strip().splitlines()[-30:])
        return (f"KafkaCheck {' '.join(self.argv)}\nexit code {self.code}\n"
                f"result: {json.dumps(self.data)[:4000]}\nstderr (last lines):\n{err}")


def start_kafkacheck(*args: object) -> tuple[list[str], subprocess.Popen[str]]:
    argv = [str(a) for a in args]
    # A UTF-8 locale, or the JVM decodes non-ASCII arguments (--key-prefix) as '?'.
    proc = subprocess.Popen(java_command() + argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env={**os.environ, "LC_ALL": "C.UTF-8"})
    return argv, proc


def finish_kafkacheck(argv: list[str], proc: subprocess.Popen[str],
                      ok: bool | None = True) -> Run:
    """Wait for a started KafkaCheck. ``ok=True``: it must succeed; ``False``: it must fail."""
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"KafkaCheck {' '.join(argv)} did not finish within {RUN_TIMEOUT}s; "
                    f"stderr: {stderr[-4000:]}")
    lines = [line for line in stdout.splitlines() if line.strip()]
    try:
        data = json.loads(lines[-1])
        assert isinstance(data, dict)
    except (IndexError, ValueError, AssertionError):
        pytest.fail(f"KafkaCheck {' '.join(argv)} printed no JSON object (exit {proc.returncode})"
                    f"\nstdout: {stdout[-2000:]}\nstderr: {stderr[-4000:]}")
    run = Run(argv, proc.returncode, data, stderr)
    assert len(lines) == 1, "KafkaCheck printed more than one line:\n" + run.describe()
    agree = data.get("ok") is (run.code == 0)
    assert agree, "exit code and 'ok' disagree:\n" + run.describe()
    if ok is True:
        assert run.code == 0, "KafkaCheck failed:\n" + run.describe()
    elif ok is False:
        assert run.code == 1, "KafkaCheck should have failed:\n" + run.describe()
    return run


def kafkacheck(*args: object, ok: bool | None = True) -> Run:
    """Run KafkaCheck with ``args`` to completion (see ``finish_kafkacheck`` for ``ok``)."""
    return finish_kafkacheck(*start_kafkacheck(*args), ok=ok)


def produce(bootstrap: str, topic: str, count: int, *opts: object) -> dict[str, Any]:
    return kafkacheck("produce", bootstrap, topic, count, *opts).data


def consume(bootstrap: str, topic: str, expected: int, *opts: object) -> dict[str, Any]:
    return kafkacheck("consume", bootstrap, topic, expected, *opts).data


def admin(bootstrap: str, *args: object, ok: bool | None = True) -> Run:
    return kafkacheck("admin", bootstrap, *args, ok=ok)


def expected_value(i: int, size: int = 0) -> str:
    """Python copy of KafkaCheck.value(i, size)."""
    head = f"v-{i}"
    return head + "".join(chr(ord("a") + (i + j) % 26) for j in range(len(head), size))


def assert_clean_consume(data: dict[str, Any], expected: int, ordered: bool = True,
                         from_offset: int = 0) -> None:
    """KafkaCheck's own checks of a consume: everything produced, once, in order, intact.

    ``ordered``: one producer wrote the records, so each partition holds them in index order.
    ``from_offset``: where the consumer started reading in each partition.
    """
    summary = {k: v for k, v in data.items() if k != "records"}
    assert data["count"] == expected, summary
    assert data["drained"] is True, summary
    for key in ("missing", "duplicates", "unparsable", "value_mismatches", "key_mismatches",
                "header_mismatches", "timestamp_mismatches"):
        assert data[key] == 0, (key, summary)
    assert data["offsets_increasing"] is True, summary
    assert data["offsets_contiguous"] is True, summary
    if ordered:
        assert data["key_order"] is True, summary
    # A fresh topic written by one producer: every partition's log starts at 0 and holds
    # exactly the records that were read from it.
    for part, (start, end) in data["log_offsets"].items():
        got = data["partitions"].get(part, {"count": 0})["count"]
        assert start == 0 and end - from_offset == got, (part, start, end, got, summary)
    assert data["ok"] is True, summary


def now_ms() -> int:
    return int(time.time() * 1000)


# --------------------------------------------------------------------------- tests


def test_client_is_the_pinned_version() -> None:
    pinned = re.search(r"<kafka.clients.version>([^<]+)</kafka.clients.version>",
                       (JAVA_DIR / "pom.xml").read_text())
    assert pinned is not None
    run = kafkacheck("version")
    assert run.data["client_version"] == pinned.group(1)


def test_bad_usage_is_exit_code_2() -> None:
    run = kafkacheck("produce", "127.0.0.1:1", "t", "not-a-number", ok=None)
    assert run.code == 2 and run.data["ok"] is False, run.describe()
    assert "not an integer" in run.data["error"]


def test_round_trip_keys_headers_timestamps(broker_factory) -> None:
    broker = broker_factory(**{"num.partitions": "3"})
    base = now_ms() - 60_000
    opts = ("--with-headers", "--timestamp", base, "--timestamp-step", 10)
    sent = produce(broker.bootstrap, "round-trip", 30, *opts)
    assert sent["acked"] == 30 and sent["failed"] == 0, sent
    assert sent["in_order"] is True, sent
    assert len(sent["partitions"]) > 1, f"keys should spread over 3 partitions: {sent}"
    assert all(p["contiguous"] and p["first_offset"] == 0 for p in sent["partitions"].values())

    got = consume(broker.bootstrap, "round-trip", 30, *opts)
    assert_clean_consume(got, 30)
    assert got["timestamp_types"] == ["CreateTime"]
    assert got["records_printed"] == 30
    # Check each record here too, independently of KafkaCheck's own comparison.
    seen = set()
    for rec in got["records"]:
        i = int(rec["key"].removeprefix("k-"))
        seen.add(i)
        assert rec["key"] == f"k-{i}", rec
        assert rec["value"] == expected_value(i), rec
        assert rec["headers"] == [["h", str(i)]], rec
        assert rec["timestamp"] == base + 10 * i, rec
        assert rec["timestamp_type"] == "CreateTime", rec
        # The consumer finds each record where the producer's acknowledgement put it.
        assert [rec["partition"], rec["offset"], rec["timestamp"]] == sent["offsets"][i], rec
    assert seen == set(range(30))


def test_non_ascii_keys_and_json_escapes(broker) -> None:
    prefix = 'k"\\\t\u00fc\u20ac\U0001f600-'
    sent = produce(broker.bootstrap, "unicode", 5, "--key-prefix", prefix, "--with-headers")
    assert sent["acked"] == 5, sent
    got = consume(broker.bootstrap, "unicode", 5, "--key-prefix", prefix, "--with-headers")
    assert_clean_consume(got, 5)
    assert [rec["key"] for rec in got["records"]] == [f"{prefix}{i}" for i in range(5)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression(broker, codec: str) -> None:
    topic = f"codec-{codec}"
    opts = ("--value-size", 300, "--with-headers")
    sent = produce(broker.bootstrap, topic, 3000, "--compression", codec, *opts)
    assert sent["acked"] == 3000 and sent["in_order"] is True, sent
    assert sent["partitions"]["0"] == {
        "count": 3000, "first_offset": 0, "last_offset": 2999, "contiguous": True}, sent
    got = consume(broker.bootstrap, topic, 3000, *opts)
    assert_clean_consume(got, 3000)
    rec = got["records"][0]
    assert rec["offset"] == 0 and rec["value_len"] == 300, rec
    assert rec["value_sha256"] == hashlib.sha256(expected_value(0, 300).encode()).hexdigest()


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_consume_from_the_middle_of_a_batch(broker, codec: str) -> None:
    """A fetch from an offset inside a batch returns that batch; the client skips ahead."""
    sent = produce(broker.bootstrap, "middle", 1000, "--compression", codec,
                   "--prop", "linger.ms=50", "--prop", "batch.size=1000000")
    assert sent["acked"] == 1000 and sent["last_offset"] == 999, sent
    got = consume(broker.bootstrap, "middle", 463, "--from-offset", 537, "--first-index", 537)
    assert_clean_consume(got, 463, from_offset=537)
    assert got["partitions"]["0"]["first_offset"] == 537, got["partitions"]
    assert got["records"][0]["offset"] == 537 and got["records"][0]["value"] == "v-537"


def test_one_mib_record(broker) -> None:
    # message.max.bytes defaults to 1048588: a 1 MiB value plus the batch framing is larger,
    # so the topic raises its own limit.
    admin(broker.bootstrap, "create", "big", "--partitions", 1,
          "--config", "max.message.bytes=2097152")
    opts = ("--value-size", MIB, "--with-headers")
    sent = produce(broker.bootstrap, "big", 3, "--max-request-size", 2 * MIB, *opts)
    assert sent["acked"] == 3 and sent["last_offset"] == 2, sent
    got = consume(broker.bootstrap, "big", 3, *opts)
    assert_clean_consume(got, 3)
    for i, rec in enumerate(got["records"]):
        assert rec["offset"] == i and rec["value_len"] == MIB, rec
        assert rec["value_truncated"] is True
        assert rec["value_sha256"] == hashlib.sha256(expected_value(i, MIB).encode()).hexdigest()


def test_record_larger_than_message_max_bytes_is_rejected(broker) -> None:
    # The topic is auto-created with the broker's message.max.bytes (1048588).
    run = kafkacheck("produce", broker.bootstrap, "limited", 1, "--value-size", MIB,
                     "--max-request-size", 2 * MIB, ok=False)
    assert run.data["acked"] == 0 and run.data["failed"] == 1, run.describe()
    assert run.data["errors"] == {"RecordTooLargeException": 1}, run.describe()
    # Nothing was appended, and the partition still takes records of an allowed size.
    sent = produce(broker.bootstrap, "limited", 2, "--value-size", 1000)
    assert sent["first_offset"] == 0 and sent["last_offset"] == 1, sent
    assert_clean_consume(consume(broker.bootstrap, "limited", 2, "--value-size", 1000), 2)


@pytest.mark.parametrize("mode", ["default", "explicit"])
def test_idempotent_producer(broker_factory, mode: str) -> None:
    """Idempotence is on by default in the Java client: many small batches, 5 in flight."""
    broker = broker_factory(**{"num.partitions": "2"})
    opts: list[object] = ["--prop", "batch.size=1024", "--prop", "linger.ms=0",
                          "--prop", "max.in.flight.requests.per.connection=5"]
    if mode == "explicit":
        opts += ["--idempotence", "true", "--acks", "all"]
    sent = produce(broker.bootstrap, "idem", 20000, "--value-size", 50, *opts)
    assert sent["acked"] == 20000 and sent["in_order"] is True, sent
    assert sent["producer_id"] is not None and sent["producer_id"] >= 0, \
        f"the producer got no producer id from InitProducerId: {sent}"
    assert sent["producer_epoch"] >= 0, sent
    for part in sent["partitions"].values():
        assert part["contiguous"] and part["first_offset"] == 0, sent
    assert_clean_consume(consume(broker.bootstrap, "idem", 20000, "--value-size", 50), 20000)

    # A second producer gets a different producer id and continues the same logs.
    again = produce(broker.bootstrap, "idem", 10, "--key-prefix", "again-", *opts)
    assert again["producer_id"] != sent["producer_id"], (sent, again)
    for part, stats in again["partitions"].items():
        assert stats["first_offset"] == sent["partitions"][part]["last_offset"] + 1, (sent, again)


def test_concurrent_idempotent_producers(broker_factory) -> None:
    """Four producer processes at once into the same partitions: every record lands once."""
    broker = broker_factory(**{"num.partitions": "3"})
    n, each = 4, 5000
    started = [
        start_kafkacheck("produce", broker.bootstrap, "shared", each, "--first-index", j * each,
                         "--value-size", 64, "--prop", "batch.size=2048", "--prop", "linger.ms=0")
        for j in range(n)
    ]
    try:
        results = [finish_kafkacheck(argv, proc).data for argv, proc in started]
    finally:
        for _, proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    ids = set()
    for sent in results:
        assert sent["acked"] == each and sent["in_order"] is True, sent
        ids.add(sent["producer_id"])
    assert len(ids) == n and None not in ids, f"producer ids should be distinct: {ids}"
    got = consume(broker.bootstrap, "shared", n * each, "--value-size", 64)
    # Interleaved producers: indices are not in order within a partition, all else is exact.
    assert_clean_consume(got, n * each, ordered=False)
    acked_per_partition = {}
    for sent in results:
        for part, stats in sent["partitions"].items():
            acked_per_partition[part] = acked_per_partition.get(part, 0) + stats["count"]
    assert {p: s["count"] for p, s in got["partitions"].items()} == acked_per_partition


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_non_idempotent_acks(broker, acks: str) -> None:
    topic = f"acks-{acks}"
    sent = produce(broker.bootstrap, topic, 2000, "--acks", acks, "--idempotence", "false",
                   "--value-size", 100)
    assert sent["acked"] == 2000 and sent["producer_id"] is None, sent
    if acks == "0":
        # Nothing comes back with acks=0: the client reports offset -1.
        assert sent["first_offset"] == -1 and sent["last_offset"] == -1, sent
    else:
        assert sent["first_offset"] == 0 and sent["last_offset"] == 1999, sent
    assert_clean_consume(consume(broker.bootstrap, topic, 2000, "--value-size", 100), 2000)


def test_null_keys(broker_factory) -> None:
    broker = broker_factory(**{"num.partitions": "3"})
    sent = produce(broker.bootstrap, "no-keys", 500, "--null-keys")
    assert sent["acked"] == 500, sent
    got = consume(broker.bootstrap, "no-keys", 500, "--null-keys")
    assert_clean_consume(got, 500)
    assert all(rec["key"] is None for rec in got["records"])


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_offsets_for_times(broker_factory, codec: str) -> None:
    broker = broker_factory(**{"num.partitions": "2"})
    base = now_ms() - 600_000
    # Ten records in partition 0 at base, base+1s, ..., base+9s; partition 1 stays empty.
    # With linger the records usually share a batch, so the broker must look inside it.
    sent = produce(broker.bootstrap, "times", 10, "--partition", 0, "--timestamp", base,
                   "--timestamp-step", 1000, "--compression", codec, "--prop", "linger.ms=50")
    assert sent["acked"] == 10 and sent["last_offset"] == 9, sent

    asked = [base - 5000, base, base + 3000, base + 3500, base + 9000, base + 9001]
    data = kafkacheck("offsets-for-times", broker.bootstrap, "times", *asked).data
    assert [lookup["timestamp"] for lookup in data["lookups"]] == asked, data
    found = []
    for lookup in data["lookups"]:
        assert set(lookup["partitions"]) == {"0", "1"}, data
        assert lookup["partitions"]["1"] is None, data  # an empty partition has no answer
        hit = lookup["partitions"]["0"]
        found.append(None if hit is None else (hit["offset"], hit["timestamp"]))
    # The earliest offset whose timestamp is >= the one asked for.
    assert found == [(0, base), (0, base), (3, base + 3000), (4, base + 4000), (9, base + 9000),
                     None], data


def test_consumer_group_commits_and_resumes(broker_factory) -> None:
    """subscribe() in a group, commitSync(), and a later member resumes from the commit."""
    # No initial rebalance delay: each run here is the group's only member.
    broker = broker_factory(**{"num.partitions": "3", "group.initial.rebalance.delay.ms": "0"})
    bs = broker.bootstrap
    produce(bs, "grouped", 100)

    first = consume(bs, "grouped", 100, "--group", "g1")
    assert_clean_consume(first, 100)
    assert first["assignment"] == [0, 1, 2], first["assignment"]
    ends = {part: end for part, (_, end) in first["log_offsets"].items()}
    assert first["committed"] == ends and sum(ends.values()) == 100, first["committed"]

    # Nothing new: the next member of g1 starts at the committed offsets and reads nothing.
    idle = consume(bs, "grouped", 0, "--group", "g1")
    assert idle["count"] == 0 and idle["drained"] is True and idle["ok"] is True, idle
    assert idle["committed"] == ends, idle["committed"]

    # Ten more records: g1 reads exactly those, a new group reads everything.
    produce(bs, "grouped", 10, "--first-index", 100)
    more = consume(bs, "grouped", 10, "--group", "g1", "--first-index", 100)
    assert more["count"] == 10 and more["drained"] is True and more["ok"] is True, more
    assert sum(more["committed"].values()) == 110, more["committed"]
    for part, stats in more["partitions"].items():
        assert stats["first_offset"] == ends[part], (part, stats, ends)
    fresh = consume(bs, "grouped", 110, "--group", "g2")
    assert fresh["count"] == 110 and fresh["drained"] is True and fresh["ok"] is True, fresh


def test_log_append_time(broker) -> None:
    admin(broker.bootstrap, "create", "appended",
          "--config", "message.timestamp.type=LogAppendTime")
    before = now_ms()
    sent = produce(broker.bootstrap, "appended", 20, "--timestamp", 1000, "--compression", "lz4")
    after = now_ms()
    got = consume(broker.bootstrap, "appended", 20)
    assert_clean_consume(got, 20)
    assert got["timestamp_types"] == ["LogAppendTime"], got["timestamp_types"]
    for rec in got["records"]:
        # The broker's clock replaced the producer's timestamps (1000 + i) ...
        assert before <= rec["timestamp"] <= after, (before, rec, after)
        # ... and the produce response told the producer the same time.
        assert sent["offsets"][rec["offset"]][2] == rec["timestamp"], (sent["offsets"], rec)


def test_admin_create_list_describe_delete(broker) -> None:
    bs = broker.bootstrap
    created = admin(bs, "create", "alpha", "--partitions", 3).data["created"]["alpha"]
    assert created["num_partitions"] == 3 and created["replication_factor"] == 1, created
    assert created["topic_id"] not in (ZERO_UUID, "null"), created
    admin(bs, "create", "beta")

    assert admin(bs, "list").data["topics"] == ["alpha", "beta"]

    cluster = admin(bs, "cluster").data
    assert [(n["host"], n["port"]) for n in cluster["nodes"]] == [("127.0.0.1", broker.port)], \
        cluster
    node_id = cluster["nodes"][0]["id"]
    assert cluster["controller"] == node_id and cluster["cluster_id"], cluster

    topics = admin(bs, "describe", "alpha", "beta").data["topics"]
    alpha = topics["alpha"]
    assert alpha["internal"] is False and alpha["topic_id"] == created["topic_id"], alpha
    assert [p["partition"] for p in alpha["partitions"]] == [0, 1, 2], alpha
    for p in alpha["partitions"] + topics["beta"]["partitions"]:
        assert p["leader"] == node_id and p["replicas"] == [node_id] and p["isr"] == [node_id], p
    assert len(topics["beta"]["partitions"]) == 1

    # Errors come back as the exceptions Kafka's own broker gives.
    again = admin(bs, "create", "alpha", "--partitions", 3, ok=False)
    assert again.data["exception"].endswith(".TopicExistsException"), again.describe()
    rf3 = admin(bs, "create", "gamma", "--replication-factor", 3, ok=False)
    assert rf3.data["exception"].endswith(".InvalidReplicationFactorException"), rf3.describe()
    assert admin(bs, "list").data["topics"] == ["alpha", "beta"]

    admin(bs, "delete", "alpha")
    assert admin(bs, "list").data["topics"] == ["beta"]
    gone = admin(bs, "describe", "alpha", ok=False)
    assert gone.data["exception"].endswith(".UnknownTopicOrPartitionException"), gone.describe()
    twice = admin(bs, "delete", "alpha", ok=False)
    assert twice.data["exception"].endswith(".UnknownTopicOrPartitionException"), twice.describe()

    # A deleted name can be created again, as a new topic with an empty log.
    recreated = admin(bs, "create", "alpha", "--partitions", 1).data["created"]["alpha"]
    assert recreated["topic_id"] != created["topic_id"], (created, recreated)
    sent = produce(bs, "alpha", 5)
    assert sent["first_offset"] == 0 and sent["last_offset"] == 4, sent


def test_admin_create_partitions(broker) -> None:
    bs = broker.bootstrap
    admin(bs, "create", "growing", "--partitions", 1)
    produce(bs, "growing", 5, "--partition", 0)
    admin(bs, "create-partitions", "growing", 3)
    parts = admin(bs, "describe", "growing").data["topics"]["growing"]["partitions"]
    assert [p["partition"] for p in parts] == [0, 1, 2], parts
    # The new partitions take writes and start empty; partition 0 keeps its records.
    sent = produce(bs, "growing", 4, "--partition", 2, "--first-index", 5)
    assert sent["partitions"] == {
        "2": {"count": 4, "first_offset": 0, "last_offset": 3, "contiguous": True}}, sent
    got = consume(bs, "growing", 9)
    assert_clean_consume(got, 9)
    assert got["log_offsets"] == {"0": [0, 5], "1": [0, 0], "2": [0, 4]}, got["log_offsets"]
    # Partitions can only be added.
    fewer = admin(bs, "create-partitions", "growing", 2, ok=False)
    assert fewer.data["exception"].endswith(".InvalidPartitionsException"), fewer.describe()
    missing = admin(bs, "create-partitions", "no-such-topic", 2, ok=False)
    assert missing.data["exception"].endswith(".UnknownTopicOrPartitionException"), \
        missing.describe()


def test_admin_rejects_invalid_topics(broker) -> None:
    cases = [
        (["bad name"], "InvalidTopicException"),
        (["y" * 250], "InvalidTopicException"),
        ([".."], "InvalidTopicException"),
        (["zero", "--partitions", 0], "InvalidPartitionsException"),
        (["badcfg", "--config", "no.such.config=1"], "InvalidConfigurationException"),
        (["badval", "--config", "retention.ms=abc"], "InvalidConfigurationException"),
    ]
    for args, exception in cases:
        run = admin(broker.bootstrap, "create", *args, ok=False)
        assert run.data["exception"] == f"org.apache.kafka.common.errors.{exception}", \
            run.describe()
    assert admin(broker.bootstrap, "list").data["topics"] == []
    # The longest legal name, and the broker defaults for partitions and replication factor.
    longest = "x" * 249
    created = admin(broker.bootstrap, "create", longest, "--partitions", -1,
                    "--replication-factor", -1).data["created"][longest]
    assert created["num_partitions"] == 1 and created["replication_factor"] == 1, created


def test_admin_topic_configs(broker) -> None:
    bs = broker.bootstrap
    admin(bs, "create", "configured", "--config", "retention.ms=3600000",
          "--config", "max.message.bytes=2097152")
    configs = admin(bs, "configs", "configured").data["configs"]["configured"]
    assert configs["retention.ms"]["value"] == "3600000", configs["retention.ms"]
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG", configs["retention.ms"]
    assert configs["max.message.bytes"]["value"] == "2097152", configs["max.message.bytes"]
    assert configs["cleanup.policy"]["value"] == "delete", configs["cleanup.policy"]
    assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG", configs["cleanup.policy"]


def test_auto_create_disabled(broker_factory) -> None:
    broker = broker_factory(**{"auto.create.topics.enable": "false"})
    run = kafkacheck("produce", broker.bootstrap, "missing", 1, "--timeout-ms", 3000, ok=False)
    assert run.data["acked"] == 0, run.describe()
    assert run.data["errors"] == {"TimeoutException": 1}, run.describe()
    assert "not present in metadata" in run.data["error"], run.describe()
    assert admin(broker.bootstrap, "list").data["topics"] == []
