"""The admin APIs' writes of topics to the cluster image: created, grown, deleted.

Kafka's brokers forward these requests to the controller, whose ReplicationControlManager
appends their records; here any broker writes them by compare-and-set (the rules they follow
are broker/controller/topic_changes.py's, checked by the handlers first). A base of the
replica manager, which every caller holds, so it stays about the replicas this broker hosts.
"""

from __future__ import annotations

import dataclasses
import random
import uuid

from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ClusterMetadata
from broker.controller.placement import PlacementError, assign_replicas
from broker.controller.topic_changes import NewTopic
from kafkube_contract.image import PartitionState, TopicMetadata


class TopicExists(Exception):
    """Another broker created the topic first."""


class InvalidPartitions(Exception):
    def __init__(self, current: int, requested: int) -> None:
        super().__init__(f"Topic currently has {current} partitions, which is higher than "
                         f"the requested {requested}.")


class TopicWrites:
    """Topics written to the image; needs only ``metadata``."""

    metadata: ClusterMetadata

    def placement_brokers(self, image: ClusterImage | None = None) -> dict[int, str | None]:
        """The brokers new replicas may go to, id -> rack: live and not cordoned (KIP-1066's
        usable brokers) in ``image``, this broker's applied one by default. Placement reads
        the image it writes over: a cordon written through another broker a moment ago may
        not have reached ours yet."""
        cordoned = (image or self.metadata.image).cordoned()
        return {b.node_id: b.rack for b in self.metadata.live_brokers().values()
                if b.node_id not in cordoned}

    async def create_topics(self, topics: list[NewTopic]) -> list[TopicMetadata | Exception]:
        """Create the topics in one image write, as Kafka's controller appends one
        CreateTopics request's records as one batch (a write per topic rewrote the whole
        image per topic: 1,000 topics held the event loop 8 s and lapsed the lease). Each
        gets its own outcome, in order: its metadata, ``TopicExists`` or ``PlacementError``.
        Replicas are placed over the live brokers unless a topic's assignments fix them;
        the first replica leads and every replica starts in the ISR, all logs being empty.
        Raises for the whole batch what the write raises (``ClusterImageTooLarge``...)."""
        ids = [str(uuid.uuid4()) for _ in topics]
        outcomes: list[TopicMetadata | Exception] = []

        def add(image: ClusterImage) -> ClusterImage | None:
            outcomes.clear()
            brokers = self.placement_brokers(image)
            for new, topic_id in zip(topics, ids, strict=True):
                try:
                    if new.name in image.topics:
                        raise TopicExists(new.name)
                    layout = new.assignments if new.assignments is not None else \
                        assign_replicas(brokers, new.partitions, new.replication_factor,
                                        random.Random())
                except (TopicExists, PlacementError) as e:
                    outcomes.append(e)
                    continue
                states = tuple(PartitionState(tuple(r), tuple(r), r[0]) for r in layout)
                outcomes.append(TopicMetadata(new.name, topic_id, dict(new.configs), states))
            added = [o for o in outcomes if isinstance(o, TopicMetadata)]
            return image.with_topics(added) if added else None

        await self.metadata.update(add)
        return list(outcomes)

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str],
                           replication_factor: int = 1,
                           assignments: list[tuple[int, ...]] | None = None) -> TopicMetadata:
        """One topic (``create_topics``); raises its refusal."""
        [outcome] = await self.create_topics(
            [NewTopic(name, partitions, replication_factor, configs, assignments)])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def create_partitions(self, name: str, total: int,
                          assignments: list[tuple[int, ...]] | None = None) -> None:
        def grow(image: ClusterImage) -> ClusterImage:
            topic = image.topics[name]
            if topic.partitions >= total:
                raise InvalidPartitions(topic.partitions, total)
            layout = assignments
            if layout is None:
                # The replicas it will keep: during a reassignment ``replicas`` also holds
                # those leaving (KIP-455), as Kafka takes the target replicas' count.
                rf = len(topic.assignments[0].target_replicas) if topic.assignments else 1
                layout = assign_replicas(self.placement_brokers(image), total - topic.partitions,
                                         rf, random.Random(), start_partition=topic.partitions)
            added = tuple(PartitionState(tuple(r), tuple(r), r[0]) for r in layout)
            return image.with_topic(
                dataclasses.replace(topic, assignments=topic.assignments + added)
            )

        await self.metadata.update(grow)

    async def delete_topics(self, topics: list[tuple[str, str | None]]) -> None:
        """Forget the topics, by name and id, in one write; their files go after
        file.delete.delay.ms, as in Kafka. With an id, only that topic: one of the same name
        created since stays."""

        def remove(image: ClusterImage) -> ClusterImage | None:
            gone = [name for name, topic_id in topics if name in image.topics
                    and topic_id in (None, image.topics[name].topic_id)]
            return image.without_topics(gone) if gone else None

        await self.metadata.update(remove)

    async def delete_topic(self, name: str, topic_id: str | None = None) -> None:
        await self.delete_topics([(name, topic_id)])
