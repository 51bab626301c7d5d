"""Reads what the in-cluster workload printed (tests/e2e/workload.py) into the queue checker's
History, and the figures the scenarios report from it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise

from kafkube.harness.queue_checker import History


@dataclass
class Produced:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    # (partition) -> unix ms of each acknowledgement, in order
    ack_times: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    finished: bool = False

    def longest_gap_ms(self, partitions: Iterable[int] | None = None) -> dict[int, int]:
        """Per partition, the longest time between two acknowledgements: how long it could
        not be written (while the producer kept sending)."""
        chosen = self.ack_times if partitions is None else {
            p: self.ack_times[p] for p in partitions}
        return {p: max((b - a for a, b in pairwise(times)), default=0)
                for p, times in chosen.items()}


def read_produce(lines: Iterable[str], history: History, prefix: str = "v-") -> Produced:
    produced = Produced()
    for line in lines:
        kind, _, rest = line.strip().partition(" ")
        if kind == "A":
            i, partition, offset, at = (int(x) for x in rest.split())
            history.ack(f"{prefix}{i}", partition, offset)
            produced.ack_times[partition].append(at)
        elif kind == "F":
            i, error = rest.split(" ", 1)
            history.fail(f"{prefix}{i}", error)
        elif kind == "D":
            produced.sent, produced.acked, produced.failed = (int(x) for x in rest.split())
            produced.finished = True
    for i in range(produced.sent):
        history.attempt(f"{prefix}{i}")
    return produced


def read_drain(lines: Iterable[str], history: History) -> int:
    """Sets the final log of every partition; returns how many records it holds."""
    final: dict[int, list[tuple[int, str]]] = defaultdict(list)
    done = False
    for line in lines:
        kind, _, rest = line.strip().partition(" ")
        if kind == "R":
            partition, offset, value = rest.split(" ", 2)
            final[int(partition)].append((int(offset), value))
        elif kind == "D":
            done = True
            for entry in rest.split()[1:]:
                final.setdefault(int(entry.split(":")[0]), [])
    assert done, "the drain did not finish"
    for partition, records in final.items():
        history.set_final(partition, records)
    return sum(len(r) for r in final.values())
