"""JBOD volumes of a KafkaCluster (kafkube_operator.model.storage): spec.storage stays
volume 0 as it always was (same claim, mount and log dir, so a cluster made before keeps its
data), spec.storage.volumes adds claims and log dirs; the claim templates of a running
StatefulSet may gain volumes and grow, never lose, shrink or change class."""

from __future__ import annotations

from kafkube_operator.model.cluster import ClusterRef, stateful_set
from kafkube_operator.model.storage import Volume, claim_change, log_dirs, volumes

REF = ClusterRef("prod", "kafka", "u")


def _spec(**storage: object) -> dict:
    return {"replicas": 3, "storage": {"size": "10Gi", **storage}}


def test_spec_storage_alone_is_the_one_volume_it_always_was() -> None:
    assert volumes(_spec()) == [Volume(0, "10Gi")]
    assert log_dirs(_spec()) == "/var/lib/kafkube/data"
    sts = stateful_set(REF, _spec(), "")
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["data"]


def test_extra_volumes_are_claims_mounts_and_log_dirs_in_id_order() -> None:
    spec = _spec(**{"class": "std", "volumes": [{"id": 3, "size": "5Gi", "class": "ssd"},
                                               {"id": 1, "size": "20Gi"}]})
    assert volumes(spec) == [Volume(0, "10Gi", "std"), Volume(1, "20Gi", "std"),
                             Volume(3, "5Gi", "ssd")]
    assert log_dirs(spec) == ("/var/lib/kafkube/data,/var/lib/kafkube-1/data,"
                              "/var/lib/kafkube-3/data")
    sts = stateful_set(REF, spec, "")
    mounts = sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {m["name"]: m["mountPath"] for m in mounts if m["name"].startswith("data")} == {
        "data": "/var/lib/kafkube", "data-1": "/var/lib/kafkube-1", "data-3": "/var/lib/kafkube-3"}


def test_a_volume_added_recreates_the_statefulset_and_one_removed_is_refused() -> None:
    one = stateful_set(REF, _spec(), "")
    two = stateful_set(REF, _spec(volumes=[{"id": 1, "size": "20Gi"}]), "")
    added = claim_change(one, two)
    assert added is not None and added.added == ("data-1",) and not added.grow
    removed = claim_change(two, one)
    assert removed is not None and "cannot be removed" in (removed.refused or "")
    assert claim_change(two, two) is None


def test_each_volume_grows_and_never_shrinks_or_changes_class() -> None:
    live = stateful_set(REF, _spec(volumes=[{"id": 1, "size": "20Gi"}]), "")
    grown = claim_change(live, stateful_set(REF, _spec(volumes=[{"id": 1, "size": "30Gi"}]), ""))
    assert grown is not None and grown.grow == (("data-1", "30Gi"),) and grown.size is None
    assert grown.described() == "storage.volumes[id=1].size 30Gi"  # the spec's words
    both = claim_change(live, stateful_set(REF, {"replicas": 3, "storage": {
        "size": "11Gi", "volumes": [{"id": 1, "size": "30Gi"}]}}, ""))
    assert both is not None and both.described() == \
        "storage.size 11Gi, storage.volumes[id=1].size 30Gi"
    shrunk = claim_change(live, stateful_set(REF, _spec(volumes=[{"id": 1, "size": "1Gi"}]), ""))
    assert shrunk is not None and "cannot shrink" in (shrunk.refused or "")
    moved = claim_change(live, stateful_set(
        REF, _spec(volumes=[{"id": 1, "size": "20Gi", "class": "ssd"}]), ""))
    assert moved is not None and "cannot change class" in (moved.refused or "")
