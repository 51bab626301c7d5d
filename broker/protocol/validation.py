"""What Kafka's LogValidator checks inside a produced batch before it is appended.

``records.validate_produce_payload`` has checked the header (one v2 batch, CRC, counts,
codec); this looks at the records themselves, so that nothing a later reader cannot parse
(ListOffsets by timestamp, the cleaner, a consumer) ever reaches the log: the records
section decompresses, holds exactly ``record_count`` well-formed records with offset
deltas 0, 1, 2, …, a compacted topic's records have keys, and CreateTime timestamps lie
within ``message.timestamp.before.max.ms`` / ``after.max.ms`` of now. The batch itself is
stored exactly as received; only its header's max timestamp is corrected when it does not
match the records (as Kafka sets it), which ``records.stamp_header`` does with the CRC.

The structure walk is C (``_recordscan.c``): it runs for every record produced.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.protocol._recordscan import scan_records
from broker.protocol.batch_codec import CODEC_NONE, decompress
from broker.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    CORRUPT_MESSAGE,
    HEADER_SIZE,
    INVALID_RECORD,
    BatchHeader,
    InvalidRecordError,
)

INVALID_TIMESTAMP = 32
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class RecordRules:
    """The topic settings the records are checked against."""

    compacted: bool = False
    log_append_time: bool = False
    timestamp_before_max_ms: int = 2**63 - 1
    timestamp_after_max_ms: int = 2**63 - 1


def validate_records(batch: bytes | memoryview, header: BatchHeader, rules: RecordRules,
                     now_ms: int) -> int:
    """Check the records of one produced batch; its true max timestamp if they pass.

    Raises InvalidRecordError with Kafka's code: CORRUPT_MESSAGE for records that cannot be
    decompressed, INVALID_RECORD for records that do not parse or break a rule (with
    Kafka's per-record ``record_errors``), INVALID_TIMESTAMP for timestamps out of range.
    """
    section = memoryview(batch)[HEADER_SIZE : header.size]
    if header.compression != CODEC_NONE:
        try:
            section = memoryview(decompress(header.compression, bytes(section)))
        except Exception as e:  # each codec library raises its own kind
            raise InvalidRecordError(
                f"records cannot be decompressed with codec {header.compression}: {e}",
                CORRUPT_MESSAGE) from None
    error, index, min_ts, min_index, max_ts, max_index, null_key = scan_records(
        section, header.record_count, header.base_timestamp)
    if error is not None:
        raise InvalidRecordError(error, INVALID_RECORD,
                                 ((index, error),) if index >= 0 else ())
    if rules.compacted and null_key >= 0:
        message = "Compacted topic cannot accept message without key"
        raise InvalidRecordError(
            f"One or more records have been rejected: record {null_key}: {message}",
            INVALID_RECORD, ((null_key, message),))
    if not rules.log_append_time and not header.attributes & ATTR_TIMESTAMP_TYPE and not (
            min_ts >= now_ms - rules.timestamp_before_max_ms
            and max_ts <= now_ms + rules.timestamp_after_max_ms):
        # Only a batch with a timestamp out of range, or NO_TIMESTAMP under a bound, gets
        # here: the per-record messages are built for those alone.
        _check_timestamps(((min_index, min_ts), (max_index, max_ts)), rules, now_ms)
    return max_ts


def _check_timestamps(extremes: tuple[tuple[int, int], ...], rules: RecordRules,
                      now_ms: int) -> None:
    """CreateTime bounds, as LogValidator.validateTimestamp (NO_TIMESTAMP is exempt): the
    smallest and largest timestamps decide, and name their records."""
    earliest = now_ms - rules.timestamp_before_max_ms
    latest = now_ms + rules.timestamp_after_max_ms
    errors = tuple(
        (index, f"Timestamp {ts} of record {index} is out of range. The timestamp should be "
                f"within [{earliest}, {latest}]")
        for index, ts in dict(extremes).items()
        if ts != NO_TIMESTAMP and not earliest <= ts <= latest)
    if errors:
        raise InvalidRecordError("One or more records have been rejected due to invalid "
                                 "timestamp", INVALID_TIMESTAMP, errors)
