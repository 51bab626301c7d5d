"""A change of spec.listeners on a running cluster (issue 27, item 6): the steps the operator
rolls through (model/listener_change.py), and real brokers rolled through them one at a
time, as the operator's roll restarts them, replicating all along.

Before the steps existed the operator rolled the wanted listeners in one go: a restarted
broker replicated on REPLICATION (TLS, 9091) while the others had no such listener, and
each broker dialled its peers at *their* inter-broker address with *its own* security, so
brokers of two configurations could not fetch from each other and every ISR shrank."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from itertools import pairwise

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.cluster.image import ClusterImage
from kafkube.harness.ports import free_port
from kafkube.harness.waiting import wait_until
from kafkube_contract.registration import BrokerRegistration
from kafkube_operator.kafka import AdminClients, AdminSecurity, KafkaAdmin
from kafkube_operator.model.broker_config import broker_properties
from kafkube_operator.model.cluster import CONFIG_HASH, ClusterRef, config_hash, selector
from kafkube_operator.model.listener_change import next_step
from kafkube_operator.model.listeners import (
    REPLICATION,
    ListenerLayout,
    SecuritySpec,
    layout_of_properties,
    security_properties,
)
from kafkube_operator.model.status import BrokerState, ObservedCluster, cluster_conditions
from kafkube_operator.reconcile.cluster_apply import listener_step
from kafkube_operator.reconcile.snapshot import ClusterSnapshot
from kafkube_operator.reconcile.views import TrustedImage, admin_listener
from tests.support.security_setup import make_pki
from tests.unit.operator.test_operator_user_reconcile import FakeKube, SlowClient, slow_admin

PLAIN = {"name": "plain", "port": 9092}
TLS_LISTENER = {"name": "tls", "port": 9093, "tls": True}
SCRAM_LISTENER = {"name": "scram", "port": 9094, "tls": True,
                  "authentication": {"type": "scram-sha-512"}}
MTLS = {"name": "mtls", "port": 9095, "tls": True, "authentication": {"type": "tls"}}


def layout(listeners: list[dict] | None = None, authorization: bool = False) -> ListenerLayout:
    spec: dict = {"listeners": listeners} if listeners else {}
    if authorization:
        spec["authorization"] = {"type": "simple"}
    return ListenerLayout.of(SecuritySpec.of(spec))


def steps(running: ListenerLayout, wanted: ListenerLayout) -> list[ListenerLayout]:
    """Every layout rolled onto, in order, from ``running`` to ``wanted``."""
    rolled = [running]
    for _ in range(5):
        step = next_step(rolled[-1], wanted)
        rolled.append(step.layout)
        if step.final:
            return rolled
    raise AssertionError(f"no end after 5 steps: {rolled}")


CHANGES = {
    "secured, the plain listener on 9092 as before": (layout(), layout([PLAIN, TLS_LISTENER])),
    "secured with ACLs": (layout(), layout([PLAIN, MTLS, SCRAM_LISTENER], authorization=True)),
    "secured, 9092 dropped": (layout(), layout([TLS_LISTENER])),
    "back to plaintext": (layout([PLAIN, MTLS], authorization=True), layout()),
    "a listener added to a secured cluster": (layout([PLAIN]), layout([PLAIN, SCRAM_LISTENER])),
    "ACLs turned on": (layout([PLAIN]), layout([PLAIN], authorization=True)),
}


@pytest.mark.parametrize("change", CHANGES)
def test_every_step_shares_a_replication_listener_with_the_one_before(change: str) -> None:
    running, wanted = CHANGES[change]
    rolled = steps(running, wanted)
    assert rolled[-1] == wanted
    inter_changes = running.inter_broker != wanted.inter_broker
    assert len(rolled) - 1 == (3 if inter_changes else 1), rolled
    for before, after in pairwise(rolled):
        # Mid-roll, brokers of both steps run side by side: each dials the others on its own
        # inter-broker listener, which must be there, the same, on both.
        for name in (before.inter_broker, after.inter_broker):
            assert before.listener(name) == after.listener(name) is not None, (before, after)
        # ACLs only once no broker replicates unauthenticated: a step before the last never
        # turns them on.
        if after.authorization and after is not rolled[-1]:
            assert before.authorization
        for li in after.listeners:
            assert sum(other.port == li.port for other in after.listeners) == 1, after


def test_the_steps_keep_the_acls_off_until_the_last() -> None:
    running, wanted = CHANGES["secured with ACLs"]
    assert [s.authorization for s in steps(running, wanted)] == [False, False, False, True]
    running, wanted = CHANGES["back to plaintext"]
    assert [s.authorization for s in steps(running, wanted)] == [True, False, False, False]


@pytest.mark.parametrize("change", CHANGES)
def test_the_layout_is_read_back_from_the_brokers_config(change: str) -> None:
    for step in steps(*CHANGES[change]):
        spec = {"listeners": [PLAIN]}  # only the layout decides the listeners' config
        properties = broker_properties("prod", spec, layout=step).properties
        assert layout_of_properties(properties) == step


# -- real brokers rolled through the steps ---------------------------------------------------

WANTED = layout([PLAIN, TLS_LISTENER])
TOPIC = "orders"


def broker_config(step: ListenerLayout, ports: dict[int, int], pki) -> dict[str, str]:
    """The operator's config of ``step`` for a broker on loopback: each of its listeners on
    this broker's own port for it, the plaintext one on 9092 first (the harness's clients
    bootstrap on the first), the test CA's key store in place of the Secrets."""
    properties = security_properties("prod", SecuritySpec(), step) or {
        "listeners": "PLAINTEXT://0.0.0.0:9092"}
    entries = sorted(properties["listeners"].split(","), key=lambda e: not e.endswith(":9092"))
    properties["listeners"] = ",".join(
        re.sub(r"0\.0\.0\.0:(\d+)$", lambda m: f"127.0.0.1:{ports[int(m[1])]}", e)
        for e in entries)
    for key in list(properties):
        if key.endswith("ssl.keystore.location"):
            properties[key] = str(pki.broker_keystore)
        elif key.endswith("ssl.truststore.location"):
            properties[key] = str(pki.ca)
    return properties


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 30_000})
    failed: list[str] = []
    for i in range(start, start + count):
        producer.produce(TOPIC, str(i).encode(), on_delivery=lambda err, msg: err and
                         failed.append(str(err)))
    assert producer.flush(60) == 0 and not failed, failed


def read_all(bootstrap: str, expected: int, timeout: float = 120) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    values: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                values.append(int(message.value()))
    finally:
        consumer.close()
    return values


def whole(state) -> bool:
    """A partition led, with all three brokers in its ISR. Mid-roll of step 3 the broker
    asked may name 9092's listener otherwise than the leader does: it answers leader -1 with
    LISTENER_NOT_FOUND (as Kafka does) and the ISR still, which is what the roll waits on."""
    led = state.leader >= 0 or state.error == "LISTENER_NOT_FOUND"
    return led and len(state.isr) == 3


def test_brokers_replicate_through_each_step_of_an_inter_broker_listener_change(
        cluster_factory, pki) -> None:
    rolled = steps(layout(), WANTED)
    assert len(rolled) == 4
    ports = {i: {port: free_port() for port in (9091, 9092, 9093)} for i in range(3)}
    cluster = cluster_factory(3, {"min.insync.replicas": "2",
                                  "default.replication.factor": "3"}, start=False)
    for i, broker in enumerate(cluster.brokers):
        broker.overrides.update(broker_config(rolled[0], ports[i], pki))
    cluster.start()
    cluster.create_topic(TOPIC, 6, 3)
    bootstrap = ",".join(f"127.0.0.1:{ports[i][9092]}" for i in range(3))
    produced = 0
    for number, step in enumerate(rolled[1:], 1):
        for i, broker in enumerate(cluster.brokers):
            for key in [k for k in broker.overrides if k.startswith(("listener", "ssl.",
                                                                       "inter.broker"))]:
                del broker.overrides[key]
            broker.overrides.update(broker_config(step, ports[i], pki))
            cluster.restart(i)
            # The roll's gate: every ISR whole again before the next broker restarts. With
            # brokers of two steps side by side this needs them to fetch from each other.
            cluster.wait_for_partitions(TOPIC, whole, 60, f"broker {i} back, every ISR whole")
            if number < 3:  # acks=all writes mid-roll; step 3 renames 9092's listener:
                produce(bootstrap, produced, 200)  # a client on one name sees the brokers
                produced += 200  # of its name only, until every broker has it
        assert step.inter_broker == (REPLICATION.upper() if number >= 2 else "PLAINTEXT")
        produce(bootstrap, produced, 200)
        produced += 200
    assert sorted(read_all(bootstrap, produced)) == list(range(produced))


# -- the operator: when a step starts, and the listener it talks to the brokers on ------------

def test_the_operator_talks_to_the_brokers_on_a_listener_every_one_has() -> None:
    old, rolled = "PLAINTEXT://a:9092", "PLAINTEXT://b:9092,REPLICATION://b:9091,TLS://b:9093"
    assert admin_listener([old, rolled]) == "PLAINTEXT"  # step 1 under way
    assert admin_listener([rolled, rolled]) == "REPLICATION"
    assert admin_listener(["PLAIN://c:9092,REPLICATION://c:9091", rolled]) == "REPLICATION"
    assert admin_listener(["PLAIN://c:9092", "TLS://d:9093"]) is None
    assert admin_listener([]) is None


def test_a_client_made_for_another_listener_is_replaced() -> None:
    made: list[tuple[SlowClient, str | None]] = []
    asked: list[str | None] = []

    def make(servers: Sequence[str], security: AdminSecurity | None) -> KafkaAdmin:
        made.append((SlowClient(), None))
        return slow_admin(made[-1][0])

    def security(key: tuple[str, str], listener: str | None) -> AdminSecurity | None:
        asked.append(listener)
        return None

    admins = AdminClients(security, make=make)
    key = ("kafka", "prod")
    first = admins.of(key, lambda: ["127.0.0.1:1"], "PLAINTEXT")
    assert admins.of(key, lambda: ["127.0.0.1:1"], "PLAINTEXT") is first
    second = admins.of(key, lambda: ["127.0.0.1:2"], "REPLICATION")
    assert second is not first and made[0][0].closed and not made[1][0].closed
    assert asked == ["PLAINTEXT", "REPLICATION"]


class LiveBrokers:
    def __init__(self, advertised: dict[int, str]) -> None:
        self.advertised = advertised

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        return {node: BrokerRegistration(node, "h", 9092, listeners=text)
                for node, text in self.advertised.items()}


def snapshot_of(kube: FakeKube, view: LiveBrokers, ref: ClusterRef) -> ClusterSnapshot:
    """What a pass reads (reconcile/snapshot.py), from the fake API server and leases."""
    config_map = kube.get("v1", "ConfigMap", ref.config_map, ref.namespace) or {}
    return ClusterSnapshot(
        ref, kube.get("apps/v1", "StatefulSet", ref.statefulset, ref.namespace),
        tuple(kube.list("v1", "Pod", ref.namespace, selector(ref))),
        (config_map.get("data") or {}).get("server.properties", ""),
        TrustedImage(ClusterImage(), None), view.live_brokers(), None)


def running_cluster(pod_revisions: list[str], observed_generation: int = 2,
                    loaded: str | None = None) -> FakeKube:
    """A 3-broker cluster on the default listener whose StatefulSet's template is at
    revision ``r2``, with pods at ``pod_revisions`` that loaded the ConfigMap (or
    ``loaded``, the text of another)."""
    ref = ClusterRef.of(CLUSTER)
    text = broker_properties("prod", {}).text
    objects: list[dict] = [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": ref.config_map, "namespace": "kafka"},
         "data": {"server.properties": text}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet",
         "metadata": {"name": ref.statefulset, "namespace": "kafka", "generation": 2,
                      "labels": selector(ref)},
         "spec": {"replicas": 3},
         "status": {"observedGeneration": observed_generation, "updateRevision": "r2"}}]
    for i, revision in enumerate(pod_revisions):
        objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": ref.pod(i), "namespace": "kafka", "uid": f"u{i}",
            "annotations": {CONFIG_HASH: config_hash(loaded or text)},
            "labels": {**selector(ref), "controller-revision-hash": revision}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    return FakeKube(*objects)


CLUSTER = {"apiVersion": "kafkube.io/v1alpha1", "kind": "KafkaCluster",
           "metadata": {"name": "prod", "namespace": "kafka"},
           "spec": {"listeners": [PLAIN, TLS_LISTENER]}}


def test_a_step_starts_only_once_every_broker_runs_the_one_before() -> None:
    ref = ClusterRef.of(CLUSTER)
    plain = LiveBrokers(dict.fromkeys(range(3), "PLAINTEXT://h:9092"))

    def step(kube: FakeKube, view: LiveBrokers):
        return listener_step(snapshot_of(kube, view, ref), CLUSTER)

    held = step(running_cluster(["r2", "r1", "r2"]), plain)
    assert held.layout == layout() and not held.final
    assert "waiting for pod prod-1 to be restarted" in held.description
    # The template just applied, its revision not yet computed by the StatefulSet controller.
    assert step(running_cluster(["r2"] * 3, observed_generation=1), plain).layout == layout()
    # A broker not (yet) registered, or registered with what it ran before.
    assert step(running_cluster(["r2"] * 3), LiveBrokers({0: "PLAINTEXT://h:9092"})
                ).layout == layout()
    # Pods on the latest revision that loaded another text (the StatefulSet's apply failed
    # after the ConfigMap's): what they run is not what the ConfigMap says.
    assert step(running_cluster(["r2"] * 3, loaded="listeners=x"), plain).layout == layout()
    # The StatefulSet gone (a storage change recreates it) while its pods run.
    kube = running_cluster(["r2"] * 3)
    del kube.objects[("StatefulSet", "kafka", ref.statefulset)]
    assert step(kube, plain).layout == layout()
    # The ConfigMap deleted mid-change: the status says where the change stands.
    kube = running_cluster(["r2"] * 3)
    del kube.objects[("ConfigMap", "kafka", ref.config_map)]
    midway = next_step(layout(), layout([PLAIN, TLS_LISTENER])).layout
    recorded = {**CLUSTER, "status": {"listenerLayout": midway.as_status()}}
    assert listener_step(snapshot_of(kube, plain, ref), recorded).layout == midway
    first = step(running_cluster(["r2"] * 3), plain)
    assert first.layout.inter_broker == "PLAINTEXT" and not first.final
    assert first.layout.names == {"PLAINTEXT", "REPLICATION", "TLS"}
    assert "step 1 of 3" in first.description


def test_the_step_under_way_stays_in_the_description_while_the_brokers_roll_onto_it() -> None:
    """The status says which step is under way for the whole step, not only on the pass
    that started it: the passes between say what it waits for after it."""
    ref = ClusterRef.of(CLUSTER)
    plain = LiveBrokers(dict.fromkeys(range(3), "PLAINTEXT://h:9092"))
    started = next_step(layout(), layout([PLAIN, TLS_LISTENER])).description
    held = listener_step(snapshot_of(running_cluster(["r2", "r1", "r2"]), plain, ref), CLUSTER,
                         started)
    assert held.description.startswith(started) and "step 1 of 3" in held.description
    assert "waiting for pod prod-1 to be restarted" in held.description
    assert held.waiting_for is not None and not held.final
    first = listener_step(snapshot_of(running_cluster(["r2"] * 3), plain, ref), CLUSTER, started)
    assert first.waiting_for is None and "step 1 of 3" in first.description


def test_the_cluster_is_not_ready_between_two_steps() -> None:
    observed = ObservedCluster(pods=3, outdated_pods=0, controller=0,
                               brokers=tuple(BrokerState(i, None, 1) for i in range(3)))
    ready, conditions = cluster_conditions(3, observed, [], pending="step 1 of 3: adding TLS")
    assert not ready
    assert conditions[0].status == "False" and "step 1 of 3" in conditions[0].message
    assert cluster_conditions(3, observed, [])[0]


def test_a_leader_without_the_clients_listener_is_answered_as_kafka_does(
        cluster_factory) -> None:
    """Mid-roll, a client that came in on a listener only some brokers have gets no leader
    for the partitions the others lead: LISTENER_NOT_FOUND, not a leader id it has no
    address of."""
    cluster = cluster_factory(2, start=False)
    cluster.brokers[1].overrides.update({
        "listeners": "PLAINTEXT://127.0.0.1:0,EXTRA://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTRA:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT"})
    cluster.start()
    futures = cluster.admin.create_topics([
        NewTopic("split", num_partitions=2, replica_assignment=[[0], [1]])])
    futures["split"].result(30)
    extra = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap_of("EXTRA")})

    def answered() -> dict | None:
        topic = extra.list_topics("split", timeout=10).topics["split"]
        return topic.partitions if len(topic.partitions) == 2 and \
            topic.partitions[1].leader == 1 else None

    partitions = wait_until(answered, 30, "partition 1 led by broker 1, on EXTRA")
    assert partitions[0].leader == -1
    assert partitions[0].error is not None and partitions[0].error.code() == 72


def test_the_layout_is_read_back_from_the_status() -> None:
    for change in CHANGES.values():
        for step in steps(*change):
            assert ListenerLayout.of_status({"listenerLayout": step.as_status()}) == step


def test_an_authorizer_of_spec_config_is_not_taken_for_a_step() -> None:
    """Without spec.listeners spec.config may set an authorizer: it is not a step's ACLs
    (else the layout read back would never equal the wanted one, and every pass would
    render another config); with them, spec.authorization alone decides."""
    config = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS"}
    plain = broker_properties("prod", {"config": config})
    assert layout_of_properties(plain.properties) == layout() and not plain.refused
    secured = broker_properties("prod", {"listeners": [PLAIN], "config": config})
    assert set(secured.refused) == set(config)
    assert layout_of_properties(secured.properties) == layout([PLAIN])
