"""Types of the C module ``_recordscan.c`` (see the comment at its top)."""

from collections.abc import Buffer

def scan_records(
    records: Buffer, count: int, base_timestamp: int, /
) -> tuple[str | None, int, int, int, int, int, int]:
    """(error, index, min_ts, min_index, max_ts, max_index, null_key)."""
