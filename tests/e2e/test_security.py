"""Security end to end (issue 16): the secured cluster of examples/kafkacluster-secure.yaml (a
mutual-TLS listener, a SCRAM-SHA-512 listener over TLS, ACLs) and the users of
examples/kafkauser.yaml (alice with SCRAM, bob with a certificate), applied with kubectl to the
operator on the suite's cluster.

The clients run as pods of the workload image (the brokers advertise pod DNS names that
resolve only inside the cluster) with tests/e2e/secure_client.py mounted from a ConfigMap, and
use what the operator made as an application would: the user's Secret (the SCRAM password in
the environment, or the certificate and key mounted) and the cluster CA's certificate
(``my-cluster-cluster-ca-cert``) to trust the brokers. Each client prints one line per event
and the scenario judges them. A client without the Secret, with a wrong password, or outside
its ACLs is refused, and a deleted user's password opens no new session."""

from __future__ import annotations

import base64
import datetime
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from kafkube.harness.kind.deployment import WORKLOAD_IMAGE, Brokers
from kafkube.harness.kind.operated import namespace_of
from kafkube.harness.kind.platform import Cluster, KubectlError
from kafkube.harness.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).with_name("secure_client.py")
CLUSTER = "my-cluster"
TOPIC = "secure-orders"   # inside both users' ACLs (prefix secure-)
OUTSIDE = "orders"        # outside them
COUNT = 1000
# The Secrets of a secured cluster (model/cluster_pki.py): the CAs with their keys, their
# key-less "-cert" twins that clients and brokers read, the brokers' and the operator's own.
CA_SECRETS = {f"{CLUSTER}-cluster-ca", f"{CLUSTER}-cluster-ca-cert", f"{CLUSTER}-clients-ca",
              f"{CLUSTER}-clients-ca-cert", f"{CLUSTER}-kafka-brokers",
              f"{CLUSTER}-operator-certs"}
# Where the client pods find what they use.
CLIENT_DIR = "/opt/secure-client"
CA_DIR = "/etc/kafka-cluster-ca"
USER_DIR = "/etc/kafka-user"
TRUST = {"ssl.ca.location": f"{CA_DIR}/ca.crt"}
MTLS = {"security.protocol": "SSL", **TRUST}
CERTIFICATE = {"ssl.certificate.location": f"{USER_DIR}/user.crt",
               "ssl.key.location": f"{USER_DIR}/user.key"}
PASSWORD_ENV = "KAFKA_PASSWORD"  # from the user's Secret; the kubelet expands $(...) in args
SCRAM_FAILURE = ("Authentication failed during authentication due to invalid credentials "
                 "with SASL mechanism SCRAM-SHA-512")


def secure_example() -> str:
    """examples/kafkacluster-secure.yaml with a small claim, as a user would start from it."""
    resource = yaml.safe_load((REPO / "examples" / "kafkacluster-secure.yaml").read_text())
    assert resource["metadata"]["name"] == CLUSTER
    resource["spec"].update(replicas=3, storage={"size": "1Gi", "deleteClaim": False})
    return json.dumps(resource)


def topic(name: str, partitions: int) -> dict:
    return {"apiVersion": "kafkube.io/v1alpha1", "kind": "Topic", "metadata": {"name": name},
            "spec": {"cluster": CLUSTER, "partitions": partitions, "replicationFactor": 3,
                     "config": {"min.insync.replicas": 2}}}


def client_script() -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "secure-client"},
            "data": {"secure_client.py": CLIENT.read_text()}}


def manifests(*objects: dict) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


@pytest.fixture(scope="module")
def secured(operator: Cluster) -> Iterator[Brokers]:
    """The secured cluster Ready with its CA Secrets, topics secure-orders and orders, the
    client's ConfigMap, and alice and bob Ready."""
    with namespace_of(operator) as namespace:
        brokers = Brokers(operator, namespace, CLUSTER)
        try:
            operator.apply(secure_example(), namespace=namespace)
            operator.kubectl("-n", namespace, "wait", f"kafkacluster/{CLUSTER}",
                             "--for=condition=Ready", "--timeout=420s", timeout=450)
            wait_until(lambda: secret_names(brokers) >= CA_SECRETS, 60, "the CA Secrets", 1.0)
            operator.apply(manifests(client_script(), topic(TOPIC, 3), topic(OUTSIDE, 1)),
                           namespace=namespace)
            operator.kubectl("-n", namespace, "wait", f"topic/{TOPIC}", f"topic/{OUTSIDE}",
                             "--for=condition=Ready", "--timeout=120s", timeout=150)
            operator.apply((REPO / "examples" / "kafkauser.yaml").read_text(),
                           namespace=namespace)
            # A user's first pass may find the operator's admin client not connected yet; the
            # next is the 30 s user timer's.
            operator.kubectl("-n", namespace, "wait", "kafkauser/alice", "kafkauser/bob",
                             "--for=condition=Ready", "--timeout=180s", timeout=200)
            wait_until(lambda: secret_names(brokers) >= {"alice", "bob"}, 30,
                       "the users' Secrets", 1.0)
            yield brokers
        finally:
            try:
                print(operator.kubectl("-n", namespace, "get", "kafkausers,secrets", "-o",
                                       "wide"))
            except KubectlError as e:
                print(e)


# -- what the scenarios read -----------------------------------------------------------------


def secret_names(brokers: Brokers) -> set[str]:
    return {name.removeprefix("secret/")
            for name in brokers.kubectl("get", "secrets", "-o", "name").split()}


def secret_data(brokers: Brokers, name: str) -> dict[str, str]:
    data = json.loads(brokers.kubectl("get", "secret", name, "-o", "json")).get("data") or {}
    return {key: base64.b64decode(value).decode() for key, value in data.items()}


def resource(brokers: Brokers, kind: str, name: str) -> dict:
    return json.loads(brokers.kubectl("get", kind, name, "-o", "json"))


def get_table(brokers: Brokers, kind: str) -> list[list[str]]:
    """`kubectl get KIND` as a user sees it: the header row, then one row per object."""
    return [line.split() for line in brokers.kubectl("get", kind).splitlines()]


def bootstrap(brokers: Brokers, listener: str) -> str:
    """Where clients bootstrap on a listener, as the KafkaCluster's status says."""
    listeners = resource(brokers, "kafkacluster", CLUSTER)["status"]["listeners"]
    return next(li["bootstrapServers"] for li in listeners if li["name"] == listener)


def certificate(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificates(pem.encode())[0]


def dns_names(cert: x509.Certificate) -> set[str]:
    return set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
               .value.get_values_for_type(x509.DNSName))


def now_rfc3339(earlier_s: int = 2) -> str:
    """For `kubectl logs --since-time` (the nodes share this machine's clock)."""
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=earlier_s)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def broker_logged(brokers: Brokers, since: str, *words: str) -> str:
    """The first line any broker logged since ``since`` holding every one of ``words``
    (the client may have reached any of them through the bootstrap Service)."""
    def found() -> str | None:
        for b in range(brokers.size):
            log = brokers.kubectl("logs", f"{CLUSTER}-{b}", f"--since-time={since}",
                                  timeout=60)
            for line in log.splitlines():
                if all(w in line for w in words):
                    return line
        return None

    return wait_until(found, 30, f"a broker logging {words}", 2.0)


# -- the client pods ---------------------------------------------------------------------------


def configs(settings: dict[str, str]) -> list[str]:
    return [arg for key, value in settings.items() for arg in ("--config", f"{key}={value}")]


def scram(user: str, password: str = f"$({PASSWORD_ENV})") -> list[str]:
    return configs({"security.protocol": "SASL_SSL", **TRUST, "sasl.mechanisms": "SCRAM-SHA-512",
                    "sasl.username": user, "sasl.password": password})


def start_client(brokers: Brokers, *args: str, password_of: str | None = None,
                 certificate_of: str | None = None) -> str:
    """A pod of the workload image running secure_client.py with ``args``; the cluster CA's
    certificate mounted, and a user's password (``password_of``: its Secret's ``password`` in
    $KAFKA_PASSWORD) or certificate (``certificate_of``: its Secret mounted)."""
    name = f"secure-client-{uuid.uuid4().hex[:8]}"
    volumes = [{"name": "client", "configMap": {"name": "secure-client"}},
               {"name": "cluster-ca", "secret": {"secretName": f"{CLUSTER}-cluster-ca-cert",
                                                 "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]
    mounts = [{"name": "client", "mountPath": CLIENT_DIR, "readOnly": True},
              {"name": "cluster-ca", "mountPath": CA_DIR, "readOnly": True}]
    env = []
    if certificate_of:
        volumes.append({"name": "user", "secret": {"secretName": certificate_of}})
        mounts.append({"name": "user", "mountPath": USER_DIR, "readOnly": True})
    if password_of:
        env.append({"name": PASSWORD_ENV, "valueFrom": {"secretKeyRef": {
            "name": password_of, "key": "password"}}})
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"kafkube.io/e2e": "client"}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                 "volumes": volumes,
                 "containers": [{
                     "name": "client", "image": WORKLOAD_IMAGE,
                     "imagePullPolicy": "IfNotPresent",
                     "command": ["python3", f"{CLIENT_DIR}/secure_client.py"],
                     "args": list(args), "env": env, "volumeMounts": mounts,
                     "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}}]},
    }
    brokers.cluster.apply(json.dumps(pod), namespace=brokers.namespace)
    return name


def run_client(brokers: Brokers, *args: str, timeout: float = 180, **kw: str) -> list[str]:
    """Run a client pod to its end (it must succeed); what it printed."""
    return brokers.finish(start_client(brokers, *args, **kw), timeout)


def outcome(lines: list[str], kind: str) -> str:
    """The one line of ``kind`` ("X", "P") a login or produce-one client ends with (its
    other lines, and librdkafka's on stderr, may come in any order)."""
    found = [line for line in lines if line.startswith(f"{kind} ")]
    assert len(found) == 1, lines[-10:]
    return found[0]


@dataclass
class Roundtrip:
    """What a roundtrip client printed."""

    produced: tuple[int, int, int] | None = None  # sent, acknowledged, failed
    acks: dict[str, tuple[int, int]] = field(default_factory=dict)  # value -> where
    reads: list[tuple[int, int, str]] = field(default_factory=list)  # partition, offset, value
    ends: dict[int, int] | None = None  # high watermarks the read went to


def read_roundtrip(lines: list[str], prefix: str) -> Roundtrip:
    seen = Roundtrip()
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "A":
            i, partition, offset = (int(x) for x in rest.split())
            seen.acks[f"{prefix}{i}"] = (partition, offset)
        elif kind == "R":
            partition, offset, value = rest.split(" ", 2)
            seen.reads.append((int(partition), int(offset), value))
        elif kind == "D" and rest.startswith("produce "):
            sent, acked, failed = (int(x) for x in rest.split()[1:])
            seen.produced = (sent, acked, failed)
        elif kind == "D" and rest.startswith("consume "):
            seen.ends = {int(p): int(end) for p, end in
                         (entry.split(":") for entry in rest.split()[2:])}
    return seen


def judged(lines: list[str], prefix: str) -> str:
    """Every record acknowledged, and read back exactly once, where its ack said, with
    nothing of the topic skipped."""
    seen = read_roundtrip(lines, prefix)
    tail = "\n".join(lines[-15:])
    assert seen.produced == (COUNT, COUNT, 0), tail
    want = {f"{prefix}{i}" for i in range(COUNT)}
    assert set(seen.acks) == want, tail
    own = [(p, o, v) for p, o, v in seen.reads if v.startswith(prefix)]
    assert sorted(v for _, _, v in own) == sorted(want), \
        f"{len(own)} of {prefix}* read, {len({v for _, _, v in own})} distinct"
    assert {v: (p, o) for p, o, v in own} == seen.acks
    assert seen.ends is not None, tail
    positions = {(p, o) for p, o, _ in seen.reads}
    assert len(positions) == len(seen.reads) == sum(seen.ends.values()), (seen.ends, tail)
    return (f"{COUNT} records {prefix}* acknowledged and read back exactly once, "
            f"{len(seen.reads)} records of {TOPIC} read in all")


# -- the scenarios -----------------------------------------------------------------------------


def test_a_secured_cluster_listens_on_tls_only_with_certificates_of_its_ca(
        secured: Brokers) -> None:
    namespace = secured.namespace
    header, row = get_table(secured, "kafkaclusters")
    assert header == ["NAME", "DESIRED", "READY", "CONTROLLER", "STATUS", "AGE"]
    assert row[:3] == [CLUSTER, "3", "3"] and row[4] == "Ready", row
    status = resource(secured, "kafkacluster", CLUSTER)["status"]
    service = f"{CLUSTER}-bootstrap.{namespace}.svc"
    assert status["listeners"] == [{"name": "tls", "bootstrapServers": f"{service}:9093"},
                                   {"name": "scram", "bootstrapServers": f"{service}:9094"}]
    # No plaintext port for clients: the bootstrap Service has the two listeners and metrics.
    ports = resource(secured, "service", f"{CLUSTER}-bootstrap")["spec"]["ports"]
    assert sorted(p["port"] for p in ports) == [9093, 9094, 9404], ports

    # The CAs' keys stay in their own Secrets; what clients read holds the certificate only.
    cluster_ca = secret_data(secured, f"{CLUSTER}-cluster-ca-cert")
    clients_ca = secret_data(secured, f"{CLUSTER}-clients-ca-cert")
    assert set(cluster_ca) == set(clients_ca) == {"ca.crt"}
    assert set(secret_data(secured, f"{CLUSTER}-cluster-ca")) == {"ca.crt", "ca.key"}
    assert cluster_ca["ca.crt"] != clients_ca["ca.crt"]
    # The brokers' certificate names every broker and the bootstrap Service, as clients
    # that verify host names (librdkafka's default) reach them, and the cluster CA signed it.
    broker = certificate(secret_data(secured, f"{CLUSTER}-kafka-brokers")["broker.crt"])
    names = dns_names(broker)
    assert {f"*.{CLUSTER}-brokers.{namespace}.svc.cluster.local", service} <= names, names
    broker.verify_directly_issued_by(certificate(cluster_ca["ca.crt"]))
    print(f"listeners {status['listeners']}; brokers' certificate for {sorted(names)}")


def test_kafka_users_become_ready_with_their_secrets(secured: Brokers) -> None:
    header, *rows = get_table(secured, "kafkausers")
    assert header == ["NAME", "CLUSTER", "AUTHENTICATION", "READY", "AGE"]
    assert [r[:4] for r in rows] == [["alice", CLUSTER, "scram-sha-512", "True"],
                                     ["bob", CLUSTER, "tls", "True"]], rows
    assert resource(secured, "kafkauser", "alice")["status"]["username"] == "alice"
    assert resource(secured, "kafkauser", "bob")["status"]["username"] == "CN=bob"

    alice = secret_data(secured, "alice")
    assert set(alice) == {"password", "sasl.jaas.config"}
    assert len(alice["password"]) == 32 and alice["password"].isalnum()
    assert alice["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{alice["password"]}";')

    bob = secret_data(secured, "bob")
    assert set(bob) == {"user.crt", "user.key", "ca.crt"}
    clients_ca = secret_data(secured, f"{CLUSTER}-clients-ca-cert")["ca.crt"]
    assert bob["ca.crt"] == clients_ca
    cert = certificate(bob["user.crt"])
    assert cert.subject.rfc4514_string() == "CN=bob"
    cert.verify_directly_issued_by(certificate(clients_ca))
    owner = resource(secured, "secret", "bob")["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("KafkaUser", "bob")


def test_alice_produces_and_consumes_1000_records_over_scram_with_her_secret(
        secured: Brokers) -> None:
    lines = run_client(secured, "roundtrip", bootstrap(secured, "scram"), TOPIC,
                       "--count", str(COUNT), "--prefix", "alice-",
                       "--group", f"secure-alice-{uuid.uuid4().hex[:6]}", *scram("alice"),
                       password_of="alice", timeout=300)
    print(f"alice over SASL_SSL + SCRAM-SHA-512: {judged(lines, 'alice-')}")


def test_bob_produces_and_consumes_1000_records_over_mutual_tls_with_his_certificate(
        secured: Brokers) -> None:
    lines = run_client(secured, "roundtrip", bootstrap(secured, "tls"), TOPIC,
                       "--count", str(COUNT), "--prefix", "bob-",
                       "--group", f"secure-bob-{uuid.uuid4().hex[:6]}",
                       *configs({**MTLS, **CERTIFICATE}), certificate_of="bob", timeout=300)
    print(f"bob over SSL with his certificate: {judged(lines, 'bob-')}")


def test_a_wrong_password_is_refused_and_logged(secured: Brokers) -> None:
    since = now_rfc3339()
    lines = run_client(secured, "login", bootstrap(secured, "scram"),
                       *scram("alice", "not-alices-password"), timeout=120)
    assert "S accepted" not in lines, lines[-10:]
    assert outcome(lines, "X") == "X refused _AUTHENTICATION", lines[-10:]
    told = next((line for line in lines if line.startswith("E _AUTHENTICATION")), "")
    assert SCRAM_FAILURE in told, lines[-10:]
    logged = broker_logged(secured, since, "Failed authentication with", SCRAM_FAILURE)
    print(f"refused: {told}\nbroker: {logged}")


def test_a_client_without_a_certificate_is_refused_on_the_mutual_tls_listener(
        secured: Brokers) -> None:
    since = now_rfc3339()
    # The cluster CA to trust the brokers, but no certificate of its own.
    lines = run_client(secured, "login", bootstrap(secured, "tls"), *configs(MTLS),
                       timeout=120)
    assert "S accepted" not in lines, lines[-10:]
    # librdkafka finishes its side of a TLS 1.3 handshake first, then reads the broker's
    # alert: a receive failure (_TRANSPORT), or _SSL if it happens within the handshake.
    assert outcome(lines, "X") in ("X refused _SSL", "X refused _TRANSPORT"), lines[-10:]
    told = [line for line in lines
            if line[:2] in ("E ", "L ") and "alert certificate required" in line]
    assert told, lines[-10:]
    logged = broker_logged(secured, since, "Failed authentication with",
                           "SSL handshake failed")
    print(f"refused: {told[0]}\nbroker: {logged}")


def test_alice_may_not_write_to_a_topic_outside_her_acls(secured: Brokers) -> None:
    lines = run_client(secured, "produce-one", bootstrap(secured, "scram"), OUTSIDE,
                       *scram("alice"), password_of="alice", timeout=120)
    assert outcome(lines, "P") == "P failed TOPIC_AUTHORIZATION_FAILED", lines[-10:]


QUOTA_WINDOW_S = 11  # quota.window.num x quota.window.size.seconds, Kafka's defaults


@dataclass
class Flood:
    """What a flood client had acknowledged, second by second, after its warm-up."""

    per_second: list[int]

    @property
    def rate(self) -> float:
        return sum(self.per_second) / len(self.per_second)

    def sums(self, seconds: int) -> list[int]:
        """The bytes acknowledged in each run of ``seconds`` consecutive seconds."""
        return [sum(self.per_second[i:i + seconds])
                for i in range(len(self.per_second) - seconds + 1)]

    def most_in(self, seconds: int) -> int:
        return max(self.sums(seconds))

    def least_in(self, seconds: int) -> int:
        return min(self.sums(seconds))


def flood(brokers: Brokers, user: str, seconds: int, **kw: str) -> Flood:
    """A client of ``user`` producing flat out to one partition (one broker) for
    ``seconds``, once a quota window (12 s) has passed: Kafka's sampled rate lets a new client
    run ahead of its quota at first, and what is judged is the rate it is then held to."""
    credentials = scram(user) if "password_of" in kw else configs({**MTLS, **CERTIFICATE})
    lines = run_client(brokers, "flood", bootstrap(brokers, "scram" if "password_of" in kw
                                                   else "tls"), TOPIC, "--seconds",
                       str(seconds), "--warm-up", "12", *credentials, timeout=240, **kw)
    _, _, acked, took, per_second = outcome(lines, "D").split()
    counted = Flood([int(b) for b in per_second.split(",")])
    assert (sum(counted.per_second), len(counted.per_second)) == (int(acked), int(took))
    return counted


def test_a_quota_holds_one_users_producer_to_its_rate_and_not_another(
        secured: Brokers) -> None:
    """KafkaUser spec.quotas.producerByteRate, applied by the operator as Kafka's client
    quota: alice's producer is held to 100 KiB/s on the broker it writes to, bob's is not.

    What a sampled rate promises is judged, not the mean over an arbitrary stretch. The
    live samples hold at most the quota times the window, so no 10 seconds (a sample that
    began up to 1 s before them, and the 9 after) hold more than 11 seconds' worth, plus the
    request that crossed the bound. A client flat out keeps the window full, but it is
    admitted in bursts as old samples expire (about every 11 s), so a 15-second mean lands
    anywhere from 0.7x to 1.4x the quota: any 12 seconds hold a burst and hold most of a
    window's worth."""
    operator, namespace = secured.cluster, secured.namespace
    quota = 102_400
    operator.kubectl("-n", namespace, "patch", "kafkauser/alice", "--type=merge", "-p",
                     json.dumps({"spec": {"quotas": {"producerByteRate": quota}}}))
    wait_until(lambda: resource(secured, "kafkauser", "alice").get("status", {}).get(
        "observedGeneration") == resource(secured, "kafkauser", "alice")["metadata"][
        "generation"], 120, "alice's quota applied", 2.0)
    operator.kubectl("-n", namespace, "wait", "kafkauser/alice", "--for=condition=Ready",
                     "--timeout=120s", timeout=130)
    alice = flood(secured, "alice", 24, password_of="alice")
    bob = flood(secured, "bob", 15, certificate_of="bob")
    print(f"producer rate with producerByteRate {quota} B/s: alice {alice.rate:,.0f} B/s "
          f"(most in 10 s {alice.most_in(10):,} B, least in 12 s {alice.least_in(12):,} B; "
          f"per second {alice.per_second}), bob (no quota) {bob.rate:,.0f} B/s")
    assert alice.most_in(QUOTA_WINDOW_S - 1) <= 1.15 * QUOTA_WINDOW_S * quota, alice
    assert alice.least_in(QUOTA_WINDOW_S + 1) >= 0.7 * QUOTA_WINDOW_S * quota, alice
    assert bob.rate > 3 * quota, bob


def test_deleting_a_kafka_user_removes_its_secret_and_its_credential(secured: Brokers) -> None:
    password = secret_data(secured, "alice")["password"]
    # The operator's finalizer removes the credential and the ACLs first.
    secured.kubectl("delete", "kafkauser", "alice", "--timeout=120s", timeout=130)
    wait_until(lambda: "alice" not in secret_names(secured), 120,
               "alice's Secret gone with its owner", 2.0)
    assert [r[0] for r in get_table(secured, "kafkausers")[1:]] == ["bob"]
    # Her old password opens no new session: a new login every second until one is refused
    # (the brokers learn of the deletion from the cluster's metadata, a moment later).
    since = now_rfc3339()
    lines = run_client(secured, "login", bootstrap(secured, "scram"), "--until-refused",
                       "--seconds", "90", *scram("alice", password), timeout=180)
    assert outcome(lines, "X") == "X refused _AUTHENTICATION", lines[-10:]
    told = next((line for line in lines if line.startswith("E _AUTHENTICATION")), "")
    assert SCRAM_FAILURE in told, lines[-10:]
    broker_logged(secured, since, "Failed authentication with", SCRAM_FAILURE)
    accepted = lines.count("S accepted")
    print(f"alice deleted: Secret gone, her password refused after {accepted} accepted "
          f"login(s): {told}")

