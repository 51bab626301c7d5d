"""Long-lived objects are frozen out of the collector's walk once partitions settle, and
unfrozen first, so the replicas dropped since are collected."""

from __future__ import annotations

import gc
import weakref

import pytest

from broker.common.heap import LongLivedObjects


class Replica:
    """Stands in for a partition's objects: a reference cycle, as a Partition and its Log
    hold (refcounting alone never frees it)."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_freezes_only_after_a_change_has_settled(unfrozen) -> None:
    changes = [0]
    heap = LongLivedObjects(lambda: changes[0])
    assert not heap.step()  # nothing changed
    replicas = [Replica() for _ in range(1000)]
    changes[0] = 1000
    assert not heap.step()  # still changing (a CreateTopics opens over many passes)
    assert gc.get_freeze_count() == 0
    assert heap.step()  # unchanged for a poll: frozen
    assert gc.get_freeze_count() >= len(replicas)
    assert not heap.step()  # and not again until the next change
    assert heap.refreezes == 1


def test_dropped_replicas_are_collected_at_the_next_freeze(unfrozen) -> None:
    changes = [0]
    heap = LongLivedObjects(lambda: changes[0])
    replica = Replica()
    gone = weakref.ref(replica)
    changes[0] = 1
    heap.step()
    assert heap.step()
    del replica  # the topic is deleted: a frozen cycle, until unfrozen
    gc.collect()
    assert gone() is not None
    changes[0] = 2
    heap.step()
    assert heap.step()
    assert gone() is None
