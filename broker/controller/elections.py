"""Leader election, fencing and reassignment steps: pure functions from image to image.

The rules are Kafka's (ReplicationControlManager and PartitionChangeBuilder in KRaft):

* a fenced (dead) broker leaves every ISR, except that the last ISR member stays listed so
  it alone can come back as leader: the partition goes offline (leader -1) rather than
  electing a replica that may miss acknowledged writes;
* a new leader is the first replica, in replica order, that is live and in the ISR; only
  with ``unclean.leader.election.enable`` may an out-of-sync live replica be chosen;
* every leadership change bumps the leader epoch, which fences the old leader's requests;
* a reassignment (KIP-455) first adds the target replicas, then, once all of them are in
  the ISR, drops the ones leaving, moving leadership if the leader is among them;
* a replica on a broker's offline log dir (KIP-112, KIP-858) counts as a replica of a dead
  broker for its partition alone: ``live_for`` takes it out of the live set there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field, replace

from broker.cluster.image import ClusterImage
from kafkube_contract.image import NO_LEADER, PartitionState
from kafkube_contract.registration import BrokerRegistration, replica_key


def offline_replicas(brokers: Mapping[int, BrokerRegistration]) -> dict[str, frozenset[int]]:
    """Replica key -> the live brokers whose registration says that replica sits on an
    offline log dir."""
    found: dict[str, set[int]] = {}
    for node, registration in brokers.items():
        for key in registration.offline_replicas:
            found.setdefault(key, set()).add(node)
    return {key: frozenset(nodes) for key, nodes in found.items()}


def live_for(live: frozenset[int], offline: Mapping[str, frozenset[int]], topic_id: str,
             index: int) -> frozenset[int]:
    """The brokers that can serve this partition: live, and its replica's dir not offline."""
    if not offline:
        return live
    gone = offline.get(replica_key(topic_id, index))
    return live - gone if gone else live


def choose_leader(
    state: PartitionState, live: Set[int], unclean: bool = False,
    candidates: tuple[int, ...] | None = None,
) -> int:
    """The replica to lead ``state`` next, or NO_LEADER."""
    replicas = candidates if candidates is not None else state.replicas
    for r in replicas:
        if r in live and r in state.isr:
            return r
    if unclean:
        for r in replicas:
            if r in live:
                return r
    return NO_LEADER


def fence_and_elect(state: PartitionState, live: Set[int], unclean: bool) -> PartitionState:
    """``state`` with dead brokers fenced and a live leader elected where one may be."""
    isr = tuple(r for r in state.isr if r in live)
    leader_alive = state.leader != NO_LEADER and state.leader in live
    if leader_alive:
        return state if isr == state.isr else state.with_isr(isr)
    leader = choose_leader(replace(state, isr=isr), live)
    if leader != NO_LEADER:
        return state.with_leader(leader, isr)
    if unclean:
        leader = choose_leader(state, live, unclean=True)
        if leader != NO_LEADER:
            return state.with_leader(leader, (leader,))
    # Offline: no ISR member is live. Keep the last one on record (the dead leader, when it
    # was in the ISR): it holds every acknowledged write, so only it may lead again.
    last = (state.leader,) if state.leader in state.isr else state.isr[-1:]
    if state.leader == NO_LEADER and last == state.isr:
        return state
    return state.with_leader(NO_LEADER, last)


def step_reassignment(state: PartitionState, live: Set[int]) -> PartitionState:
    """Finish a reassignment once every added replica is in the ISR (KIP-455), unless no
    in-sync replica would remain."""
    if not state.adding and not state.removing:
        return state
    if any(r not in state.isr for r in state.adding):
        return state
    target = state.target_replicas
    isr = tuple(r for r in state.isr if r in target)
    if not isr:
        # Every in-sync replica is among those leaving: finishing would leave no replica
        # with the acknowledged records (Kafka's controller does not complete it either).
        return state
    done = replace(state, replicas=target, isr=isr, adding=(), removing=(),
                   partition_epoch=state.partition_epoch + 1)
    if state.leader in target:
        return done
    leader = choose_leader(done, live)
    return done.with_leader(leader, isr)


def start_reassignment(state: PartitionState, target: tuple[int, ...]) -> PartitionState:
    """Begin moving ``state`` to ``target``: the union replicates, the leader stays."""
    current = state.target_replicas if (state.adding or state.removing) else state.replicas
    if state.adding or state.removing:
        state = cancel_reassignment(state, frozenset())
        current = state.replicas
    adding = tuple(r for r in target if r not in current)
    removing = tuple(r for r in current if r not in target)
    if not adding and not removing and target == current:
        return state
    return replace(state, replicas=target + removing, adding=adding, removing=removing,
                   partition_epoch=state.partition_epoch + 1)


def cancel_reassignment(state: PartitionState, live: Set[int]) -> PartitionState:
    """Go back to the replicas before the reassignment."""
    if not state.adding and not state.removing:
        return state
    original = tuple(r for r in state.replicas if r not in state.adding)
    isr = tuple(r for r in state.isr if r in original) or state.isr[:1]
    undone = replace(state, replicas=original, isr=isr, adding=(), removing=(),
                     partition_epoch=state.partition_epoch + 1)
    if state.leader in original:
        return undone
    return undone.with_leader(choose_leader(undone, live), isr)


def map_partitions(
    image: ClusterImage, change: Callable[[str, PartitionState], PartitionState]
) -> ClusterImage | None:
    """Apply ``change`` (given the topic name) to every partition; None if nothing changed."""
    return map_indexed(image, lambda topic, _, state: change(topic, state))


def map_indexed(
    image: ClusterImage, change: Callable[[str, int, PartitionState], PartitionState]
) -> ClusterImage | None:
    """``map_partitions`` for changes that depend on the partition index too."""
    out = image
    changed = False
    for name, topic in image.topics.items():
        for index, state in enumerate(topic.assignments):
            new = change(name, index, state)
            if new is not state and new != state:  # most changes return the state itself
                out = out.with_partition(name, index, new)
                changed = True
    return out if changed else None


@dataclass(frozen=True, slots=True)
class Handover:
    """What a broker in controlled shutdown has itself seen of the replicas around it.

    A live lease only says a broker renewed it within the session timeout: a broker killed a
    moment ago still holds one. So a broker stepping down hands leadership only to followers
    that fetched from it after the shutdown began, at or past its high watermark (alive, and
    holding every acknowledged record), and leaves the ISR of a partition only if its fetcher
    heard from that partition's leader meanwhile: otherwise it may be the last live holder of
    what the leader acknowledged.
    """

    successors: Mapping[tuple[str, int], frozenset[int]] = field(default_factory=dict)
    leaders_heard: frozenset[int] = frozenset()


def without_broker(state: PartitionState, node: int, live: Set[int],
                   successors: Set[int] | None = None,
                   leader_heard: bool = True) -> PartitionState:
    """``state`` with ``node`` out of leadership and the ISR, where another replica can take
    over: a controlled shutdown, or a restarted broker whose log may be behind. The last
    ISR member stays leader (or on record), as nobody else holds all its writes.

    ``successors`` limits who may lead next (see ``Handover``); with ``leader_heard`` False
    ``node`` keeps its ISR place under a leader nobody has heard from.
    """
    isr = tuple(r for r in state.isr if r != node)
    if state.leader == node:
        candidates = set(live) - {node}
        if successors is not None:
            candidates &= set(successors)
        leader = choose_leader(replace(state, isr=isr), candidates)
        return state if leader == NO_LEADER else state.with_leader(leader, isr)
    if state.leader != NO_LEADER and node in state.isr and leader_heard:
        return state.with_isr(isr)
    return state


def step_down(image: ClusterImage, node: int, live: Set[int],
              handover: Handover | None = None) -> ClusterImage | None:
    """``without_broker`` over the whole image; ``handover`` as seen by ``node`` itself."""
    if handover is None:
        return map_partitions(image, lambda _, s: without_broker(s, node, live))
    return map_indexed(image, lambda topic, index, s: without_broker(
        s, node, live, handover.successors.get((topic, index), frozenset()),
        s.leader in handover.leaders_heard,
    ))


def elect_preferred(state: PartitionState) -> PartitionState:
    """The partition led by its preferred replica, with the leader epoch bumped.

    Raises ``ValueError`` when the preferred replica is not in the ISR (electing it would
    lose acknowledged writes). Callers check ``state.leader == state.preferred_leader``
    beforehand when they need ElectLeaders' ELECTION_NOT_NEEDED: this function always bumps.
    """
    preferred = state.preferred_leader
    if preferred not in state.isr:
        raise ValueError(f"preferred replica {preferred} is not in the ISR {list(state.isr)}")
    return state.with_leader(preferred)
