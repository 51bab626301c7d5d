"""TLS and SASL listeners against real clients: librdkafka (confluent-kafka, kcat),
kafka-python and the Java client (Kafka's console tools), over SSL, mutual TLS, SASL_SSL
with SCRAM-SHA-512 and SASL_PLAINTEXT with PLAIN; refused credentials and certificates;
replication and groups with TLS + SCRAM between brokers; and bad input on the secure
listeners, which the broker survives while serving others."""

from __future__ import annotations

import logging
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import kafka  # kafka-python
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import ConnectionClosed, WireClient
from tests.support.security_setup import (
    ADMIN,
    ADMIN_PASSWORD,
    ALICE,
    ALICE_PASSWORD,
    PLAIN_JAAS,
    Pki,
    make_pki,
    secure_listeners,
)

SASL_AUTHENTICATION_FAILED = 58
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _librdkafka(pki: Pki, case: str) -> dict[str, Any]:
    """librdkafka settings for one way in."""
    tls = {"ssl.ca.location": str(pki.ca)}
    return {
        "SSL": {"security.protocol": "SSL", **tls},
        "mTLS": {"security.protocol": "SSL", **tls,
                 "ssl.certificate.location": str(pki.alice_cert),
                 "ssl.key.location": str(pki.alice_key)},
        "SCRAM": {"security.protocol": "SASL_SSL", **tls, "sasl.mechanisms": "SCRAM-SHA-512",
                  "sasl.username": ALICE, "sasl.password": ALICE_PASSWORD},
        "PLAIN": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                  "sasl.username": ALICE, "sasl.password": ALICE_PASSWORD},
    }[case]


LISTENER_OF = {"SSL": "SSL", "mTLS": "SSL", "SCRAM": "SASL_SSL", "PLAIN": "SASL_PLAINTEXT"}


def _add_scram_user(cluster: Cluster, user: str, password: str) -> None:
    admin = cluster.admin
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode())])
    for future in futures.values():
        future.result(10)


def _read(bootstrap: str, conf: dict[str, Any], topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < count:
            assert time.monotonic() < deadline, f"read {len(values)} of {count}"
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(msg.value())
        return values
    finally:
        consumer.close()


def _properties(path: Path, pki: Pki, case: str) -> Path:
    """The Java client's settings for one way in, with PEM stores as Kafka reads them."""
    trust = ["ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}"]
    lines = {
        "mTLS": ["security.protocol=SSL", *trust, "ssl.keystore.type=PEM",
                 f"ssl.keystore.certificate.chain={_one_line(pki.alice_cert)}",
                 f"ssl.keystore.key={_one_line(pki.alice_key)}"],
        "SCRAM": ["security.protocol=SASL_SSL", *trust, "sasl.mechanism=SCRAM-SHA-512",
                  "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                  f'required username="{ALICE}" password="{ALICE_PASSWORD}";'],
        "bad-SCRAM": ["security.protocol=SASL_SSL", *trust, "sasl.mechanism=SCRAM-SHA-512",
                      "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                      f'required username="{ALICE}" password="not-it";'],
    }[case]
    path.write_text("\n".join(lines) + "\n")
    return path


def _one_line(pem: Path) -> str:
    """A PEM block as one properties value (Java's properties join escaped newlines)."""
    return "\\n\\\n".join(pem.read_text().strip().splitlines())


def test_every_client_connects_with_each_protocol(cluster_factory, kafka_tools, pki,
                                                  tmp_path):
    cluster = cluster_factory(1, secure_listeners(pki))
    broker = cluster.brokers[0]
    _add_scram_user(cluster, ALICE, ALICE_PASSWORD)
    cluster.create_topic("secure", 1, 1)
    expected: list[bytes] = []
    for case in ("SSL", "mTLS", "SCRAM", "PLAIN"):  # librdkafka
        conf = _librdkafka(pki, case)
        bootstrap = broker.bootstrap_of(LISTENER_OF[case])
        producer = Producer({"bootstrap.servers": bootstrap, **conf})
        values = [f"librdkafka-{case}-{i}".encode() for i in range(5)]
        for value in values:
            producer.produce("secure", value, partition=0)
        assert producer.flush(30) == 0
        expected += values
        assert _read(bootstrap, conf, "secure", len(expected)) == expected
    for case, conf in (
        ("SCRAM", {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                   "sasl_plain_username": ALICE, "sasl_plain_password": ALICE_PASSWORD,
                   "ssl_cafile": str(pki.ca)}),
        ("mTLS", {"security_protocol": "SSL", "ssl_cafile": str(pki.ca),
                  "ssl_certfile": str(pki.alice_cert), "ssl_keyfile": str(pki.alice_key)}),
    ):
        bootstrap = broker.bootstrap_of(LISTENER_OF[case])
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, **conf)
        values = [f"kafka-python-{case}-{i}".encode() for i in range(5)]
        for value in values:
            producer.send("secure", value, partition=0).get(30)
        producer.close()
        expected += values
        consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=10000, **conf)
        consumer.assign([kafka.TopicPartition("secure", 0)])
        consumer.seek_to_beginning()
        got = [m.value for _, m in zip(range(len(expected)), consumer, strict=False)]
        consumer.close()
        assert got == expected
    # kcat (Debian's, on librdkafka 2.0.2) over mutual TLS and SASL/PLAIN. Not SCRAM: before
    # librdkafka 2.6.1 its final SCRAM message repeats the client nonce, which Kafka 4 (and
    # kafkube, with scramp) refuse as RFC 5802 says (confluentinc/librdkafka#4895).
    for case, options in (
        ("mTLS", ["security.protocol=SSL", f"ssl.ca.location={pki.ca}",
                  f"ssl.certificate.location={pki.alice_cert}",
                  f"ssl.key.location={pki.alice_key}"]),
        ("PLAIN", ["security.protocol=SASL_PLAINTEXT", "sasl.mechanisms=PLAIN",
                   f"sasl.username={ALICE}", f"sasl.password={ALICE_PASSWORD}"]),
    ):
        kcat = ["kcat", "-b", broker.bootstrap_of(LISTENER_OF[case])]
        for option in options:
            kcat += ["-X", option]
        values = [f"kcat-{case}-{i}".encode() for i in range(5)]
        subprocess.run([*kcat, "-P", "-t", "secure", "-p", "0"],
                       input=b"\n".join(values) + b"\n", check=True, timeout=60)
        expected += values
        read = subprocess.run([*kcat, "-C", "-t", "secure", "-p", "0", "-o", "beginning",
                               "-e", "-q"], capture_output=True, check=True, timeout=60)
        assert read.stdout.splitlines() == expected
    for case in ("mTLS", "SCRAM"):  # the Java client
        config = _properties(tmp_path / f"{case}.properties", pki, case)
        bootstrap = broker.bootstrap_of(LISTENER_OF[case])
        values = [f"java-{case}-{i}".encode() for i in range(5)]
        kafka_tools.run(CONSOLE_PRODUCER, "--bootstrap-server", bootstrap, "--topic", "secure",
                        "--command-config", str(config),
                        stdin="\n".join(v.decode() for v in values) + "\n")
        expected += values
        out = kafka_tools.run(CONSOLE_CONSUMER, "--bootstrap-server", bootstrap, "--topic",
                              "secure", "--from-beginning", "--max-messages",
                              str(len(expected)), "--timeout-ms", "30000",
                              "--command-config", str(config))
        assert out.stdout.encode().splitlines() == expected
    assert _read(broker.bootstrap, {}, "secure", len(expected)) == expected  # PLAINTEXT


class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _refused(bootstrap: str, conf: dict[str, Any], sasl: bool) -> str:
    """What librdkafka tells its application about a connection the broker refused: the
    authentication error (SASL), or the TLS handshake failure it logs."""
    errors: list[KafkaError] = []
    collected = _Collected()
    logger = logging.getLogger(f"librdkafka-{time.monotonic_ns()}")
    logger.addHandler(collected)
    logger.setLevel(logging.DEBUG)
    admin = AdminClient({"bootstrap.servers": bootstrap, "error_cb": errors.append,
                         "logger": logger, "reconnect.backoff.ms": 1000, **conf})
    with pytest.raises(Exception):  # noqa: B017 - any metadata failure, the cause is below
        admin.list_topics(timeout=3)

    def reported() -> str | None:
        admin.poll(0.2)
        if sasl:
            return next((e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION),
                        None)
        return next((m for m in collected.messages if "alert" in m), None)

    return wait_until(reported, 10, "librdkafka reporting the refusal")


def test_refused_credentials_and_certificates_are_logged(cluster_factory, kafka_tools,
                                                         pki, tmp_path):
    cluster = cluster_factory(1, secure_listeners(pki))
    broker = cluster.brokers[0]
    _add_scram_user(cluster, ALICE, ALICE_PASSWORD)
    tls = {"ssl.ca.location": str(pki.ca)}
    cases = {
        "wrong SCRAM password": (broker.bootstrap_of("SASL_SSL"), {
            "security.protocol": "SASL_SSL", **tls, "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": ALICE, "sasl.password": "not-it"}),
        "unknown SCRAM user": (broker.bootstrap_of("SASL_SSL"), {
            "security.protocol": "SASL_SSL", **tls, "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "mallory", "sasl.password": "guess"}),
        "wrong PLAIN password": (broker.bootstrap_of("SASL_PLAINTEXT"), {
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": ALICE, "sasl.password": "not-it"}),
        "untrusted certificate": (broker.bootstrap_of("SSL"), {
            "security.protocol": "SSL", **tls, "ssl.certificate.location": str(pki.stranger_cert),
            "ssl.key.location": str(pki.stranger_key)}),
        "expired certificate": (broker.bootstrap_of("SSL"), {
            "security.protocol": "SSL", **tls, "ssl.certificate.location": str(pki.expired_cert),
            "ssl.key.location": str(pki.expired_key)}),
    }
    for what, (bootstrap, conf) in cases.items():
        logged = len(broker.output)
        sasl = "SASL" in conf["security.protocol"]
        error = _refused(bootstrap, conf, sasl)
        wait_until(lambda since=logged: any("Failed authentication with 127.0.0.1" in line
                                            for line in broker.output[since:]),
                   10, f"{what} logged")
        assert ("Authentication failed" if sasl else "alert") in error, f"{what}: {error}"
    # The Java client is told why, as from Kafka.
    bad = _properties(tmp_path / "bad.properties", pki, "bad-SCRAM")
    result = kafka_tools.run(TOPIC_COMMAND, "--bootstrap-server", broker.bootstrap_of("SASL_SSL"),
                             "--list", "--command-config", str(bad), check=False, timeout=60)
    assert result.returncode != 0
    assert "SaslAuthenticationException" in result.stdout + result.stderr, result.describe()
    assert "invalid credentials" in result.stdout + result.stderr, result.describe()


def test_replication_and_groups_with_tls_and_scram_between_brokers(cluster_factory, pki):
    """With ACLs on: the brokers' own principal (User:admin, their SCRAM login on BROKER)
    is a super user, as Kafka's brokers are, so followers may fetch (CLUSTER_ACTION)."""
    cluster = cluster_factory(3, {**secure_listeners(pki, "BROKER"),
                                  "offsets.topic.num.partitions": "3",
                                  "authorizer.class.name": STANDARD_AUTHORIZER,
                                  "super.users": "User:admin;User:ANONYMOUS",
                                  "allow.everyone.if.no.acl.found": "true"})
    cluster.create_topic("replicated", 3, 3, {"min.insync.replicas": "2"})
    scram = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca),
             "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": ADMIN,
             "sasl.password": ADMIN_PASSWORD}
    bootstrap = ",".join(b.bootstrap_of("BROKER") for b in cluster.brokers)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **scram})
    for i in range(3000):
        producer.produce("replicated", f"r{i}".encode(), partition=i % 3)
    assert producer.flush(60) == 0
    # Every follower fetched over the BROKER listener (TLS + SCRAM): the ISR is full.
    cluster.wait_for_isr("replicated", 3)
    victim = cluster.leader_of("replicated", 0)
    cluster.kill(victim)
    cluster.restart(victim)
    cluster.wait_for_isr("replicated", 3, timeout=60)
    ssl_bootstrap = ",".join(b.bootstrap_of("SSL") for b in cluster.brokers)
    ssl_conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    consumer = Consumer({"bootstrap.servers": ssl_bootstrap, "group.id": "secure-group",
                         "auto.offset.reset": "earliest", **ssl_conf})
    consumer.subscribe(["replicated"])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(seen) < 3000:
        assert time.monotonic() < deadline, f"consumed {len(seen)} of 3000"
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.add(msg.value())
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition("replicated", p) for p in range(3)], 10)
    consumer.close()
    assert sum(tp.offset for tp in committed) == 3000
    # Clients of the SSL listener are given the SSL addresses of every broker.
    admin = AdminClient({"bootstrap.servers": ssl_bootstrap, **ssl_conf})
    listed = admin.list_topics(timeout=10).brokers
    assert {(b.id, b.port) for b in listed.values()} == {
        (i, b.ports["SSL"]) for i, b in enumerate(cluster.brokers)}


# -- bad input --------------------------------------------------------------------------------


def _tls_client(bootstrap: str, pki: Pki) -> WireClient:
    client = WireClient.connect(bootstrap)
    context = ssl.create_default_context(cafile=str(pki.ca))
    client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    return client


def _closed(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True once the broker has closed the connection (a read returns nothing or the
    connection is reset); False if it is still open after ``timeout``."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while sock.recv(65536):
            if time.monotonic() > deadline:
                return False
    except TimeoutError:
        return False
    except (ssl.SSLError, ConnectionError):
        return True
    return True


def test_bad_input_on_secure_listeners_is_refused_and_others_are_served(
        cluster_factory, pki):
    cluster = cluster_factory(1, {**secure_listeners(pki),
                                  "kafkube.authentication.timeout.ms": "1500",
                                  "sasl.server.max.receive.size": "4096"})
    broker = cluster.brokers[0]
    _add_scram_user(cluster, ALICE, ALICE_PASSWORD)
    host = "127.0.0.1"
    # Garbage where a TLS ClientHello belongs, and an HTTP request to a TLS port.
    for garbage in (b"\x16\x03\x01\x00\x05hello" + bytes(300), b"GET / HTTP/1.1\r\n\r\n"):
        with socket.create_connection((host, broker.ports["SSL"]), timeout=10) as s:
            s.sendall(garbage)
            assert _closed(s)
    # Garbage inside TLS: a frame that is not a Kafka request.
    with _tls_client(broker.bootstrap_of("SSL"), pki) as c:
        c.sock.sendall(b"\x00\x00\x00\x08" + b"\xff" * 8)
        assert _closed(c.sock)
    sasl_plain = broker.bootstrap_of("SASL_PLAINTEXT")
    # Out of order: a request before authentication, SaslAuthenticate before the handshake.
    for first in (MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False),
                  SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret")):
        with WireClient.connect(sasl_plain) as c:
            c.send(first)
            assert _closed(c.sock)
    # Truncated SCRAM messages: refused with SASL_AUTHENTICATION_FAILED, then closed.
    for token in (b"n,,n=alice", b"n,,", b"", b"\xff\xfe"):
        with _tls_client(broker.bootstrap_of("SASL_SSL"), pki) as c:
            assert c.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == 0
            answer = c.request(SaslAuthenticateRequest(auth_bytes=token))
            assert answer.error_code == SASL_AUTHENTICATION_FAILED, token
            assert _closed(c.sock)
    # A SCRAM exchange whose second message is cut short.
    with _tls_client(broker.bootstrap_of("SASL_SSL"), pki) as c:
        assert c.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == 0
        first = c.request(SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=abcdefgh"))
        assert first.error_code == 0 and first.auth_bytes.startswith(b"r=abcdefgh")
        final = c.request(SaslAuthenticateRequest(auth_bytes=b"c=biws,r=abcdefgh"))
        assert final.error_code == SASL_AUTHENTICATION_FAILED
        assert _closed(c.sock)
    # An oversized token before authentication (sasl.server.max.receive.size): closed.
    with WireClient.connect(sasl_plain) as c:
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        c.sock.sendall((100_000).to_bytes(4, "big") + bytes(1000))
        assert _closed(c.sock)
    # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the ones offered.
    with WireClient.connect(sasl_plain) as c:
        answer = c.request(SaslHandshakeRequest(mechanism="GSSAPI"))
        assert answer.error_code == 33 and answer.mechanisms == ("PLAIN",)
    # Clients that never finish: a TLS handshake never started, SASL never begun, and
    # many of them at once; each closed after kafkube.authentication.timeout.ms.
    idle = [socket.create_connection((host, broker.ports[name]), timeout=10)
            for name in ("SSL", "SASL_SSL", "SASL_PLAINTEXT") for _ in range(60)]
    try:
        # Meanwhile an authenticated client is served.
        conf = _librdkafka(pki, "SCRAM")
        producer = Producer({"bootstrap.servers": broker.bootstrap_of("SASL_SSL"), **conf})
        producer.produce("beside-bad-input", b"still served")
        assert producer.flush(30) == 0
        started = time.monotonic()
        for s in idle:
            assert _closed(s, timeout=15)
        assert time.monotonic() - started < 15
    finally:
        for s in idle:
            s.close()
    assert _read(broker.bootstrap, {}, "beside-bad-input", 1) == [b"still served"]
    assert cluster.alive(0)
    assert not any("Traceback" in line for line in broker.output), "".join(broker.output[-40:])


def test_sessions_expire_unless_clients_authenticate_again(cluster_factory, pki):
    """KIP-368: with connections.max.reauth.ms the session has a lifetime; librdkafka
    authenticates again within it and keeps producing; a client that does not is closed
    at its first request after the session ended."""
    lifetime_ms = 2000
    cluster = cluster_factory(1, {**secure_listeners(pki),
                                  "connections.max.reauth.ms": str(lifetime_ms)})
    broker = cluster.brokers[0]
    _add_scram_user(cluster, ALICE, ALICE_PASSWORD)
    token = b"\x00alice\x00alice-secret"
    with WireClient.connect(broker.bootstrap_of("SASL_PLAINTEXT")) as c:
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        answer = c.request(SaslAuthenticateRequest(auth_bytes=token))
        assert answer.error_code == 0
        assert answer.session_lifetime.total_seconds() * 1000 == lifetime_ms
        started = time.monotonic()
        metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False)

        def closed() -> bool:
            try:
                c.request(metadata)
            except (ConnectionClosed, OSError):
                return True
            return False

        wait_until(closed, 10, "the connection closed once the session ended",
                   interval=0.2)
        assert time.monotonic() - started >= lifetime_ms / 1000
    # The broker logs the expiry as it closes; our reader of its output may be a moment behind.
    def expired() -> int:
        return sum("session expired" in line for line in broker.output)

    wait_until(lambda: expired() >= 1, 10, "the broker's log of the ended session",
               interval=0.1)
    expired_before = expired()
    # librdkafka re-authenticates on the same connection and goes on: none of its
    # connections is closed for an ended session.
    assert expired_before == 1
    conf = _librdkafka(pki, "SCRAM")
    producer = Producer({"bootstrap.servers": broker.bootstrap_of("SASL_SSL"), **conf,
                         "linger.ms": 0})
    delivered: list[KafkaError | None] = []
    deadline = time.monotonic() + 3 * lifetime_ms / 1000
    while time.monotonic() < deadline:
        producer.produce("reauth", b"x", on_delivery=lambda err, _m: delivered.append(err))
        producer.poll(0.1)
    assert producer.flush(30) == 0
    assert delivered and all(err is None for err in delivered), delivered[:3]
    assert expired() == expired_before


def test_passwords_and_keys_are_never_described(cluster_factory, pki):
    """DescribeConfigs shows a PEM key, a JAAS config with passwords and key passwords as
    Kafka shows its PASSWORD configs: sensitive, without a value, synonyms included."""
    from confluent_kafka.admin import ConfigResource

    key = pki.alice_key.read_text()
    cluster = cluster_factory(1, {**secure_listeners(pki), "sasl.jaas.config": PLAIN_JAAS,
                                  "ssl.key.password": "not-for-your-eyes",
                                  "ssl.keystore.key": key})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    (future,) = cluster.admin.describe_configs([resource]).values()
    entries = future.result(10)
    for name in ("sasl.jaas.config", "ssl.key.password", "ssl.keystore.key"):
        entry = entries[name]
        assert entry.is_sensitive and entry.value is None, (name, entry)
        assert all(s.value is None for s in entry.synonyms.values()), name
    described = repr({name: (e.value, [s.value for s in e.synonyms.values()])
                      for name, e in entries.items()})
    for secret in (ADMIN_PASSWORD, ALICE_PASSWORD, "not-for-your-eyes", "PRIVATE KEY"):
        assert secret not in described
