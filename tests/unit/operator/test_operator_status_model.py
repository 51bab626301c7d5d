"""A KafkaCluster's status from what was observed (kafkube_operator.model.status): Ready only
with every broker registered, a controller and nothing left to roll; Warning whatever else
holds; transition times that move only with the status."""

from __future__ import annotations

from kafkube_operator.model.status import (
    BrokerState,
    ObservedCluster,
    SpecWarning,
    cluster_status,
    metadata_problem,
)

BROKERS = tuple(BrokerState(i, "abc"[i], 2) for i in range(3))


def status(observed: ObservedCluster, warnings=(), previous=(), now="2026-11-25T10:00:00Z",
           waiting=None) -> dict:
    return cluster_status(3, 7, observed, list(warnings), "c-bootstrap.ns.svc:9092",
                          "app=x", list(previous), now, waiting)


def conditions(s: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in s["conditions"]}


def test_ready_needs_every_broker_a_controller_and_no_pod_to_roll() -> None:
    ready = status(ObservedCluster(pods=3, controller=1, brokers=BROKERS))
    assert ready["state"] == "Ready" and ready["readyReplicas"] == 3
    assert conditions(ready) == {"Ready": ("True", "BrokersReady"),
                                 "Reconciling": ("False", "BrokersReady"),
                                 "Warning": ("False", "None")}
    assert ready["brokers"][0] == {"id": 0, "rack": "a", "leaders": 2}
    starting = status(ObservedCluster(pods=3, controller=1, brokers=BROKERS[:2]))
    assert starting["state"] == "Reconciling" and starting["readyReplicas"] == 2
    assert conditions(starting)["Ready"] == ("False", "BrokersStarting")
    leaderless = status(ObservedCluster(pods=3, controller=None, brokers=BROKERS))
    assert conditions(leaderless)["Ready"] == ("False", "NoController")
    rolling = status(ObservedCluster(pods=3, outdated_pods=2, controller=1, brokers=BROKERS),
                     waiting="waiting for pod c-0 to be ready")
    assert conditions(rolling)["Reconciling"] == ("True", "RollingRestart")
    message = next(c["message"] for c in rolling["conditions"] if c["type"] == "Reconciling")
    assert "2 pod(s) to restart: waiting for pod c-0 to be ready" in message


def test_a_warning_is_the_state_while_the_rest_still_reports() -> None:
    warned = status(ObservedCluster(pods=3, controller=0, brokers=BROKERS),
                    [SpecWarning("InvalidConfig", "spec.config not applied: x: unknown"),
                     SpecWarning("ScaleDownRefused", "spec.replicas 1 is below ...")])
    assert warned["state"] == "Warning"
    assert conditions(warned)["Ready"] == ("True", "BrokersReady")
    warning = next(c for c in warned["conditions"] if c["type"] == "Warning")
    assert warning["reason"] == "InvalidConfig"
    assert "x: unknown" in warning["message"] and "spec.replicas 1" in warning["message"]


def test_transition_times_move_only_with_the_status() -> None:
    first = status(ObservedCluster(pods=3, controller=1, brokers=BROKERS),
                   now="2026-11-25T10:00:00Z")
    same = status(ObservedCluster(pods=3, controller=1, brokers=BROKERS),
                  previous=first["conditions"], now="2026-11-25T10:05:00Z")
    assert [c["lastTransitionTime"] for c in same["conditions"]] == \
        ["2026-11-25T10:00:00Z"] * 3
    changed = status(ObservedCluster(pods=3, controller=None, brokers=BROKERS),
                     previous=same["conditions"], now="2026-11-25T10:06:00Z")
    times = {c["type"]: c["lastTransitionTime"] for c in changed["conditions"]}
    assert times == {"Ready": "2026-11-25T10:06:00Z", "Reconciling": "2026-11-25T10:06:00Z",
                     "Warning": "2026-11-25T10:00:00Z"}


def test_the_image_is_acted_on_only_when_it_is_this_clusters() -> None:
    """As the brokers judge it (broker/cluster/guard.py): no image before the first broker
    is no problem; no image where brokers ran, or another cluster's, is a Warning."""
    where = "ConfigMap ns/c-metadata"
    assert metadata_problem(None, None, False, where) is None
    assert metadata_problem(("id-1", 4), None, True, where) is None
    assert metadata_problem(("id-1", 4), "id-1", True, where) is None
    missing = metadata_problem(None, "id-1", False, where)
    assert missing is not None and missing.reason == "MetadataMissing"
    assert metadata_problem(None, None, True, where).reason == "MetadataMissing"
    foreign = metadata_problem(("id-2", 1), "id-1", True, where)
    assert foreign is not None and foreign.reason == "MetadataOfAnotherCluster"
    assert "id-2" in foreign.message and "id-1" in foreign.message and where in foreign.message
    back = metadata_problem(("id-1", 7), "id-1", True, where, recorded_version=9)
    assert back is not None and back.reason == "MetadataWentBack"
    assert metadata_problem(("id-1", 9), "id-1", True, where, recorded_version=9) is None
