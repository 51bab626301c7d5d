"""spec.autoSizing → each pool's broker resources from its nodes (model/sizing.py).

The figures come from the smallest node a pool may run on, never from how many nodes there
are or whether they are Ready, so a node lost or cordoned does not roll the brokers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkube_operator.model.cluster import DEFAULT_RESOURCES, desired_cluster
from kafkube_operator.model.pools import node_pools
from kafkube_operator.model.sizing import (
    SIZED_GENERATION,
    AutoSizing,
    NodeCapacity,
    PoolSizing,
    Sized,
    size_pool,
    size_pools,
)

AUTO = {"enabled": True}


def node(name: str, cpu: str, memory: str, ready: bool = True, cordoned: bool = False,
         **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": cordoned},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "conditions": [{"type": "Ready", "status": str(ready)}]}}


def derived(sizing: list[PoolSizing], generation: int) -> dict[str, Sized]:
    """What reconcile/sizing.py hands the StatefulSets when no pool has one yet."""
    return {s.pool: Sized(s.resources, generation) for s in sizing if s.resources is not None}


def sized(spec: dict, nodes: list[dict]) -> dict[str, dict]:
    return {pool: s.resources for pool, s in
            derived(size_pools(node_pools(spec), spec, nodes), 1).items()}


def test_a_sixteen_core_node_gives_each_broker_a_core_and_its_share_of_memory() -> None:
    spec = {"replicas": 3, "autoSizing": AUTO}
    [sizing] = size_pools(node_pools(spec), spec, [node(f"n{i}", "16", "64Gi") for i in range(3)])
    assert sizing.resources == {"requests": {"cpu": "1", "memory": "512Mi"},
                                "limits": {"memory": "4Gi"}}  # (64 - 2) GiB / 15 cores
    assert sizing.brokers_per_node == 15 and sizing.nodes == 3
    assert "each has room for at least 15 such broker(s); the pool has 3" in sizing.message
    assert sizing.as_status()["cpu"] == "1" and sizing.as_status()["pool"] == "default"


def test_a_node_smaller_than_a_core_and_its_reserve_gives_what_is_left() -> None:
    spec = {"replicas": 3, "autoSizing": {"enabled": True, "reservedCpu": "500m"}}
    assert sized(spec, [node("small", "1270m", "4Gi")])[""]["requests"]["cpu"] == "750m"


def test_a_node_with_nothing_left_after_its_reserve_says_so() -> None:
    spec = {"replicas": 1, "autoSizing": AUTO}
    [sizing] = size_pools(node_pools(spec), spec, [node("tiny", "1", "2Gi")])
    assert sizing.resources is not None
    assert sizing.resources["requests"]["cpu"] == "100m"
    assert sizing.resources["limits"]["memory"] == "1Gi"
    assert sizing.too_small and "lower spec.autoSizing.reservedCpu" in sizing.message


def test_the_smallest_node_the_pool_may_use_decides() -> None:
    spec = {"replicas": 3, "autoSizing": AUTO, "nodeSelector": {"pool": "kafka"},
            "pools": [{"name": "edge", "replicas": 2, "firstNodeId": 100,
                       "nodeSelector": {"pool": "edge"}}]}
    nodes = [node("big", "32", "128Gi", pool="kafka"), node("mid", "8", "32Gi", pool="kafka"),
             node("edge-1", "2", "8Gi", pool="edge"), node("other", "1", "1Gi")]
    by_pool = {s.pool: s for s in size_pools(node_pools(spec), spec, nodes)}
    assert by_pool[""].node == "mid" and by_pool[""].brokers_per_node == 7
    assert by_pool[""].resources is not None
    assert by_pool[""].resources["requests"]["cpu"] == "1"
    assert by_pool["edge"].node == "edge-1" and by_pool["edge"].brokers_per_node == 1


def test_resources_of_the_users_win_over_the_derived_ones() -> None:
    own = {"requests": {"cpu": "3", "memory": "6Gi"}}
    spec = {"replicas": 3, "autoSizing": AUTO, "resources": own,
            "pools": [{"name": "p", "replicas": 1, "firstNodeId": 10,
                       "resources": {"requests": {"cpu": "250m"}}}]}
    assert size_pools(node_pools(spec), spec, [node("n", "16", "64Gi")]) == []
    manifests = desired_cluster({"metadata": {"name": "c", "namespace": "ns", "uid": "u"},
                                 "spec": spec},
                                derived={"": Sized({"requests": {"cpu": "9"}}, 1)})
    containers = [o["spec"]["template"]["spec"]["containers"][0]["resources"]
                  for o in manifests.objects if o["kind"] == "StatefulSet"]
    assert containers == [own, {"requests": {"cpu": "250m"}}]
    assert all(SIZED_GENERATION not in (o["metadata"].get("annotations") or {})
               for o in manifests.objects)


def test_derived_resources_reach_the_statefulset_and_the_rest_keep_the_default() -> None:
    spec = {"replicas": 3, "autoSizing": AUTO, "nodeSelector": {"pool": "kafka"},
            "pools": [{"name": "nowhere", "replicas": 1, "firstNodeId": 10,
                       "nodeSelector": {"pool": "missing"}}]}
    sizing = size_pools(node_pools(spec), spec, [node("n", "4", "16Gi", pool="kafka")])
    assert [s.pool for s in sizing if s.resources is None] == ["nowhere"]
    assert "no node matches nodeSelector {'pool': 'missing'}" in sizing[1].message
    objects = desired_cluster({"metadata": {"name": "c", "namespace": "ns", "uid": "u"},
                               "spec": spec}, derived=derived(sizing, 7)).objects
    sets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "StatefulSet"}
    resources = {name: o["spec"]["template"]["spec"]["containers"][0]["resources"]
                 for name, o in sets.items()}
    assert resources["c"]["requests"]["cpu"] == "1"
    assert resources["c-nowhere"] == DEFAULT_RESOURCES
    # The generation they were derived at, on the StatefulSet, not its pods (no roll).
    assert sets["c"]["metadata"]["annotations"] == {SIZED_GENERATION: "7"}
    assert "annotations" not in sets["c-nowhere"]["metadata"]


def test_without_auto_sizing_nothing_is_derived() -> None:
    for auto in (None, {}, {"enabled": False}):
        spec = {"replicas": 3, **({"autoSizing": auto} if auto is not None else {})}
        assert size_pools(node_pools(spec), spec, [node("n", "16", "64Gi")]) == []


def test_a_reserve_that_is_no_quantity_is_refused_with_its_field() -> None:
    with pytest.raises(ValueError):
        AutoSizing.of({"autoSizing": {"enabled": True, "reservedCpu": "a lot"}})


def test_a_node_that_has_not_said_what_it_can_allocate_is_left_out() -> None:
    assert NodeCapacity.of({"metadata": {"name": "new"}, "status": {}}) is None
    spec = {"replicas": 1, "autoSizing": AUTO}
    [sizing] = size_pools(node_pools(spec), spec, [{"metadata": {"name": "new"}}])
    assert sizing.resources is None and "no node is registered" in sizing.message


def test_nodes_tainted_for_others_are_left_out_but_not_nodes_cordoned_or_not_ready() -> None:
    control_plane = node("cp", "2", "4Gi")
    control_plane["spec"]["taints"] = [{"key": "node-role.kubernetes.io/control-plane",
                                        "effect": "NoSchedule"}]
    gpu = node("gpu", "4", "16Gi")
    gpu["spec"]["taints"] = [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]
    cordoned = node("cordoned", "4", "16Gi", cordoned=True)
    cordoned["spec"]["taints"] = [{"key": "node.kubernetes.io/unschedulable",
                                   "effect": "NoSchedule"},
                                  {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    prefers = node("prefers", "2", "4Gi")
    prefers["spec"]["taints"] = [{"key": "spot", "effect": "PreferNoSchedule"}]
    workers = [node("w1", "16", "64Gi"), node("w2", "16", "64Gi")]
    spec = {"replicas": 3, "autoSizing": AUTO}
    by_node = size_pools(node_pools(spec), spec, [control_plane, gpu, *workers])[0]
    # The control plane and the GPU node are others': the workers alone count.
    assert (by_node.node, by_node.nodes) == ("w1", 2)
    with_cordoned = size_pools(node_pools(spec), spec, [cordoned, prefers, *workers])[0]
    assert (with_cordoned.node, with_cordoned.nodes) == ("prefers", 4)
    tolerant = {**spec, "tolerations": [{"key": "gpu", "operator": "Equal", "value": "true",
                                         "effect": "NoSchedule"}]}
    assert size_pools(node_pools(tolerant), tolerant, [gpu, *workers])[0].node == "gpu"
    anything = {**spec, "tolerations": [{"operator": "Exists"}]}
    assert size_pools(node_pools(anything), anything, [control_plane, *workers])[0].node == "cp"


def test_memory_follows_the_node_with_the_least_per_core_not_the_fewest_cores() -> None:
    spec = {"replicas": 3, "autoSizing": AUTO}
    [sizing] = size_pools(node_pools(spec), spec, [node("cpu-rich", "16", "16Gi"),
                                                    node("memory-rich", "8", "64Gi")])
    assert sizing.node == "memory-rich"  # the fewest cores set the CPU request
    assert sizing.resources is not None
    # (16 - 2) GiB over 15 cores: 955 MiB a core, so the 1 GiB floor.
    assert sizing.resources["limits"]["memory"] == "1Gi"
    assert sizing.brokers_per_node == 7  # memory-rich: 7 cores left; cpu-rich: 28 x 512 MiB


def test_a_node_short_of_memory_has_room_for_fewer_brokers_than_its_cores() -> None:
    spec = {"replicas": 3, "autoSizing": AUTO}
    [sizing] = size_pools(node_pools(spec), spec, [node("lean", "16", "4Gi")])
    assert sizing.brokers_per_node == 4  # (4 - 2) GiB / 512 MiB, not 15 cores
    [none] = size_pools(node_pools(spec), spec, [node("starved", "4", "2Gi")])
    assert none.brokers_per_node == 0 and none.too_small


@given(count=st.integers(1, 12), lost=st.integers(0, 11), cores=st.integers(2, 64),
       gib=st.integers(4, 512))
def test_losing_or_cordoning_nodes_of_the_same_size_changes_nothing(
        count: int, lost: int, cores: int, gib: int) -> None:
    spec = {"replicas": 6, "autoSizing": AUTO}
    nodes = [node(f"n{i}", str(cores), f"{gib}Gi") for i in range(count)]
    degraded = [node(f"n{i}", str(cores), f"{gib}Gi", ready=i % 2 == 0, cordoned=i % 3 == 0)
                for i in range(max(1, count - lost))]
    assert sized(spec, nodes) == sized(spec, degraded)


@given(cores_millis=st.integers(100, 256_000), gib=st.integers(1, 2048),
       reserved=st.integers(0, 4000))
def test_the_request_is_between_100m_and_a_core_and_the_limit_above_the_request(
        cores_millis: int, gib: int, reserved: int) -> None:
    capacity = NodeCapacity("n", cores_millis, gib * 1024**3, {})
    pool = node_pools({"replicas": 3})[0]
    sizing = size_pool(pool, [capacity], AutoSizing(reserved, 2 * 1024**3))
    assert sizing.resources is not None
    cpu = sizing.resources["requests"]["cpu"]
    millis = int(cpu[:-1]) if cpu.endswith("m") else int(cpu) * 1000
    assert 100 <= millis <= 1000 and millis % 50 == 0
    limit = sizing.resources["limits"]["memory"]
    mib = int(limit[:-2]) * (1024 if limit.endswith("Gi") else 1)
    assert 1024 <= mib <= 16 * 1024 and mib >= 512


def required(*terms: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}


def test_required_node_affinity_decides_which_nodes_count_and_preferred_does_not() -> None:
    nodes = [node("small", "2", "8Gi", zone="a", tier="kafka", gen="3"),
             node("big-a", "16", "64Gi", zone="a", tier="kafka", gen="5"),
             node("big-b", "16", "64Gi", zone="b", tier="kafka", gen="5"),
             node("unlabelled", "1", "2Gi")]

    def picked(affinity: dict) -> tuple[str | None, int]:
        spec = {"replicas": 3, "autoSizing": AUTO, "affinity": affinity}
        s = size_pools(node_pools(spec), spec, nodes)[0]
        return s.node, s.nodes

    # Terms are ORed, a term's requirements ANDed; the smallest allowed node decides.
    assert picked(required({"matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["kafka"]},
        {"key": "gen", "operator": "Gt", "values": ["4"]}]})) == ("big-a", 2)
    assert picked(required(
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["small"]}]},
    )) == ("small", 2)
    assert picked(required({"matchExpressions": [
        {"key": "zone", "operator": "NotIn", "values": ["a"]}]})) == ("unlabelled", 2)
    assert picked(required({"matchExpressions": [
        {"key": "tier", "operator": "DoesNotExist"}]})) == ("unlabelled", 1)
    assert picked(required({"matchExpressions": [
        {"key": "gen", "operator": "Lt", "values": ["4"]},
        {"key": "zone", "operator": "Exists"}]})) == ("small", 1)
    # A label that is no integer never satisfies Gt/Lt; an empty term matches nothing.
    assert picked(required({"matchExpressions": [
        {"key": "zone", "operator": "Gt", "values": ["0"]}]})) == (None, 0)
    assert picked(required({})) == (None, 0)
    # Preferred affinity orders the allowed nodes; it rules none out.
    preferred = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["b"]}]}}]}}
    assert picked(preferred) == ("unlabelled", 4)
    # Pod (anti-)affinity is about other pods, not nodes: no node is ruled out by it.
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname",
         "labelSelector": {"matchLabels": {"app": "kafkube"}}}]}}
    assert picked(anti) == ("unlabelled", 4)


def test_a_pool_no_node_is_allowed_by_its_affinity_for_says_so() -> None:
    spec = {"replicas": 1, "autoSizing": AUTO,
            "affinity": required({"matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["kafka"]}]})}
    [sizing] = size_pools(node_pools(spec), spec, [node("w1", "16", "64Gi")])
    assert sizing.resources is None
    assert sizing.message.startswith("no node satisfies pool default's required node "
                                     "affinity and allows its tolerations"), sizing.message


@pytest.mark.parametrize("affinity", [
    required(None),  # a null term: Kubernetes accepts it, and it matches no node
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"nodeSelectorTerms": []}]}},  # podAffinity's list shape, refused by the API server
    {"nodeAffinity": "zone-a"},
    required({"matchExpressions": [None, "zone"]}),
    required({"matchExpressions": {"key": "zone"}}),
    required({"matchExpressions": [{"key": "zone", "operator": "In", "values": "a"}]}),
    required({"matchFields": [{"key": "metadata.labels", "operator": "Exists"}]}),
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
])
def test_an_affinity_the_scheduler_could_not_satisfy_sizes_from_no_node(affinity: dict) -> None:
    spec = {"replicas": 1, "autoSizing": AUTO, "affinity": affinity}
    [sizing] = size_pools(node_pools(spec), spec, [node("w1", "16", "64Gi", zone="a")])
    assert sizing.resources is None and "no node" in sizing.message


@pytest.mark.parametrize(("label", "counted"), [
    ("6", True), ("+6", True), ("5", False), ("-7", False), ("1_000", False), (" 6", False),
    ("99999999999999999999", False), ("0x10", False)])
def test_gt_reads_a_label_as_kubernetes_parses_an_int64(label: str, counted: bool) -> None:
    spec = {"replicas": 1, "autoSizing": AUTO, "affinity": required({"matchExpressions": [
        {"key": "gen", "operator": "Gt", "values": ["5"]}]})}
    [sizing] = size_pools(node_pools(spec), spec, [node("w1", "16", "64Gi", gen=label)])
    assert (sizing.resources is not None) == counted
