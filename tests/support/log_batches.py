"""The batch headers behind a duplicate, read from the brokers' own log files.

A value the checker finds at two offsets was appended twice by a leader; who is at fault
shows in the two batches' headers: the same producer epoch and sequences means the leader's
deduplication missed a retry (a broker bug), a newer epoch with sequences started afresh
means the client bumped its epoch and sent the records again (librdkafka does so after an
OUT_OF_ORDER_SEQUENCE_NUMBER or a timed-out batch, confluentinc/librdkafka#4953). Printed by
the durability checks when they fail, so a rare failure explains itself."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from broker.protocol.records import InvalidRecordError, split_batches


def batches_holding(log_dirs: Iterable[Path], topic: str,
                    positions: Iterable[tuple[int, int]], context: int = 1) -> list[str]:
    """One line per batch, on every log dir, that holds one of ``positions`` (partition,
    offset) or is among the ``context`` batches either side of one."""
    wanted: dict[int, set[int]] = {}
    for partition, offset in positions:
        wanted.setdefault(partition, set()).add(offset)
    lines = []
    for log_dir in log_dirs:
        for partition, offsets in sorted(wanted.items()):
            headers = []
            for segment in sorted((Path(log_dir) / f"{topic}-{partition}").glob("*.log")):
                try:
                    headers += split_batches(segment.read_bytes(), allow_empty=True)
                except (InvalidRecordError, OSError) as error:
                    lines.append(f"{segment}: unreadable past here: {error}")
            hits = [i for i, h in enumerate(headers)
                    if any(h.base_offset <= o <= h.last_offset for o in offsets)]
            shown = sorted({j for i in hits for j in range(i - context, i + context + 1)
                            if 0 <= j < len(headers)})
            for j in shown:
                h = headers[j]
                lines.append(
                    f"{log_dir} {topic}-{partition} offsets {h.base_offset}-{h.last_offset}: "
                    f"producer {h.producer_id} epoch {h.producer_epoch} sequences "
                    f"{h.base_sequence}-{h.last_sequence}, leader epoch "
                    f"{h.partition_leader_epoch}{' <-' if j in hits else ''}")
    return lines
