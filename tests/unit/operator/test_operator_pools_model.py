"""Node pools (kafkube_operator.model.pools) and scaling across them
(model/scale.pool_scale_decision): a pool added gets its brokers at once and replicas spread
onto them; the default pool scaled to 0 in the same change keeps its brokers until they are
drained onto the others (the new pool's included) and cordoned; ids stay per pool."""

from __future__ import annotations

from kafkube_operator.model.pools import (
    NODE_ID_OFFSET,
    node_pools,
    pod_node_id,
    pool_of,
    wanted_ids,
)
from kafkube_operator.model.scale import DRAINING, SCALING_UP, pool_scale_decision
from tests.support.layouts import placement
from tests.unit.operator.test_operator_scale_model import apply, cluster_image, cordoned, load

SPEC = {"replicas": 3, "storage": {"size": "10Gi"}, "resources": {"requests": {"cpu": "1"}}}
BIG = {"name": "big", "replicas": 3, "firstNodeId": 100,
       "storage": {"size": "100Gi", "class": "ssd"}, "nodeSelector": {"disk": "ssd"},
       "tolerations": [{"key": "dedicated", "operator": "Exists"}]}


def rack(b: int) -> str:
    return "abc"[b % 3]


def live(*ids: int) -> dict[int, str]:
    return {b: rack(b) for b in ids}


def test_the_default_pool_is_the_clusters_own_brokers_and_pools_take_their_own_fields() -> None:
    default, big = node_pools({**SPEC, "pools": [BIG]})
    assert (default.name, default.replicas, list(default.ids()), default.statefulset("k")) == (
        "", 3, [0, 1, 2], "k")
    assert (big.statefulset("k"), list(big.ids()), big.label()) == ("k-big", [100, 101, 102],
                                                                     "big")
    assert big.spec["storage"] == BIG["storage"] and big.spec["nodeSelector"] == {"disk": "ssd"}
    assert big.spec["resources"] == SPEC["resources"]  # not its own: the cluster's
    assert big.spec["replicas"] == 3 and default.spec is not big.spec
    assert wanted_ids(node_pools({**SPEC, "pools": [BIG]})) == {0, 1, 2, 100, 101, 102}
    pools = node_pools({**SPEC, "pools": [BIG]})
    assert pool_of(pools, 2).name == "" and pool_of(pools, 7).name == ""  # scaled-down ids
    assert pool_of(pools, 101).name == "big"


def test_a_pods_node_id_is_its_pools_first_id_plus_its_ordinal() -> None:
    def pod(name: str, offset: str | None) -> dict:
        return {"metadata": {"name": name, "annotations": {NODE_ID_OFFSET: offset}
                             if offset is not None else {}}}

    assert pod_node_id(pod("k-2", None)) == 2  # the default pool, or a pod from before pools
    assert pod_node_id(pod("k-big-1", "100")) == 101
    assert pod_node_id(pod("k-big", "100")) is None


def test_moving_every_broker_to_a_new_pool_grows_it_first_and_drains_the_old_one() -> None:
    """The default pool 3 → 0 and pool big 0 → 3 in one edit: big's three brokers start at
    once, and only once they registered do the old brokers' replicas move, onto them; the
    old StatefulSet shrinks once they are empty and cordoned."""
    pools = node_pools({**SPEC, "replicas": 0, "pools": [BIG]})
    image = cluster_image({"t": placement("t", live(0, 1, 2), 6, 3)})
    current = {"": 3}
    waiting = pool_scale_decision(pools, current, image, live(0, 1, 2), None)
    assert waiting.sizes == {"": 3, "big": 3} and waiting.phase == SCALING_UP
    assert "waiting for brokers [100, 101, 102]" in (waiting.waiting or "")
    current = {"": 3, "big": 3}
    everyone = live(0, 1, 2, 100, 101, 102)
    draining = pool_scale_decision(pools, current, image, everyone, SCALING_UP)
    assert draining.phase == DRAINING and draining.cordon == {0, 1, 2}
    assert draining.sizes == {"": 3, "big": 3}
    moved = apply(image, draining.moves)
    assert set(load(moved)) == {100, 101, 102}
    for state in moved.topics["t"].assignments:  # one replica per rack still
        assert len({rack(b) for b in state.replicas}) == 3
    not_cordoned = pool_scale_decision(pools, current, moved, everyone, DRAINING)
    assert not_cordoned.sizes == {"": 3, "big": 3} and "cordoning" in not_cordoned.waiting
    shrink = pool_scale_decision(pools, current, cordoned(moved, 0, 1, 2), everyone, DRAINING)
    assert shrink.sizes == {"": 0, "big": 3} and shrink.moves == {}
    assert shrink.statefulset_replicas == 3


def test_a_pool_added_beside_the_default_one_takes_its_share() -> None:
    pools = node_pools({**SPEC, "pools": [BIG]})
    image = cluster_image({"t": placement("t", live(0, 1, 2), 12, 3)})
    spreading = pool_scale_decision(pools, {"": 3, "big": 3}, image,
                                    live(0, 1, 2, 100, 101, 102), SCALING_UP)
    assert spreading.phase == SCALING_UP and spreading.sizes == {"": 3, "big": 3}
    counts = load(apply(image, spreading.moves))
    assert {counts[b] for b in (0, 1, 2, 100, 101, 102)} == {6}


def test_emptying_the_pools_below_a_replication_factor_is_refused() -> None:
    pools = node_pools({**SPEC, "replicas": 0, "pools": [{**BIG, "replicas": 2}]})
    image = cluster_image({"t": placement("t", live(0, 1, 2), 3, 3)})
    refused = pool_scale_decision(pools, {"": 3, "big": 2}, image,
                                  live(0, 1, 2, 100, 101), None)
    assert refused.sizes == {"": 3, "big": 2} and refused.moves == {}
    assert refused.refused == (
        "spec.replicas 0 and pool big 2 leave 2 brokers, below the replication factor 3 of "
        "topic t: keeping 5 brokers; lower the topics' replication factor first")


def test_a_pool_never_takes_ids_another_pools_brokers_still_hold() -> None:
    """The reviewer's case: the default pool 5 → 2 and a pool p from id 2 in one edit. p
    waits at 0 while brokers 2-4 of the default pool are drained (onto 0 and 1 alone: never
    onto brokers of p carrying the same ids), and gets its brokers once they are gone."""
    pools = node_pools({**SPEC, "replicas": 2,
                        "pools": [{"name": "p", "replicas": 2, "firstNodeId": 2}]})
    image = cluster_image({"t": placement("t", live(0, 1, 2, 3, 4), 5, 2)})
    draining = pool_scale_decision(pools, {"": 5}, image, live(0, 1, 2, 3, 4), None)
    assert draining.sizes == {"": 5, "p": 0} and draining.phase == DRAINING
    assert draining.cordon == {2, 3, 4}
    assert set(load(apply(image, draining.moves))) <= {0, 1}
    drained = cordoned(apply(image, draining.moves), 2, 3, 4)
    shrink = pool_scale_decision(pools, {"": 5, "p": 0}, drained, live(0, 1, 2, 3, 4),
                                 DRAINING)
    assert shrink.sizes == {"": 2, "p": 0}
    assert "pool p waits for node ids 2-3" in (shrink.waiting or "")
    grow = pool_scale_decision(pools, {"": 2, "p": 0}, drained, live(0, 1), None)
    assert grow.sizes == {"": 2, "p": 2} and grow.phase == SCALING_UP
    assert "waiting for brokers [2, 3] to register" in (grow.waiting or "")


def test_a_pool_added_back_with_other_ids_keeps_those_its_statefulset_has() -> None:
    """The reviewer's case: pool big removed (at 0) and added back with firstNodeId 50 while
    its StatefulSet, made with 100, is still there: its brokers' volumes say 100-102, so
    100 it stays, with a Warning, and the StatefulSet is rendered with it."""
    from kafkube_contract.image import ImageView
    from kafkube_operator.model.cluster import ClusterRef, desired_cluster, stateful_set
    from kafkube_operator.reconcile.snapshot import ClusterSnapshot
    from kafkube_operator.reconcile.views import TrustedImage

    ref = ClusterRef("k", "ns", "u")
    made = stateful_set(ref, {**SPEC, "pools": [BIG]}, "", pool=node_pools(
        {**SPEC, "pools": [BIG]})[1])
    spec = {**SPEC, "pools": [{**BIG, "firstNodeId": 50}]}
    snap = ClusterSnapshot(ref, None, (), "", TrustedImage(ImageView(), "id"), {}, None,
                           statefulsets={"big": made})
    assert [(p.name, p.first_id) for p in snap.pools(spec)] == [("", 0), ("big", 100)]
    assert snap.moved_ids(spec) == [
        "pool big keeps node ids from 100, which its brokers' volumes were made with, not "
        "spec.pools' firstNodeId 50 (it was removed and added back before its StatefulSet "
        "was gone)"]
    resource = {"metadata": {"name": "k", "namespace": "ns", "uid": "u"}, "spec": spec}
    big = desired_cluster(resource, first_ids={"big": 100}).by_kind("StatefulSet")[1]
    assert big["spec"]["template"]["metadata"]["annotations"][NODE_ID_OFFSET] == "100"


def test_a_pools_statefulset_being_made_again_counts_as_gone() -> None:
    """A storage change of pool big recreates its StatefulSet: the next pass must apply at
    once (it makes it again), not wait for the periodic apply."""
    from kafkube_contract.image import ImageView
    from kafkube_operator.model.cluster import ClusterRef
    from kafkube_operator.reconcile.snapshot import ClusterSnapshot
    from kafkube_operator.reconcile.views import TrustedImage

    spec = {**SPEC, "pools": [BIG]}
    sts = {"metadata": {"name": "k"}, "spec": {"replicas": 3}}
    deleting = {"metadata": {"name": "k-big", "deletionTimestamp": "now"},
                "spec": {"replicas": 3}}

    def snap(statefulsets: dict) -> ClusterSnapshot:
        return ClusterSnapshot(ClusterRef("k", "ns", "u"), sts, (), "",
                               TrustedImage(ImageView(), "id"), {}, None,
                               statefulsets=statefulsets)

    assert not snap({"": sts, "big": {**deleting, "metadata": {"name": "k-big"}}}
                    ).statefulset_gone(spec)
    assert snap({"": sts, "big": deleting}).statefulset_gone(spec)
    assert snap({"": sts}).statefulset_gone(spec)  # not made yet
    assert not snap({"": sts}).statefulset_gone({**spec, "pools": [{**BIG, "replicas": 0}]})
