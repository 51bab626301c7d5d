"""Kafka's wire primitives that the hand-written codecs share: fixed-width integers,
unsigned varints and tagged-field sections (KIP-482).

Readers take ``(buffer, position)`` and return ``(value, next position)``, raising
``ProtocolError`` on truncated input, so a malformed request closes its connection instead
of surfacing as an IndexError deep in a handler.
"""

from __future__ import annotations

import struct
from typing import Any


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


class Reader:
    """A cursor over one request frame for a hand-written decoder. Every read checks the
    frame's bounds; ``flexible`` selects the compact encodings of KIP-482."""

    __slots__ = ("buf", "flexible", "message", "pos")

    def __init__(self, message: str, frame: Buffer, pos: int, flexible: bool) -> None:
        self.message = message  # for errors: "ProduceRequest: ... may not be null"
        self.buf = memoryview(frame)
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > len(self.buf):
            raise ProtocolError(f"truncated {self.message} at byte {start}")
        self.pos = start + n
        return start

    def i8(self) -> int:
        return I8.unpack_from(self.buf, self._take(1))[0]

    def i16(self) -> int:
        return I16.unpack_from(self.buf, self._take(2))[0]

    def i32(self) -> int:
        return I32.unpack_from(self.buf, self._take(4))[0]

    def i64(self) -> int:
        return I64.unpack_from(self.buf, self._take(8))[0]

    def _length(self) -> int:
        """A bytes or array length; -1 for null."""
        if self.flexible:
            n, self.pos = read_uvarint(self.buf, self.pos)
            return n - 1
        return self.i32()

    def array_length(self, field: str) -> int:
        n = self._length()
        if n < 0:
            raise ProtocolError(f"{self.message}: {field} may not be null")
        return n

    def string(self, field: str) -> str:
        value = self.nullable_string(field)
        if value is None:
            raise ProtocolError(f"{self.message}: {field} may not be null")
        return value

    def nullable_string(self, field: str) -> str | None:
        if self.flexible:
            n, self.pos = read_uvarint(self.buf, self.pos)
            n -= 1
        else:
            n = self.i16()
        if n < 0:
            return None
        start = self._take(n)
        try:
            return str(self.buf[start : start + n], "utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"{self.message}: {field} is not UTF-8") from e

    def nullable_bytes(self) -> memoryview | None:
        n = self._length()
        if n < 0:
            return None
        start = self._take(n)
        return self.buf[start : start + n]

    def fixed(self, layout: struct.Struct) -> tuple[Any, ...]:
        """Several fixed-size fields at once (one bounds check, one unpack)."""
        return layout.unpack_from(self.buf, self._take(layout.size))

    def tagged_fields(self) -> None:
        if self.flexible:
            pos = self.pos
            if pos < len(self.buf) and self.buf[pos] == 0:  # none: the usual case
                self.pos = pos + 1
            else:
                self.pos = skip_tagged_fields(self.buf, pos)
