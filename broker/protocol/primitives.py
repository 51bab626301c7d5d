"""Kafka's wire primitives that the hand-written codecs share: fixed-width integers,
unsigned varints and tagged-field sections (KIP-482).

Readers take ``(buffer, position)`` and return ``(value, next position)``, raising
``ProtocolError`` on truncated input, so a malformed request closes its connection instead
of surfacing as an IndexError deep in a handler.
"""

from __future__ import annotations

import struct


class ProtocolError(Exception):
    """The peer sent bytes that do not form a valid request; the connection must close."""


I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")

Buffer = bytes | bytearray | memoryview


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtocolError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("varint too long")


def write_uvarint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes((n,)) for n in range(0x80)]


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ProtocolError("truncated tagged field")
    return pos
