"""The records of ``__transaction_state`` in Kafka's byte layout (TransactionLogKey v0,
TransactionLogValue v0), the state names the admin APIs answer with, and the marker
records the group coordinator reads. Kafka's own decoder reading our files is checked in
tests/integration/test_kafka_tools_transactions.py."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.coordinator import transaction_log as tl
from broker.coordinator.group_loader import is_commit_marker
from broker.coordinator.transaction_log import TxnRecord, TxnState
from broker.protocol.batch_codec import Record, encode_batch


def test_key_is_version_0_and_the_id():
    assert tl.encode_key("app-1") == struct.pack(">hh", 0, 5) + b"app-1"
    assert tl.decode_key(tl.encode_key("app-1")) == "app-1"
    assert tl.decode_key(struct.pack(">hh", 9, 1) + b"x") is None


def test_value_layout_is_kafkas():
    record = TxnRecord(1000, 3, 60000, TxnState.ONGOING,
                       frozenset({("b", 2), ("a", 1), ("a", 0)}), 1_700_000_000_123,
                       1_700_000_000_000)
    expected = (struct.pack(">hqhib", 0, 1000, 3, 60000, 1)
                + struct.pack(">i", 2)
                + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 1)
                + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 2)
                + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000))
    assert tl.encode_value(record) == expected
    assert tl.decode_value(expected) == record


@given(st.builds(
    TxnRecord, st.integers(0, 2**63 - 1), st.integers(-1, 32767), st.integers(1, 2**31 - 1),
    st.sampled_from(list(TxnState)),
    st.frozensets(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 10_000)),
                  max_size=20),
    st.integers(0, 2**62), st.integers(-1, 2**62)))
def test_values_round_trip(record):
    assert tl.decode_value(tl.encode_value(record)) == record


def test_a_transaction_version_2_value_is_kafkas_flexible_v1():
    record = TxnRecord(1000, 4, 60000, TxnState.PREPARE_COMMIT,
                       frozenset({("b", 2), ("a", 1), ("a", 0)}), 1_700_000_000_123,
                       1_700_000_000_000, client_version=2, next_producer_id=1001)
    expected = (struct.pack(">hqhib", 1, 1000, 4, 60000, 2)
                + bytes([3])  # compact array: 2 topics
                + bytes([2]) + b"a" + bytes([3]) + struct.pack(">ii", 0, 1) + bytes([0])
                + bytes([2]) + b"b" + bytes([2]) + struct.pack(">i", 2) + bytes([0])
                + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
                + bytes([2])  # tagged fields: NextProducerId (1), ClientTransactionVersion (2)
                + bytes([1, 8]) + struct.pack(">q", 1001)
                + bytes([2, 2]) + struct.pack(">h", 2))
    assert tl.encode_value(record) == expected
    assert tl.decode_value(expected) == record
    # A tag this broker does not know (a newer Kafka's) is skipped, not misread.
    unknown = expected[:-15] + bytes([3]) + expected[-14:] + bytes([7, 1, 0xFF])
    assert tl.decode_value(unknown) == record


@given(st.builds(
    TxnRecord, st.integers(0, 2**63 - 1), st.integers(-1, 32767), st.integers(1, 2**31 - 1),
    st.sampled_from(list(TxnState)),
    st.frozensets(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 10_000)),
                  max_size=20),
    st.integers(0, 2**62), st.integers(-1, 2**62), st.just(2), st.integers(-1, 2**62),
    st.integers(-1, 2**62)))
def test_transaction_version_2_values_round_trip(record):
    assert tl.decode_value(tl.encode_value(record)) == record


def test_an_unknown_value_version_is_refused_not_misread():
    with pytest.raises(ValueError, match="v2"):
        tl.decode_value(struct.pack(">h", 2) + b"\0" * 40)


def test_state_ids_and_names_are_kafkas():
    assert [(s.value, s.label) for s in TxnState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]


def _control(kind: int) -> bytes:
    key = struct.pack(">hh", 0, kind)
    value = struct.pack(">hi", 0, 5)
    return encode_batch([Record(0, 0, key, value)], 0, producer_id=1, producer_epoch=0,
                        attributes=0x30)


def test_markers_are_read_as_commit_or_abort():
    assert is_commit_marker(_control(1)) is True
    assert is_commit_marker(_control(0)) is False
    assert is_commit_marker(_control(5)) is None  # a control type Kafka added later
