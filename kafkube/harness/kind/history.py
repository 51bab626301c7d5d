"""Reads what the in-cluster workload printed (tests/e2e/workload.py) into the queue checker's
History, and the figures the scenarios report from it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise

from kafkube.harness.queue_checker import History


class IncompleteOutput(AssertionError):
    """A client pod's output lacks lines its own last line counts: nothing can be judged from
    it. The kubelet rotates a container's log past ``containerLogMaxSize`` (10 MiB unless the
    node says otherwise) and ``kubectl logs`` serves only the newest file, so the head of a
    long output is gone; judging the rest would call the records of the missing head lost."""


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
    """The producer's acknowledgements and failures into ``history``; raises IncompleteOutput
    when its last line counts more of them than the output holds."""
    produced = Produced()
    acks = fails = 0
    for line in lines:
        kind, _, rest = line.strip().partition(" ")
        if kind == "A":
            i, partition, offset, at = (int(x) for x in rest.split())
            history.ack(f"{prefix}{i}", partition, offset)
            produced.ack_times[partition].append(at)
            acks += 1
        elif kind == "F":
            i, error = rest.split(" ", 1)
            history.fail(f"{prefix}{i}", error)
            fails += 1
        elif kind == "D":
            produced.sent, produced.acked, produced.failed = (int(x) for x in rest.split())
            produced.finished = True
    # D's failed also counts what was still in flight at the end (no F line for those).
    if produced.finished and (acks != produced.acked or fails > produced.failed):
        raise IncompleteOutput(
            f"the producer reported {produced.acked:,} acknowledged and {produced.failed:,} "
            f"failed records, its output holds {acks:,} and {fails:,}: the output is "
            "incomplete (a rotated container log?)")
    for i in range(produced.sent):
        history.attempt(f"{prefix}{i}")
    return produced


def read_drain(lines: Iterable[str], history: History) -> int:
    """Sets the final log of every partition; returns how many records it holds. Raises
    IncompleteOutput when the drain's last line counts more records than the output holds."""
    final: dict[int, list[tuple[int, str]]] = defaultdict(list)
    done = False
    reported = 0
    for line in lines:
        kind, _, rest = line.strip().partition(" ")
        if kind == "R":
            partition, offset, value = rest.split(" ", 2)
            final[int(partition)].append((int(offset), value))
        elif kind == "D":
            done = True
            reported = int(rest.split()[0])
            for entry in rest.split()[1:]:
                final.setdefault(int(entry.split(":")[0]), [])
    assert done, "the drain did not finish"
    read = sum(len(r) for r in final.values())
    if read != reported:
        raise IncompleteOutput(f"the drain reported {reported:,} records, its output holds "
                               f"{read:,}: the output is incomplete (a rotated container log?)")
    for partition, records in final.items():
        history.set_final(partition, records)
    return read
