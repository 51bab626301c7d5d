"""Apply a Topic's plan through its cluster's Kafka API, read its state back from the cluster
image, and keep `kubectl get topics` in step with the topics that exist in Kafka.

A changed replication factor is a throttled reassignment (model/replication.py), started when
no other move runs in the cluster (a scale, another topic's change) and followed in the
Topic's status; its throttle goes once the topic's partitions are all moved."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from kafkube_contract.image import DEFAULT_BROKER, ImageFormatError, ImageView, TopicMetadata
from kafkube_contract.properties import parse_properties
from kafkube_operator.cluster_view import ClusterView, MetadataMissing
from kafkube_operator.kafka import AdminClients, KafkaAdmin, KafkaRefused
from kafkube_operator.kube import ApplyError, Kube
from kafkube_operator.model.cluster import API_VERSION, ClusterRef
from kafkube_operator.model.replication import replica_load
from kafkube_operator.model.scale import (
    THROTTLED_REPLICAS,
    in_progress,
    throttle_rate,
    throttled_replicas,
)
from kafkube_operator.model.topic import (
    Placement,
    TopicSpec,
    deleted_through_kafka,
    mirror_name,
    mirrored_topic,
    owner_of,
    topic_plan,
    topic_status,
)
from kafkube_operator.reconcile.rebalance import rebalance_running
from kafkube_operator.reconcile.views import (
    ClusterViews,
    Events,
    cluster_admin,
    trusted_image,
    utc_now,
)

log = logging.getLogger(__name__)
# How long a change waits to show in the cluster image before the pass ends (the next pass
# picks it up anyway; waiting avoids a second CreateTopics for a topic made a moment ago),
# and how often it looks meanwhile: each look is a GET of the image, so at most ten.
IMAGE_WAIT_S = 5.0
IMAGE_POLL_S = 0.5


def _read_image(view: ClusterView, last: ImageView) -> tuple[ImageView, bool]:
    """The image now, and True; or ``last`` and False when it cannot be read.

    ``last`` is an image the pass read before. The ConfigMap can be damaged, deleted or
    replaced by a newer format meanwhile (a user's edit, a broker upgraded): the pass then
    ends with what it read, and the next pass's trust check turns what happened into a
    Warning; an exception here would only make kopf retry the pass (CreateTopics and all)."""
    try:
        return view.read_image(), True
    except (ImageFormatError, MetadataMissing) as e:
        log.warning("%s: the cluster image became unreadable during a topic pass: %s",
                    view.where, e)
        return last, False


def _wait_image(view: ClusterView, done: Callable[[ImageView], bool],
                last: ImageView) -> ImageView:
    """The image once ``done`` holds for it, or the last one read after IMAGE_WAIT_S (or
    when it turns unreadable)."""
    deadline = time.monotonic() + IMAGE_WAIT_S
    image, readable = _read_image(view, last)
    while readable and not done(image) and time.monotonic() < deadline:
        time.sleep(IMAGE_POLL_S)
        image, readable = _read_image(view, image)
    return image


def _cluster(kube: Kube, namespace: str, name: str) -> dict | None:
    return kube.get(API_VERSION, "KafkaCluster", name, namespace)


def reconcile_topic(kube: Kube, views: ClusterViews, admins: AdminClients, resource: Mapping,
                    events: Events) -> dict:
    """One pass: the plan from spec and image, carried out; the status to write."""
    spec = TopicSpec.of(resource)
    namespace = resource["metadata"]["namespace"]
    generation = resource["metadata"].get("generation", 0)
    previous = (resource.get("status") or {}).get("conditions") or []
    cluster = _cluster(kube, namespace, spec.cluster)
    if cluster is None:
        return topic_status(spec, None, generation, [("ClusterNotFound", (
            f"no KafkaCluster {spec.cluster} in namespace {namespace}"))], previous, utc_now())
    owner = owner_of(resource, kube.list(API_VERSION, "Topic", namespace))
    if owner is not None:  # two resources would fight over one topic's configs
        return topic_status(spec, None, generation, [("DuplicateTopic", (
            f"topic {spec.name} of cluster {spec.cluster} is managed by Topic "
            f"{owner['metadata']['name']}: this one is not acted on"))], previous, utc_now())
    ref = ClusterRef.of(cluster)
    view = views.of(ref)
    trusted = trusted_image(view, cluster.get("status"), views.memory(ref))
    if trusted.problem is not None:
        # Status keeps what it showed (not Ready), and nothing is created or removed on the
        # strength of an image that is missing or another cluster's.
        status = topic_status(spec, None, generation, [
            (trusted.problem.reason, trusted.problem.message)], previous, utc_now())
        status |= {k: v for k, v in (resource.get("status") or {}).items()
                   if k in ("topicId", "partitions")}
        return status
    cordoned = trusted.image.cordoned()  # brokers being drained (KIP-1066)
    brokers = len([b for b in view.live_brokers() if b not in cordoned])
    current = trusted.image.topics.get(spec.name)
    if deleted_through_kafka(resource, current is not None):
        # Not created again: the cluster's pass would remove the resource a moment later.
        _remove_mirror(kube, resource, events)
        return dict(resource.get("status") or {})
    live = {b: r.rack for b, r in view.live_brokers().items() if b not in cordoned}
    placement = _placement(cluster, trusted.image, current, spec, live,
                           _deployed_min_isr(kube, ref))
    # A factor to change waits for a KafkaRebalance moving partitions (asked only then: one
    # LIST of them).
    if placement.busy is None and current is not None and any(
            len(s.target_replicas) != spec.replication_factor for s in current.assignments) \
            and (other := rebalance_running(kube, namespace, spec.cluster)):
        placement = replace(placement, busy=f"KafkaRebalance {other} is moving partitions")
    plan = topic_plan(spec, current, brokers, placement)
    problems = list(plan.refused)
    # A throttle left on the topic goes once nothing moves in the cluster (read from Kafka,
    # not from the last status: a pass may get a body older than the last status written).
    if current is not None and not plan.reassign and not in_progress(trusted.image) and \
            set(THROTTLED_REPLICAS) & set(current.configs):
        _unthrottle(admins, ref, view, spec.name, cluster, events)
    if not plan.empty:
        admin: KafkaAdmin | None = None
        try:
            admin = cluster_admin(admins, ref, view)
            if plan.create:
                admin.create_topic(spec.name, spec.partitions, spec.replication_factor,
                                   spec.config)
                events.info("TopicCreated", f"created topic {spec.name}: {spec.partitions} "
                            f"partition(s), replication factor {spec.replication_factor}")
            if plan.add_partitions:
                admin.add_partitions(spec.name, spec.partitions)
                events.info("PartitionsAdded", f"topic {spec.name}: {plan.add_partitions} "
                            f"partition(s) added, {spec.partitions} in all")
            if plan.set_configs or plan.delete_configs:
                admin.alter_topic_configs(spec.name, plan.set_configs, plan.delete_configs)
                changed = sorted([*plan.set_configs, *plan.delete_configs])
                events.info("ConfigChanged", f"topic {spec.name}: {', '.join(changed)} changed")
            if plan.reassign:
                rate = throttle_rate(cluster.get("spec") or {})
                admin.throttle(rate, view.live_brokers(),
                               throttled_replicas(trusted.image, plan.reassign))
                admin.reassign(plan.reassign)
                events.info("ReplicationFactorChanging", (
                    f"topic {spec.name}: {len(plan.reassign)} partition(s) moving to "
                    f"replication factor {spec.replication_factor}, throttled at {rate} B/s"))
        except KafkaRefused as e:
            problems.append(("KafkaRefused", str(e)))
            events.warning("KafkaRefused", str(e))
            if admin is not None:
                admins.drop((ref.namespace, ref.name), admin)
            current = _read_image(view, trusted.image)[0].topics.get(spec.name)
        else:
            current = _wait_image(view, lambda image: topic_plan(
                spec, image.topics.get(spec.name), brokers).empty,
                trusted.image).topics.get(spec.name)
    return topic_status(spec, current, generation, problems, previous, utc_now(),
                        plan.waiting)


def _deployed_min_isr(kube: Kube, ref: ClusterRef) -> int | None:
    """The default min.insync.replicas the brokers were given (their server.properties in
    the ConfigMap the operator wrote), None if not known."""
    config_map = kube.get("v1", "ConfigMap", ref.config_map, ref.namespace)
    text = ((config_map or {}).get("data") or {}).get("server.properties", "")
    value = parse_properties(text).get("min.insync.replicas")
    return int(value) if value and value.isdigit() else None


def _placement(cluster: Mapping, image: ImageView, current: TopicMetadata | None,
               spec: TopicSpec, live: Mapping[int, str | None],
               deployed_min_isr: int | None) -> Placement:
    """What a replication-factor change needs: the brokers that may take replicas, the
    load, the topic's effective min.insync.replicas and whether a move runs. The topic's own
    value is the larger of what it has and what its spec sets (both apply this pass);
    without one, the cluster's dynamic default, else the brokers' server.properties, else
    Kafka's 1."""
    own = [int(v) for v in ((current.configs if current is not None else {}).get(
        "min.insync.replicas"), spec.config.get("min.insync.replicas")) if v and v.isdigit()]
    cluster_default = image.broker_configs.get(DEFAULT_BROKER, {}).get("min.insync.replicas")
    if own:
        min_isr = max(own)
    elif cluster_default and cluster_default.isdigit():
        min_isr = int(cluster_default)
    else:
        min_isr = deployed_min_isr or 1
    scaling = ((cluster.get("status") or {}).get("scaling") or {}).get("phase")
    moving = in_progress(image)
    busy = f"the cluster is {scaling.lower()}" if scaling else \
        f"{moving} partition(s) of the cluster are being moved" if moving else None
    return Placement(live, replica_load(image.topics), min_isr, busy)


def _unthrottle(admins: AdminClients, ref: ClusterRef, view: ClusterView, topic: str,
                cluster: Mapping, events: Events) -> bool:
    """The topic's moves are done: its throttled-replica lists go, and the brokers' rates
    too unless the cluster is scaling (its own pass removes them then). False: not now (the
    next pass tries again)."""
    scaling = ((cluster.get("status") or {}).get("scaling") or {}).get("phase")
    admin: KafkaAdmin | None = None
    try:
        admin = cluster_admin(admins, ref, view)
        admin.throttle(None, [] if scaling else view.live_brokers(),
                       {topic: dict.fromkeys(THROTTLED_REPLICAS)})
        events.info("ReplicationFactorChanged", f"topic {topic}: moves done, replication "
                    "throttle removed")
        return True
    except KafkaRefused as e:
        events.warning("KafkaRefused", str(e))
        if admin is not None:
            admins.drop((ref.namespace, ref.name), admin)
        return False


def delete_topic(kube: Kube, views: ClusterViews, admins: AdminClients, resource: Mapping,
                 events: Events) -> bool:
    """Delete the Kafka topic; True once it is gone from the cluster image (or the cluster
    itself is gone), so the finalizer is removed only then and the topic is not mirrored
    back in the meantime."""
    spec = TopicSpec.of(resource)
    cluster = _cluster(kube, resource["metadata"]["namespace"], spec.cluster)
    if cluster is None:
        return True
    rivals = [t for t in kube.list(API_VERSION, "Topic", resource["metadata"]["namespace"])
              if t["metadata"]["name"] != resource["metadata"]["name"]
              and (t.get("spec") or {}).get("cluster") == spec.cluster
              and TopicSpec.of(t).name == spec.name]
    if rivals:  # a duplicate goes alone; the ruling one hands the topic to the next
        events.info("TopicKept", f"topic {spec.name} stays: Topic "
                    f"{rivals[0]['metadata']['name']} also stands for it")
        return True
    ref = ClusterRef.of(cluster)
    view = views.of(ref)
    trusted = trusted_image(view, cluster.get("status"), views.memory(ref))
    if trusted.problem is not None:
        events.warning(trusted.problem.reason, f"topic {spec.name} not deleted yet: "
                       + trusted.problem.message)
        return False
    current = trusted.image.topics.get(spec.name)
    if current is None:
        return True
    recorded = (resource.get("status") or {}).get("topicId")
    if recorded and current.topic_id != recorded:
        events.warning("TopicRecreated", f"topic {spec.name} was deleted and created again "
                       f"(id {recorded} -> {current.topic_id}) outside this resource: the "
                       "new topic is not deleted with it")
        return True
    admin: KafkaAdmin | None = None
    try:
        admin = cluster_admin(admins, ref, view)
        admin.delete_topic(spec.name, recorded)
    except KafkaRefused as e:
        events.warning("KafkaRefused", str(e))
        if admin is not None:
            admins.drop((ref.namespace, ref.name), admin)
        return False
    events.info("TopicDeleted", f"deleted topic {spec.name}")
    return spec.name not in _wait_image(view, lambda image: spec.name not in image.topics,
                                        trusted.image).topics


def mirror_cluster_topics(kube: Kube, views: ClusterViews, resource: Mapping,
                          events: Events) -> None:
    """The topic mirroring pass of one KafkaCluster (its own timer, handlers.py): only on a
    trusted image, since on a missing or older one every mirrored Topic would look deleted
    through Kafka."""
    ref = ClusterRef.of(resource)
    trusted = trusted_image(views.of(ref), resource.get("status"), views.memory(ref))
    if trusted.problem is None:
        mirror_topics(kube, ref, trusted.image, events)


def mirror_topics(kube: Kube, ref: ClusterRef, image: ImageView, events: Events) -> None:
    """Topics made through the Kafka API get a Topic resource; a resource the operator made
    that way goes when its topic was deleted through Kafka. Internal topics (``__``) are
    the brokers' own and are left out, as Strimzi does."""
    everyone = kube.list(API_VERSION, "Topic", ref.namespace)
    taken = {t["metadata"]["name"]: ((t.get("spec") or {}).get("cluster"), TopicSpec.of(t).name)
             for t in everyone}
    resources = [t for t in everyone if (t.get("spec") or {}).get("cluster") == ref.name]
    known = {TopicSpec.of(t).name for t in resources}
    for name, topic in sorted(image.topics.items()):
        if name.startswith("__") or name in known:
            continue
        mirror = mirrored_topic(ref.name, ref.namespace, topic,
                                mirror_name(ref.name, name, taken))
        try:  # one topic that cannot be mirrored never stops the cluster's pass
            kube.apply(mirror)
        except ApplyError as e:
            events.warning("TopicNotMirrored", f"topic {name}: {e}")
            continue
        taken[mirror["metadata"]["name"]] = (ref.name, name)
        events.info("TopicFound", f"topic {name}, created through the Kafka API, is now "
                    f"Topic {mirror['metadata']['name']}")
    for resource in resources:
        if deleted_through_kafka(resource, TopicSpec.of(resource).name in image.topics):
            _remove_mirror(kube, resource, events)


def _remove_mirror(kube: Kube, resource: Mapping, events: Events) -> None:
    meta = resource["metadata"]
    kube.delete(API_VERSION, "Topic", meta["name"], meta["namespace"])
    events.info("TopicGone", f"topic {TopicSpec.of(resource).name} was deleted through the "
                f"Kafka API: Topic {meta['name']} removed")
