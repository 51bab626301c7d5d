"""Brokers on Kubernetes, end to end: the reference deployment (deploy/kafkube.yaml) on the
suite's cluster, clients in pods of their own (tests/e2e/workload.py), the queue checker
judging what they saw. The scenarios run in order on one deployment, each leaving it whole."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from kafkube.harness.kind.deployment import BOOTSTRAP, BROKERS, Brokers, deploy, undeploy
from kafkube.harness.kind.history import read_drain, read_produce
from kafkube.harness.kind.platform import Cluster, KubectlError
from kafkube.harness.kind.streams import acked, checked, end_stream, stream, unwritable
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until


@pytest.fixture(scope="module")
def brokers(kind_cluster: Cluster) -> Iterator[Brokers]:
    try:
        yield deploy(kind_cluster)
    finally:
        undeploy(kind_cluster)


def test_three_brokers_with_their_leases_carry_100000_records(brokers: Brokers) -> None:
    leases = brokers.leases()
    holders = {name: lease["spec"]["holderIdentity"] for name, lease in leases.items()}
    assert {holders[f"kafkube-broker-{b}"] for b in range(BROKERS)} == {"0", "1", "2"}
    assert holders["kafkube-controller"] in {"0", "1", "2"}
    print("leases:", holders)

    brokers.create_topic("e2e-records", 6)
    history = History()
    produced = read_produce(brokers.run("produce", BOOTSTRAP, "e2e-records", "--count",
                                        "100000", "--acks", "all", timeout=600), history)
    drained = read_drain(brokers.run("drain", BOOTSTRAP, "e2e-records", timeout=600), history)
    assert produced.acked == 100_000 and drained == 100_000
    print("100,000 records, acks=all:", checked(history, produced, drained))


def test_the_controller_pod_killed_during_an_acks_all_stream(brokers: Brokers) -> None:
    brokers.create_topic("e2e-failover", 6)
    before = brokers.describe("e2e-failover")
    history = History()
    pod = stream(brokers, "e2e-failover", 60_000, 120, 5000)
    victim = brokers.controller()
    led = sorted(p for p, (leader, _, _) in before.items() if leader == victim)
    killed = time.monotonic()
    brokers.kubectl("delete", "pod", f"kafkube-{victim}", "--grace-period=0", "--force")
    new = brokers.controller_other_than(victim)
    took_over = time.monotonic() - killed
    end_stream(brokers, pod, 6)
    produced = read_produce(brokers.finish(pod, 300), history)
    drained = read_drain(brokers.run("drain", BOOTSTRAP, "e2e-failover", timeout=600), history)
    summary = checked(history, produced, drained)
    print(f"controller broker {victim} killed (grace 0): broker {new} took the controller "
          f"Lease within {took_over:.1f} s (as kubectl saw it); {unwritable(produced, led)}; "
          f"{summary}")
    brokers.wait_whole()


def test_a_crashed_broker_is_fenced_by_its_pod_before_its_lease_expires(
        brokers: Brokers, kind_cluster: Cluster) -> None:
    """A leader's process (not the controller's) SIGKILLed from its node during an acks=all
    stream: no SIGTERM, no controlled shutdown, its pod left alone. The kubelet reports the
    container's end, the controller fences the broker on that evidence instead of waiting
    out its lease, nothing acknowledged is lost, and the restarted container registers with
    a new broker epoch and rejoins."""
    if kind_cluster.name is None:
        pytest.skip("killing a process from its node needs the suite's own kind cluster")
    brokers.create_topic("e2e-crash", 6)
    before = brokers.describe("e2e-crash")
    controller = brokers.controller()
    victim = next(leader for leader, _, _ in before.values() if leader != controller)
    led = sorted(p for p, (leader, _, _) in before.items() if leader == victim)
    epoch = broker_epochs(brokers)[f"kafkube-broker-{victim}"]
    history = History()
    pod = stream(brokers, "e2e-crash", 40_000, 90, 3000)
    brokers.crash(victim)
    fenced = f"broker {victim} (epoch {epoch}) fenced before its lease expired"
    said = wait_until(
        lambda: next((x for x in brokers.kubectl("logs", f"kafkube-{controller}").splitlines()
                      if fenced in x), None),
        60, f"the controller to fence broker {victim} on its pod's evidence", 1.0)
    end_stream(brokers, pod, 6)
    produced = read_produce(brokers.finish(pod, 300), history)
    drained = read_drain(brokers.run("drain", BOOTSTRAP, "e2e-crash", timeout=600), history)
    summary = checked(history, produced, drained)
    brokers.wait_whole()
    assert broker_epochs(brokers)[f"kafkube-broker-{victim}"] != epoch
    print(f"broker {victim} crashed (SIGKILL from its node): {said.split(': ', 1)[-1]}; "
          f"{unwritable(produced, led)}; {summary}")


def test_a_recreated_broker_pod_recovers_its_log_from_its_volume(brokers: Brokers) -> None:
    victim = (brokers.controller() + 1) % BROKERS
    size = sum(v for k, v in brokers.metrics(victim).items()
               if k.startswith('kafka_log_size_bytes{') and 'topic="e2e-records"' in k)
    assert size > 1_000_000, f"broker {victim} holds only {size} bytes of e2e-records"

    def served() -> float:  # bytes the others served to followers (only the victim fetches)
        return sum(brokers.metrics(b)["kafka_server_replication_bytes_out_total"]
                   for b in range(BROKERS) if b != victim)

    before = served()
    brokers.kubectl("delete", "pod", f"kafkube-{victim}")  # a clean stop, the volume kept
    wait_until(lambda: f"kafkube-{victim}" not in brokers.ready_pods(), 120, "the pod to go", 1.0)
    brokers.wait_whole()
    fetched = served() - before
    log = brokers.kubectl("logs", f"kafkube-{victim}")
    loaded = [line for line in log.splitlines() if "loaded" in line and "partitions" in line]
    print(f"broker {victim} recreated: {loaded[-1] if loaded else '?'}; it holds {size:.0f} "
          f"bytes of e2e-records, and fetched {fetched:.0f} bytes to rejoin every ISR")
    assert loaded and not loaded[-1].split("loaded ")[1].startswith("0 "), \
        "the recreated broker found no partitions on its volume"
    assert fetched < size / 10, "the recreated broker re-replicated its log"


def on_control_plane(cluster: Cluster, *argv: str) -> None:
    cluster.on_node(f"{cluster.name}-control-plane", *argv)


def broker_epochs(brokers: Brokers) -> dict[str, str]:
    return {name: lease["metadata"]["annotations"]["kafkube.io/broker-epoch"]
            for name, lease in brokers.leases().items() if "-broker-" in name}


def test_an_api_server_outage_moves_nothing(brokers: Brokers, kind_cluster: Cluster) -> None:
    """30 s without an API server (paused, then killed and restarted by the kubelet) while
    acks=1 and acks=all producers run: the brokers go on serving, and afterwards no broker
    was fenced, none re-registered and no leader moved."""
    if kind_cluster.name is None:
        pytest.skip("stopping the API server needs the suite's own kind cluster")
    topics = {acks: f"e2e-outage-{acks}" for acks in ("1", "all")}
    for topic in topics.values():
        brokers.create_topic(topic, 6)
    before = {acks: brokers.describe(topic) for acks, topic in topics.items()}
    epochs = broker_epochs(brokers)
    histories = {acks: History() for acks in topics}
    pods = {acks: brokers.start("produce", BOOTSTRAP, topic, "--count", "60000",
                                "--acks", acks, "--rate", "400", "--seconds", "150")
            for acks, topic in topics.items()}
    for pod in pods.values():
        brokers.wait_running(pod, 120)
        wait_until(lambda pod=pod: acked(brokers, pod) > 2000,
                 120, "2,000 acknowledged records before the outage", 1.0)
    stopped = time.time()
    on_control_plane(kind_cluster, "pkill", "-STOP", "-f", "kube-apiserver")
    try:
        time.sleep(25)  # the outage is the scenario: 25 s paused, then killed and restarted
    finally:
        on_control_plane(kind_cluster, "pkill", "-KILL", "-f", "kube-apiserver")
    wait_until(lambda: _answers(kind_cluster), 300, "the API server to answer again", 2)
    back = time.time()
    session_s = 9  # broker.session.timeout.ms's default
    wait_until(lambda: all(lease_renewed_after(lease, back + 2 * session_s)
                         for name, lease in brokers.leases().items() if "-broker-" in name),
             120, "every broker lease renewed two sessions after the API server returned", 1.0)
    for pod in pods.values():
        end_stream(brokers, pod, 6)
    lapsed_from = (stopped + session_s) * 1000
    for acks, pod in pods.items():
        produced = read_produce(brokers.finish(pod, 300), histories[acks])
        during = sum(1 for times in produced.ack_times.values() for t in times
                     if lapsed_from <= t < back * 1000)
        print(f"acks={acks}: {during} records acknowledged while the API server was down and "
              f"every lease had lapsed ({back - stopped - session_s:.0f} s); "
              f"{produced.acked} of {produced.sent} in all, {produced.failed} failed")
        assert during > 1000, f"acks={acks}: the brokers stopped serving during the outage"
        assert produced.failed == 0
        drained = read_drain(brokers.run("drain", BOOTSTRAP, topics[acks], timeout=600),
                             histories[acks])
        print(f"acks={acks}:", checked(histories[acks], produced, drained, acks == "all"))
    for acks, topic in topics.items():
        after = brokers.describe(topic)
        assert {p: s[0] for p, s in after.items()} == {p: s[0] for p, s in before[acks].items()}, \
            f"a leader of {topic} moved"
    assert broker_epochs(brokers) == epochs, "a broker re-registered (it was fenced)"
    for b in range(BROKERS):
        assert "lease lapsed" not in brokers.kubectl("logs", f"kafkube-{b}")


def _answers(cluster: Cluster) -> bool:
    try:
        return cluster.kubectl("get", "--raw", "/readyz", timeout=10).strip() == "ok"
    except (KubectlError, subprocess.TimeoutExpired):
        return False


def lease_renewed_after(lease: dict, moment: float) -> bool:
    renewed = lease["spec"].get("renewTime")
    return renewed is not None and _rfc3339(renewed) > moment


def _rfc3339(text: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
