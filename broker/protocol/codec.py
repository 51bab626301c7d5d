"""The Kafka wire codec: bytes in, typed requests out; typed responses in, bytes out.

Sans-IO: nothing here touches a socket or an event loop. Message bodies are kio's frozen
dataclasses, generated from Kafka's JSON schemas, except Produce and Fetch requests, which
have hand-written decoders (``produce.py``, ``fetch.py``) because they are most of the
traffic. This module adds what kio leaves to its caller: length-prefixed framing, request
header parsing, and the choice of response header version (v1 for flexible versions, but
always v0 for ApiVersions, as Kafka pins it).
"""

from __future__ import annotations

import dataclasses
import io
import struct
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.index import api_key_map
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from broker.protocol import fetch, list_offsets, produce
from broker.protocol._buffers import uninitialized
from broker.protocol.bounds import LengthError, check_lengths
from broker.protocol.primitives import ProtocolError, skip_tagged_fields

_FRAME_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
API_VERSIONS_KEY = 18


class FrameTooLarge(ProtocolError):
    pass


class UnsupportedRequest(ProtocolError):
    """A well-framed request for an API key or version we cannot decode.

    Carries the parsed header prefix so the caller can still answer ApiVersions (KIP-511
    fallback) before closing.
    """

    def __init__(self, api_key: int, api_version: int, correlation_id: int, why: str) -> None:
        super().__init__(why)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: Any  # a kio request dataclass
    size: int  # bytes on the wire, for metrics and limits


# A frame's first buffer: what already arrived, or this much; it doubles from there.
_FIRST_ALLOCATION = 64 << 10


class FrameReader:
    """Splits a byte stream into Kafka frames (a 4-byte big-endian size, then the frame).

    Rejects a size above ``max_frame_bytes`` (Kafka's socket.request.max.bytes) or below
    zero as soon as the 4 size bytes arrive. A frame's buffer grows with the bytes that
    actually arrive (doubling, from what is already at hand), or is all of its size but
    not set when the caller receives in place (``unfilled``: pages not written are not
    made resident), so a client that declares a huge frame and sends little costs little;
    the network layer decides, from ``in_progress``, whether memory is left to read more
    (queued.max.request.bytes). Each byte is copied once into the frame's buffer, which is
    handed on as it is.
    """

    def __init__(self, max_frame_bytes: int) -> None:
        # Lowered while a SASL client is not yet authenticated (sasl.server.max.receive.size).
        self.max_frame_bytes = max_frame_bytes
        self._size_bytes = bytearray()
        self._frame: bytearray | None = None
        self._size = 0  # the declared size of the frame in progress
        self._filled = 0

    @property
    def in_progress(self) -> int | None:
        """The declared size of a frame begun and not yet complete, else None."""
        return self._size if self._frame is not None else None

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytearray]:
        if self._frame is None and not self._size_bytes and len(data) >= 4:
            # The common case, one whole request in one read: a single copy, none of the
            # bookkeeping below (which took ~13 µs of a small request's ~200).
            (size,) = _FRAME_SIZE.unpack_from(data, 0)
            if len(data) == 4 + size and 0 <= size <= self.max_frame_bytes:
                return [bytearray(memoryview(data)[4:])]
        view = memoryview(data)
        pos, end = 0, len(view)
        frames = []
        while True:
            if self._frame is None:
                if pos == end:
                    break
                take = view[pos : pos + 4 - len(self._size_bytes)]
                self._size_bytes += take
                pos += len(take)
                if len(self._size_bytes) < 4:
                    break
                (size,) = _FRAME_SIZE.unpack(self._size_bytes)
                self._size_bytes.clear()
                if size < 0 or size > self.max_frame_bytes:
                    raise FrameTooLarge(
                        f"frame size {size} outside [0, {self.max_frame_bytes}] "
                        f"(socket.request.max.bytes, or sasl.server.max.receive.size before "
                        f"authentication)"
                    )
                self._size, self._filled = size, 0
                self._frame = bytearray(min(size, max(end - pos, _FIRST_ALLOCATION)))
            take = min(self._size - self._filled, end - pos)
            self._make_room(take)
            self._frame[self._filled : self._filled + take] = view[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled < self._size:
                break
            frames.append(self._frame)
            self._frame = None
        return frames

    def _make_room(self, count: int) -> None:
        """Grow the frame's buffer to hold ``count`` more bytes: at least double, never
        past the declared size."""
        frame = self._frame
        assert frame is not None
        need = self._filled + count
        if need > len(frame):
            frame.extend(bytes(min(self._size, max(need, 2 * len(frame))) - len(frame)))

    def unfilled(self, at_least: int) -> memoryview | None:
        """Room for the rest of the frame being read, when at least ``at_least`` bytes of it
        are missing: the caller can receive straight into it (``recv_into``) and report the
        count to ``filled``, saving a copy of large frames. The view covers all that is
        missing; its bytes are not set (``_buffers.c``) until received, and the frame is
        handed on only once every one of them has been."""
        frame = self._frame
        if frame is None or self._size - self._filled < at_least:
            return None
        if len(frame) < self._size:
            # Room for all of it at once, not set first: growing it step by step copied
            # the frame several times over and zeroed what recv overwrites (14% of the
            # broker's CPU under 1-2 MiB Java requests, perf). Bytes never sent are never
            # written, so a large declared frame's pages are not made resident for them.
            whole = uninitialized(self._size)
            whole[: self._filled] = memoryview(frame)[: self._filled]
            self._frame = frame = whole
        return memoryview(frame)[self._filled :]

    def filled(self, count: int) -> list[bytearray]:
        """``count`` bytes were written into the view ``unfilled`` returned."""
        if self._frame is None or count < 0 or self._filled + count > self._size:
            # Not an assert: a frame handed on with bytes never written would carry
            # whatever the allocator left there (``_buffers.c``).
            raise ValueError(f"{count} bytes filled of a frame missing "
                             f"{self._size - self._filled if self._frame else 0}")
        self._filled += count
        if self._filled < self._size:
            return []
        frame, self._frame = self._frame, None
        return [frame]

    @property
    def buffered(self) -> int:
        return len(self._size_bytes) + (self._filled if self._frame is not None else 0)

    @property
    def allocated(self) -> int:
        """Bytes held for the frame in progress."""
        return len(self._frame) if self._frame is not None else 0


@cache
def request_schema(api_key: int, api_version: int) -> tuple[type, Callable]:
    schema = load_request_schema(api_key, api_version)
    return schema, entity_reader(schema)


@cache
def response_writer(schema: type) -> tuple[Callable, bool]:
    flexible_header = schema.__header_schema__ is ResponseHeaderV1
    return entity_writer(schema), flexible_header


@cache
def response_schema(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


@cache
def _array_fields(cls: type) -> tuple[tuple[str, bool, type | None], ...]:
    """(name, nullable, element entity type or None) of each array field of a kio class."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        arrays = [o for o in options if typing.get_origin(o) is tuple]
        if not arrays:
            continue
        element = typing.get_args(arrays[0])[0]
        nested = element if dataclasses.is_dataclass(element) else None
        out.append((f.name, type(None) in options, nested))
    return tuple(out)


def _null_array(entity: Any) -> str | None:
    """The name of the first non-nullable array holding null, searching nested entities."""
    for name, nullable, nested in _array_fields(type(entity)):
        value = getattr(entity, name)
        if value is None:
            if not nullable:
                return name
            continue
        if nested is not None:
            for item in value:
                found = _null_array(item)
                if found is not None:
                    return f"{name}.{found}"
    return None


@dataclass(frozen=True, slots=True)
class HandDecoder:
    """A hand-written decoder: the versions it takes, and the first flexible one (KIP-482),
    known without loading kio's class for the version."""

    versions: range
    flexible_from: int
    decode: Callable[[bytes | bytearray, int, int], Any]


# The requests sent most often have their own decoders (``broker.protocol.produce``,
# ``.fetch`` and ``.list_offsets``), which build plain objects and keep records as views
# into the frame.
_HAND_DECODERS: dict[int, HandDecoder] = {
    produce.API_KEY: HandDecoder(produce.VERSIONS, produce.FLEXIBLE_FROM,
                                 produce.decode_produce_request),
    fetch.API_KEY: HandDecoder(fetch.VERSIONS, fetch.FLEXIBLE_FROM, fetch.decode_fetch_request),
    list_offsets.API_KEY: HandDecoder(list_offsets.VERSIONS, list_offsets.FLEXIBLE_FROM,
                                      list_offsets.decode_list_offsets_request),
}


def decode_request(frame: bytes | bytearray) -> Request:
    """Decode one frame (without its size prefix) into a header and a kio request body."""
    if len(frame) < _HEADER_PREFIX.size + 2:
        raise ProtocolError(f"frame of {len(frame)} bytes is too short for a request header")
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(frame, 0)
    hand = _HAND_DECODERS.get(api_key)
    if hand is not None and api_version in hand.versions:
        flexible = api_version >= hand.flexible_from
    else:
        hand = None
        try:
            schema, reader = request_schema(api_key, api_version)
        except (UnknownAPIKey, UnknownEntity) as e:
            raise UnsupportedRequest(
                api_key, api_version, correlation_id, f"unknown API {api_key} v{api_version}"
            ) from e
        flexible = schema.__flexible__
    # Request header: the client id keeps its int16 length even in header v2.
    pos = _HEADER_PREFIX.size
    (id_len,) = _I16.unpack_from(frame, pos)
    pos += 2
    client_id = None
    if id_len >= 0:
        if pos + id_len > len(frame):
            raise ProtocolError("truncated client id")
        client_id = frame[pos : pos + id_len].decode("utf-8", "replace")
        pos += id_len
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    if hand is not None:
        body = hand.decode(frame, pos, api_version)
        return Request(RequestHeader(api_key, api_version, correlation_id, client_id), body,
                       len(frame))
    try:
        check_lengths(schema, frame, pos)  # before kio reserves what a count claims
    except LengthError as e:
        raise ProtocolError(f"cannot decode {schema.__name__} v{api_version}: {e}") from None
    try:
        # kio's native reader takes read-only buffers; a read-only view avoids copying.
        body, _ = reader(memoryview(frame).toreadonly(), pos)
    except Exception as e:  # kio's native reader raises several types for malformed input
        raise ProtocolError(f"cannot decode {schema.__name__} v{api_version}: {e!r}") from e
    null_field = _null_array(body)
    if null_field is not None:
        # kio decodes a null array even where the schema forbids it; Kafka's parser refuses.
        raise ProtocolError(f"{schema.__name__} v{api_version}: {null_field} may not be null")
    # Trailing bytes are ignored, as Kafka's RequestContext.parseRequest does: librdkafka
    # 2.x pads a null compact array in Metadata v12 with three extra zero bytes.
    return Request(RequestHeader(api_key, api_version, correlation_id, client_id), body, len(frame))


def encode_response(correlation_id: int, response: Any) -> bytes:
    """Encode a kio response with its header and the 4-byte size prefix."""
    write, flexible_header = response_writer(type(response))
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(_FRAME_SIZE.pack(correlation_id))
    if flexible_header:
        out.write(b"\0")  # no tagged fields in the response header
    write(out, response)
    data = out.getbuffer()
    _FRAME_SIZE.pack_into(data, 0, len(data) - 4)
    del data
    return out.getvalue()


def encode_request(header: RequestHeader, body: Any) -> bytes:
    """Encode a request with its size prefix: the client side, used by tests and benchmarks."""
    schema = type(body)
    out = io.BytesIO()
    out.write(_HEADER_PREFIX.pack(header.api_key, header.api_version, header.correlation_id))
    if header.client_id is None:
        out.write(_I16.pack(-1))
    else:
        raw = header.client_id.encode()
        out.write(_I16.pack(len(raw)) + raw)
    if schema.__flexible__:
        out.write(b"\0")
    entity_writer(schema)(out, body)
    data = out.getvalue()
    return _FRAME_SIZE.pack(len(data)) + data


def decode_response(frame: bytes, api_key: int, api_version: int) -> tuple[int, Any]:
    """Decode a response frame (without size prefix): the client side, for tests."""
    schema = response_schema(api_key, api_version)
    (correlation_id,) = _FRAME_SIZE.unpack_from(frame, 0)
    pos = 4
    if schema.__header_schema__ is ResponseHeaderV1:
        pos = skip_tagged_fields(frame, pos)
    body, _ = entity_reader(schema)(frame, pos)
    return correlation_id, body


def api_name(api_key: int) -> str:
    """Kafka's name of an API (Produce, Metadata, ...), for logs."""
    name = api_key_map.get(api_key)
    if name is None:
        return f"ApiKey{api_key}"
    return "".join(part.capitalize() for part in name.split("_"))
