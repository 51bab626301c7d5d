"""A tiny synchronous Kafka client for tests and benchmarks, and a v2 record batch builder.

``WireClient`` speaks the protocol with the broker's own sans-IO codec (kio request and
response dataclasses): one blocking socket, incrementing correlation ids, exact frame reads
bounded by the socket timeout. It can also send arbitrary bytes and tell whether the broker
closed the connection, which is what the bad-input tests need.

``build_batch`` encodes a record batch v2 byte for byte as Kafka's DefaultRecordBatch and
DefaultRecord write it (uncompressed only); ``parse_batches`` reads batches back.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import crc32c
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12.request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
)
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader

from broker.protocol.codec import RequestHeader, encode_request, response_schema
from broker.protocol.primitives import skip_tagged_fields

_I32 = struct.Struct(">i")
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = _BATCH_HEADER.size  # 61
CRC_START = 21  # the CRC-32C covers attributes (byte 21) to the end of the batch
CRC_OFFSET = 17


class ConnectionClosed(Exception):
    """The broker closed (or reset) the connection."""


def decode_response_exact(frame: bytes, api_key: int, api_version: int) -> tuple[int, Any]:
    """(correlation id, kio response) of a response frame, which must be consumed exactly.

    Stricter than the codec's client-side decode: trailing bytes are an encoding bug.
    """
    schema = response_schema(api_key, api_version)
    (correlation_id,) = _I32.unpack_from(frame, 0)
    pos = 4
    if schema.__header_schema__ is ResponseHeaderV1:
        pos = skip_tagged_fields(frame, pos)
    body, size = entity_reader(schema)(frame, pos)
    if pos + size != len(frame):
        raise ValueError(
            f"{schema.__name__}: {len(frame) - pos - size} bytes left over in the response frame"
        )
    return correlation_id, body


class WireClient:
    """One blocking connection to a broker. Not thread-safe."""

    def __init__(
        self, host: str, port: int, timeout: float = 10.0, client_id: str | None = "wire-test"
    ) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.client_id = client_id
        self.discarded = 0  # bytes thrown away by closed_by_peer
        self._correlation_id = 0

    @classmethod
    def connect(cls, bootstrap: str, timeout: float = 10.0) -> WireClient:
        host, _, port = bootstrap.rpartition(":")
        return cls(host, int(port), timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ------------------------------------------------------------------------

    def next_correlation_id(self) -> int:
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        return self._correlation_id

    def encode(self, body: Any, version: int | None = None) -> tuple[int, bytes]:
        """(correlation id, framed bytes) of ``body``; ``version`` overrides the header's."""
        correlation_id = self.next_correlation_id()
        api_version = body.__version__ if version is None else version
        header = RequestHeader(body.__api_key__, api_version, correlation_id, self.client_id)
        return correlation_id, encode_request(header, body)

    def send(self, body: Any, version: int | None = None) -> int:
        """Send a request without waiting; returns its correlation id."""
        correlation_id, data = self.encode(body, version)
        self.send_raw(data)
        return correlation_id

    def receive(self, api_key: int, api_version: int, correlation_id: int) -> Any:
        """Read the next frame and decode it as the response to ``correlation_id``."""
        got, response = decode_response_exact(self.recv_frame(), api_key, api_version)
        if got != correlation_id:
            raise AssertionError(f"correlation id {got} in a response, expected {correlation_id}")
        return response

    def request(self, body: Any, version: int | None = None) -> Any:
        """Send ``body`` (a kio request) and return the decoded response."""
        correlation_id = self.send(body, version)
        api_version = body.__version__ if version is None else version
        return self.receive(body.__api_key__, api_version, correlation_id)

    # -- raw bytes -----------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise ConnectionClosed(str(e)) from e

    def _recv_exact(self, size: int, deadline: float) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"read {len(chunks)} of {size} bytes before the deadline")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(min(size - len(chunks), 1 << 20))
            except ConnectionResetError as e:
                raise ConnectionClosed(str(e)) from e
            except TimeoutError:
                continue  # the loop re-checks the deadline
            if not chunk:
                raise ConnectionClosed(f"EOF after {len(chunks)} of {size} bytes")
            chunks += chunk
        return bytes(chunks)

    def recv_frame(self, timeout: float | None = None) -> bytes:
        """One whole response frame (without its size prefix), within ``timeout`` seconds."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        try:
            (size,) = _I32.unpack(self._recv_exact(4, deadline))
            if size < 4:
                raise AssertionError(f"response frame size {size}")
            return self._recv_exact(size, deadline)
        finally:
            self.sock.settimeout(self.timeout)

    def closed_by_peer(self, timeout: float, until_data: bool = False) -> bool:
        """True when the peer closes or resets within ``timeout`` s (bytes read meanwhile are
        counted in ``discarded``); False when the connection is still open at the deadline,
        or, with ``until_data``, as soon as the peer sends anything instead of closing."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.sock.settimeout(remaining)
                try:
                    data = self.sock.recv(1 << 16)
                except (ConnectionResetError, BrokenPipeError):
                    return True
                except TimeoutError:
                    continue
                if not data:
                    return True
                self.discarded += len(data)
                if until_data:
                    return False
        finally:
            self.sock.settimeout(self.timeout)


# -- record batches v2 -------------------------------------------------------------------

Header = tuple[str, bytes | None]
RecordSpec = tuple[bytes | None, bytes | None, Sequence[Header], int]


def zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def varint(value: int) -> bytes:
    """Kafka's zig-zag varint/varlong (ByteUtils.writeVarint / writeVarlong)."""
    v = zigzag(value) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _varbytes(value: bytes | None) -> bytes:
    return varint(-1) if value is None else varint(len(value)) + value


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[Header] = (),
) -> bytes:
    """One DefaultRecord: its varint length, then attributes (0) and the fields."""
    headers = list(headers)
    body = bytearray(b"\0")  # record attributes: unused, always 0
    body += varint(timestamp_delta)
    body += varint(offset_delta)
    body += _varbytes(key)
    body += _varbytes(value)
    body += varint(len(headers))
    for name, header_value in headers:
        raw = name.encode()
        body += varint(len(raw)) + raw
        body += _varbytes(header_value)
    return varint(len(body)) + bytes(body)


def build_batch(
    records: Sequence[RecordSpec],
    base_timestamp: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    attributes: int = 0,
) -> bytes:
    """An uncompressed record batch v2 of ``records``: (key, value, headers, timestamp delta).

    As a producer writes it: baseOffset 0, partitionLeaderEpoch -1, maxTimestamp the largest
    record timestamp, CRC-32C over bytes 21 to the end. The keyword-only fields are there
    to build invalid batches; ``attributes`` is written as given (bits 0-2 must stay 0).
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    body = b"".join(
        encode_record(i, delta, key, value, headers)
        for i, (key, value, headers, delta) in enumerate(records)
    )
    max_timestamp = base_timestamp + max(r[3] for r in records)
    size = BATCH_HEADER_SIZE + len(body)
    header = bytearray(
        _BATCH_HEADER.pack(
            base_offset, size - 12, partition_leader_epoch, 2, 0, attributes,
            len(records) - 1, base_timestamp, max_timestamp, producer_id, producer_epoch,
            base_sequence, len(records),
        )
    )
    batch = header + body
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c.crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def simple_batch(
    values: Sequence[bytes],
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A batch of key-less ``values`` timestamped now."""
    now = int(time.time() * 1000)
    return build_batch(
        [(None, v, (), 0) for v in values], now, producer_id, producer_epoch, base_sequence
    )


def recompute_crc(batch: bytes | bytearray) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[CRC_START:])))
    return bytes(out)


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True)
class Batch:
    base_offset: int
    partition_leader_epoch: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: tuple[Record, ...]


class _Reader:
    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def varint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= self.end:
                raise ValueError("truncated varint")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def take(self, size: int) -> bytes | None:
        if size < 0:
            return None
        if self.pos + size > self.end:
            raise ValueError("truncated field")
        out = self.data[self.pos : self.pos + size]
        self.pos += size
        return out


def parse_batches(data: bytes | None) -> list[Batch]:
    """Whole uncompressed v2 batches in ``data`` (a fetch may end with a partial one)."""
    data = bytes(data or b"")
    batches = []
    pos = 0
    while pos + BATCH_HEADER_SIZE <= len(data):
        (
            base_offset, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
            pid, p_epoch, base_seq, count,
        ) = _BATCH_HEADER.unpack_from(data, pos)
        end = pos + 12 + length
        if end > len(data):
            break
        if magic != 2 or attributes & 0x07:
            raise ValueError(f"cannot parse a batch with magic {magic}, attributes {attributes}")
        if crc32c.crc32c(data[pos + CRC_START : end]) != crc:
            raise ValueError(f"CRC mismatch in the batch at offset {base_offset}")
        reader = _Reader(data, pos + BATCH_HEADER_SIZE, end)
        records = []
        for _ in range(count):
            size = reader.varint()
            record_end = reader.pos + size
            reader.pos += 1  # attributes
            ts_delta = reader.varint()
            offset_delta = reader.varint()
            key = reader.take(reader.varint())
            value = reader.take(reader.varint())
            headers = []
            for _ in range(reader.varint()):
                name = reader.take(reader.varint()) or b""
                headers.append((name.decode(), reader.take(reader.varint())))
            if reader.pos != record_end:
                raise ValueError("record length does not match its fields")
            records.append(
                Record(base_offset + offset_delta, base_ts + ts_delta, key, value, tuple(headers))
            )
        if reader.pos != end:
            raise ValueError("batch length does not match its records")
        batches.append(
            Batch(
                base_offset, epoch, crc, attributes, last_delta, base_ts, max_ts, pid, p_epoch,
                base_seq, tuple(records),
            )
        )
        pos = end
    return batches


# -- convenience requests ----------------------------------------------------------------
# Current versions of the requests the tests use (kio classes fix the version).

LATEST = -1
EARLIEST = -2


def api_versions_request() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="wire-test", client_software_version="1")


def metadata_request(names: Iterable[str] | None, auto_create: bool = True) -> MetadataRequest:
    """Metadata for ``names`` (None: every topic)."""
    topics = None if names is None else tuple(
        MetadataRequestTopic(topic_id=None, name=n) for n in names
    )
    return MetadataRequest(
        topics=topics, allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=False,
    )


def produce_request(
    topic: str, records: bytes | None, partition: int = 0, acks: int = -1
) -> ProduceRequest:
    return ProduceRequest(
        acks=acks, timeout=timedelta(seconds=10),
        topic_data=(TopicProduceData(
            name=topic, partition_data=(PartitionProduceData(index=partition, records=records),),
        ),),
    )


def fetch_request(
    topic: str, offset: int, partition: int = 0, max_bytes: int = 1 << 20
) -> FetchRequest:
    """A fetch that never waits (max_wait 0, min_bytes 0)."""
    return FetchRequest(
        max_wait=timedelta(0), min_bytes=0, max_bytes=max_bytes,
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes,
        ),)),),
        forgotten_topics_data=(),
    )


def list_offsets_request(topic: str, timestamp: int, partition: int = 0) -> ListOffsetsRequest:
    return ListOffsetsRequest(
        replica_id=-1, isolation_level=0,
        topics=(ListOffsetsTopic(name=topic, partitions=(
            ListOffsetsPartition(partition_index=partition, timestamp=timestamp),
        )),),
    )


def create_topic(client: WireClient, name: str) -> None:
    """Create ``name`` through Metadata auto-creation; fail unless it exists afterwards."""
    (topic,) = client.request(metadata_request([name])).topics
    assert topic.error_code == 0 and topic.partitions, f"topic {name} not created: {topic}"


def produce(
    client: WireClient, topic: str, records: bytes | None, partition: int = 0, acks: int = -1
) -> Any:
    """The partition response of a one-partition produce."""
    response = client.request(produce_request(topic, records, partition, acks))
    (topic_response,) = response.responses
    (partition_response,) = topic_response.partition_responses
    return partition_response


def fetch(client: WireClient, topic: str, offset: int, partition: int = 0) -> Any:
    """The partition data of a one-partition fetch."""
    (topic_response,) = client.request(fetch_request(topic, offset, partition)).responses
    (data,) = topic_response.partitions
    return data


def list_offset(client: WireClient, topic: str, timestamp: int = LATEST, partition: int = 0) -> int:
    (topic_response,) = client.request(list_offsets_request(topic, timestamp, partition)).topics
    (p,) = topic_response.partitions
    assert p.error_code == 0, f"ListOffsets {topic}-{partition}: {p.error_code!r}"
    return p.offset


def init_producer_id(
    client: WireClient, producer_id: int = -1, producer_epoch: int = -1
) -> tuple[int, int]:
    response = client.request(InitProducerIdRequest(
        transactional_id=None, transaction_timeout=timedelta(seconds=60),
        producer_id=producer_id, producer_epoch=producer_epoch,
    ))
    assert response.error_code == 0, f"InitProducerId: {response.error_code!r}"
    return response.producer_id, response.producer_epoch
