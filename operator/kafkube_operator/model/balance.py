"""Balance a cluster by load, not only by replica count: a proposal of replica moves and
leadership changes, as a pure function of the cluster's placement and each partition's load.

What Strimzi asks of Cruise Control, done here without it: goals in priority order, each
measured as a *violation* (zero when met), and a greedy search that takes one move at a time,
the one that lowers the highest-priority violated goal most while raising no goal above it.

1. ``RackAware`` (hard): no two replicas of a partition in one rack while the brokers span as
   many racks as it has replicas (else as many racks as there are).
2. ``BrokersRemoved`` (mode remove-brokers only): no replica left on the brokers to remove.
3. ``DiskUsage``: every broker's bytes on disk, as a fraction of its capacity, within
   ``disk`` (a fraction of capacity) of the cluster's fill (all bytes over all capacity).
4. ``LeaderBytesIn``, 5. ``LeaderBytesOut``: what the partitions a broker leads take in
   (produce) and give out (consumers), within ``bytes_in``/``bytes_out`` (a fraction of the
   mean, never tighter than ``min_rate`` bytes/s, so idle clusters are not chased for noise).
6. ``ReplicaCount``: every broker within one replica of the mean.
7. ``LeaderCount``: every broker within one leadership of the mean.

Why this shape: the violation of a goal is the sum over brokers of how far each is outside
its band, so it is zero exactly when the goal is met, and a move that does not lower it is a
move that does not help (minimal: no move is taken that does not improve a violated goal).
Every move taken lowers the vector of violations in priority order, so the search ends; it
ends sooner at ``max_moves``. Candidates are tried in one sorted order and ties are broken by
it, so the same input gives the same proposal (stable), whatever the order of its mappings.

A partition's leader is taken to be its preferred leader (the first replica): the brokers'
preferred-leader elections (and the operator's, reconcile/leaders.py) put it there, so a
leadership change is a reordering of the replica list, which Kafka's reassignment carries
without copying data. A leadership change is preferred to a replica move that helps as much.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

Partition = tuple[str, int]

RACK, REMOVED, DISK = "RackAware", "BrokersRemoved", "DiskUsage"
BYTES_IN, BYTES_OUT = "LeaderBytesIn", "LeaderBytesOut"
REPLICAS, LEADERS = "ReplicaCount", "LeaderCount"
GOALS = (RACK, REMOVED, DISK, BYTES_IN, BYTES_OUT, REPLICAS, LEADERS)
LEADERSHIP_GOALS = (BYTES_IN, BYTES_OUT, LEADERS)  # the ones a reordering alone can help
EPSILON = 1e-9  # below this a change of a violation is float noise, not a change


@dataclass(frozen=True)
class PartitionLoad:
    """One partition's load: bytes on disk (each replica holds them) and the rates its
    leader takes in and gives out, in bytes/s."""

    size: int = 0
    bytes_in: float = 0.0
    bytes_out: float = 0.0


@dataclass(frozen=True)
class Broker:
    """A broker that may hold replicas: its rack and its disk capacity in bytes."""

    rack: str | None
    capacity: int


@dataclass(frozen=True)
class Tolerances:
    """How far from the mean a broker may be before a goal counts as violated."""

    disk: float = 0.10  # fraction of capacity
    bytes_in: float = 0.20  # fraction of the mean
    bytes_out: float = 0.20
    min_rate: float = 10_240.0  # bytes/s: a band never narrower than this


@dataclass(frozen=True)
class BalanceInput:
    """The cluster as the planner sees it. ``placement``: each partition's replicas,
    preferred leader first; ``pinned``: partitions not to touch (offline, or already being
    moved); ``remove``: brokers to empty (mode remove-brokers); ``only_onto``: the only
    brokers replicas may move to (mode add-brokers), None for any; ``goals``: the goals to
    pursue (the rack goal always is)."""

    placement: Mapping[Partition, tuple[int, ...]]
    load: Mapping[Partition, PartitionLoad]
    brokers: Mapping[int, Broker]
    tolerances: Tolerances = field(default_factory=Tolerances)
    max_moves: int = 50
    pinned: Collection[Partition] = ()
    remove: Collection[int] = ()
    only_onto: Collection[int] | None = None
    goals: Collection[str] = GOALS


@dataclass(frozen=True)
class GoalSummary:
    """One goal before and after the proposal: its violation (0: met) and the spread of the
    brokers' values (lowest, highest) it judges."""

    goal: str
    violation_before: float
    violation_after: float
    before: tuple[float, float]
    after: tuple[float, float]

    @property
    def met_before(self) -> bool:
        return self.violation_before <= EPSILON

    @property
    def met_after(self) -> bool:
        return self.violation_after <= EPSILON


@dataclass(frozen=True)
class BrokerLoad:
    """A broker's figures: disk fill (fraction), leader bytes in/out (bytes/s), replicas and
    leaderships."""

    broker: int
    disk: float
    bytes_in: float
    bytes_out: float
    replicas: int
    leaders: int


@dataclass(frozen=True)
class Step:
    """One move of the search: the goal it improved and the partition's new replicas."""

    goal: str
    partition: Partition
    replicas: tuple[int, ...]
    leadership_only: bool
    violation: float = 0.0  # the goal's violation before the move
    improvement: float = 0.0  # how much the move lowered it


@dataclass(frozen=True)
class Proposal:
    """The moves (each changed partition's new replica list, preferred leader first), how
    many replicas move and leaderships change, the bytes to copy, and each goal and broker
    before and after. ``stopped``: why the search ended with a goal still violated."""

    moves: dict[Partition, tuple[int, ...]]
    replica_moves: int  # replicas put on another broker (each is a copy of the partition)
    leadership_changes: int  # partitions only reordered, to another preferred leader
    data_to_move: int
    goals: tuple[GoalSummary, ...]
    before: tuple[BrokerLoad, ...]
    after: tuple[BrokerLoad, ...]
    steps: tuple[Step, ...] = ()
    stopped: str | None = None
    origin: Mapping[Partition, tuple[int, ...]] = field(default_factory=dict)  # moved ones'

    @property
    def empty(self) -> bool:
        return not self.moves


@dataclass
class _State:
    """The placement being searched, with each broker's sums kept up to date."""

    placement: dict[Partition, tuple[int, ...]]
    load: Mapping[Partition, PartitionLoad]
    brokers: Mapping[int, Broker]
    used: dict[int, int] = field(default_factory=dict)
    rate_in: dict[int, float] = field(default_factory=dict)
    rate_out: dict[int, float] = field(default_factory=dict)
    replicas: dict[int, int] = field(default_factory=dict)
    leaders: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for sums in (self.used, self.rate_in, self.rate_out, self.replicas, self.leaders):
            sums.update(dict.fromkeys(self.brokers, 0))
        for p, replicas in self.placement.items():
            self._add(p, replicas, 1)

    def _add(self, p: Partition, replicas: tuple[int, ...], sign: int) -> None:
        load = self.load.get(p, PartitionLoad())
        for b in replicas:
            if b in self.used:
                self.used[b] += sign * load.size
                self.replicas[b] += sign
        if replicas and replicas[0] in self.used:
            self.rate_in[replicas[0]] += sign * load.bytes_in
            self.rate_out[replicas[0]] += sign * load.bytes_out
            self.leaders[replicas[0]] += sign

    def set(self, p: Partition, replicas: tuple[int, ...]) -> None:
        self._add(p, self.placement[p], -1)
        self.placement[p] = replicas
        self._add(p, replicas, 1)


class _Goals:
    """Each goal's violation, for the whole state or for a few brokers (a move changes the
    sums of two brokers only, so its effect is judged on those)."""

    def __init__(self, data: BalanceInput, state: _State) -> None:
        self.data = data
        self.removed = frozenset(data.remove)
        self.balanced = sorted(b for b in data.brokers if b not in self.removed)
        self.rack_of = {b: broker.rack if broker.rack is not None else f"\0broker-{b}"
                        for b, broker in data.brokers.items()}
        self.racks = len({self.rack_of[b] for b in self.balanced})
        n = max(len(self.balanced), 1)
        capacity = sum(data.brokers[b].capacity for b in self.balanced)
        self.fill = sum(state.used.values()) / capacity if capacity else 0.0
        self.mean_in = sum(state.rate_in.values()) / n
        self.mean_out = sum(state.rate_out.values()) / n
        self.mean_replicas = sum(state.replicas.values()) / n
        self.mean_leaders = sum(state.leaders.values()) / n
        t = data.tolerances
        self.band_in = max(t.bytes_in * self.mean_in, t.min_rate)
        self.band_out = max(t.bytes_out * self.mean_out, t.min_rate)

    def rack_violation(self, replicas: tuple[int, ...]) -> int:
        wanted = min(len(replicas), self.racks)
        return max(0, wanted - len({self.rack_of.get(b) for b in replicas}))

    def value(self, goal: str, state: _State, b: int) -> float:
        """The broker's figure the goal judges."""
        if goal == DISK:
            capacity = self.data.brokers[b].capacity
            return state.used[b] / capacity if capacity else 0.0
        return {BYTES_IN: state.rate_in, BYTES_OUT: state.rate_out, REPLICAS: state.replicas,
                LEADERS: state.leaders}[goal][b]

    def broker_violation(self, goal: str, state: _State, b: int, shift: float = 0.0
                         ) -> float:
        """The broker's part of the goal's violation, its figure moved by ``shift``."""
        if b not in state.replicas:  # a broker not live: the caller pins its partitions
            return 0.0
        if goal == REMOVED:
            return float(state.replicas[b] + shift) if b in self.removed else 0.0
        if b in self.removed or goal == RACK:
            return 0.0
        mean, band = {DISK: (self.fill, self.data.tolerances.disk),
                      BYTES_IN: (self.mean_in, self.band_in),
                      BYTES_OUT: (self.mean_out, self.band_out),
                      REPLICAS: (self.mean_replicas, 1.0),
                      LEADERS: (self.mean_leaders, 1.0)}[goal]
        return max(0.0, abs(self.value(goal, state, b) + shift - mean) - band)

    def total(self, goal: str, state: _State) -> float:
        if goal == RACK:
            return float(sum(self.rack_violation(r) for r in state.placement.values()))
        return sum(self.broker_violation(goal, state, b) for b in state.brokers)

    def spread(self, goal: str, state: _State) -> tuple[float, float]:
        if goal == RACK:
            worst = max((self.rack_violation(r) for r in state.placement.values()), default=0)
            return 0.0, float(worst)
        if goal == REMOVED:
            held = [float(state.replicas[b]) for b in self.removed if b in state.replicas]
            return (min(held), max(held)) if held else (0.0, 0.0)
        values = [self.value(goal, state, b) for b in self.balanced]
        return (min(values), max(values)) if values else (0.0, 0.0)


def _hot(state: _State, goals: _Goals, goal: str) -> list[int]:
    """The brokers outside the goal's band, the furthest first."""
    off = {b: goals.broker_violation(goal, state, b) for b in sorted(state.brokers)}
    return sorted((b for b, v in off.items() if v > EPSILON), key=lambda b: -off[b])


def _candidates(state: _State, goals: _Goals, data: BalanceInput, goal: str,
                hot: Collection[int] | None, only: Collection[Partition] | None = None
                ) -> list[tuple[Partition, tuple[int, ...], bool]]:
    """Every single move that touches a broker of ``hot`` (None: any), the ones outside
    the goal's band (only those can lower its violation): leadership changes (a replica
    made first) and replica moves (one replica put on another broker, in its place in the
    list)."""
    pinned = set(data.pinned)
    onto = [b for b in goals.balanced if data.only_onto is None or b in data.only_onto]
    found = []
    for p in sorted(state.placement) if only is None else only:
        if p in pinned:
            continue
        replicas = state.placement[p]
        if goal == RACK and not goals.rack_violation(replicas):
            continue
        for j in range(1, len(replicas) if goal in LEADERSHIP_GOALS else 1):
            if hot is None or replicas[0] in hot or replicas[j] in hot:
                reordered = (replicas[j], *replicas[1:j], replicas[0], *replicas[j + 1:])
                found.append((p, reordered, True))
        for i, b in enumerate(replicas):
            for d in onto:
                if d in replicas or (hot is not None and b not in hot and d not in hot):
                    continue
                found.append((p, (*replicas[:i], d, *replicas[i + 1:]), False))
    return found


def _shifts(state: _State, goals: _Goals, p: Partition, replicas: tuple[int, ...]
            ) -> dict[str, dict[int, float]]:
    """How the move changes each goal's figure on the brokers it touches (no other
    broker's figures change): bytes and a replica where a replica goes and comes, the
    leader's rates and a leadership where the first replica changes."""
    old = state.placement[p]
    load = state.load.get(p, PartitionLoad())
    shifts: dict[str, dict[int, float]] = {g: {} for g in GOALS[1:]}
    capacity = {b: goals.data.brokers[b].capacity for b in (*old, *replicas)
                if b in goals.data.brokers}
    for b, sign in [(b, -1) for b in old if b not in replicas] + \
            [(b, 1) for b in replicas if b not in old]:
        shifts[REMOVED][b] = shifts[REPLICAS][b] = float(sign)
        shifts[DISK][b] = sign * load.size / capacity[b] if capacity.get(b) else 0.0
    if old[0] != replicas[0]:
        for b, sign in ((old[0], -1), (replicas[0], 1)):
            shifts[BYTES_IN][b] = sign * load.bytes_in
            shifts[BYTES_OUT][b] = sign * load.bytes_out
            shifts[LEADERS][b] = float(sign)
    return shifts


def _delta(state: _State, goals: _Goals, goal: str, shifts: Mapping[int, float]) -> float:
    return sum(goals.broker_violation(goal, state, b, shift)
               - goals.broker_violation(goal, state, b) for b, shift in shifts.items())


def _effect(state: _State, goals: _Goals, p: Partition, replicas: tuple[int, ...],
            k: int) -> list[float] | None:
    """How the move changes each goal's violation, in the order of GOALS; None when it
    does not lower goal ``k``'s (most candidates: judged first, the rest only then)."""
    rack = float(goals.rack_violation(replicas) - goals.rack_violation(state.placement[p]))
    shifts = _shifts(state, goals, p, replicas)
    if k and _delta(state, goals, GOALS[k], shifts[GOALS[k]]) >= -EPSILON:
        return None
    return [rack, *(_delta(state, goals, g, shifts[g]) for g in GOALS[1:])]


def plan_balance(data: BalanceInput) -> Proposal:
    """The proposal for ``data``: see the module's docstring for the goals and the search."""
    state = _State(dict(data.placement), data.load, data.brokers)
    goals = _Goals(data, state)
    active = [g for g in GOALS if (g in data.goals or g == RACK)
              and (g != REMOVED or goals.removed)]
    before_goals = {g: (goals.total(g, state), goals.spread(g, state)) for g in active}
    before_loads = _loads(state, goals)
    steps: list[Step] = []
    stopped = None
    for _ in range(data.max_moves + 1):  # each turn takes a move or ends the search
        violated = [g for g in active if goals.total(g, state) > EPSILON]
        if not violated:
            break
        if len(steps) >= data.max_moves:
            stopped = f"maxMovesPerProposal ({data.max_moves}) reached"
            break
        step = _best_step(state, goals, data, violated, active)
        if step is None:
            stopped = "no single move improves " + ", ".join(violated) + \
                " without worsening a goal above it"
            break
        steps.append(step)
        state.set(step.partition, step.replicas)
    moves = {p: r for p, r in sorted(state.placement.items()) if r != data.placement[p]}
    replica_moves = sum(len(set(r) - set(data.placement[p])) for p, r in moves.items())
    summaries = tuple(GoalSummary(g, before_goals[g][0], goals.total(g, state),
                                  before_goals[g][1], goals.spread(g, state)) for g in active)
    return Proposal(
        moves, replica_moves,
        sum(1 for p, r in moves.items()
            if set(r) == set(data.placement[p]) and r[0] != data.placement[p][0]),
        sum(data.load.get(p, PartitionLoad()).size * len(set(r) - set(data.placement[p]))
            for p, r in moves.items()),
        summaries, before_loads, _loads(state, goals), tuple(steps), stopped,
        {p: tuple(data.placement[p]) for p in moves})


def _best_step(state: _State, goals: _Goals, data: BalanceInput,
               violated: list[str], active: list[str]) -> Step | None:
    """The move that lowers the first violated goal it can most, raising none above it
    (among the moves touching the broker furthest off that goal's band, else among all
    touching a broker off it); the next goals down break ties, then a leadership change
    before a replica move, then fewer bytes copied, then the candidates' sorted order."""
    for goal in violated:
        k = GOALS.index(goal)
        above = [GOALS.index(g) for g in active if GOALS.index(g) < k]
        below = [GOALS.index(g) for g in active if GOALS.index(g) > k]
        current = goals.total(goal, state)
        hot = _hot(state, goals, goal)
        # The moves touching the broker furthest off first (fewer candidates, the likeliest
        # to help), then those touching any broker off its band; the rack goal: the moves
        # of one partition in a rack twice at a time, in their sorted order.
        if goal == RACK:
            searches = [(None, [p]) for p in sorted(state.placement)
                        if goals.rack_violation(state.placement[p])]
        else:
            searches = [(hot[:1], None), (hot, None)] if len(hot) > 1 else [(hot, None)]
        for focus, only in searches:
            best: tuple | None = None
            for p, replicas, leadership in _candidates(state, goals, data, goal, focus, only):
                deltas = _effect(state, goals, p, replicas, k)
                if deltas is None or deltas[k] >= -EPSILON or \
                        any(deltas[j] > EPSILON for j in above):
                    continue
                size = 0 if leadership else data.load.get(p, PartitionLoad()).size
                key = (round(deltas[k], 9), tuple(round(deltas[j], 9) for j in below),
                       not leadership, size)
                if best is None or key < best[0]:
                    best = (key, Step(goal, p, replicas, leadership, current, -deltas[k]))
            if best is not None:
                return best[1]
    return None


def _loads(state: _State, goals: _Goals) -> tuple[BrokerLoad, ...]:
    return tuple(BrokerLoad(b, goals.value(DISK, state, b), state.rate_in[b],
                            state.rate_out[b], state.replicas[b], state.leaders[b])
                 for b in sorted(state.brokers))
