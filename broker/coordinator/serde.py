"""The plain binary encoding of Kafka's internal-topic records (non-flexible schemas):
big-endian integers, strings with an int16 length (-1: null), byte blobs with an int32 one.
Shared by ``__consumer_offsets`` and ``__transaction_state``."""

from __future__ import annotations

import struct
import uuid

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def i8(self, v: int) -> Writer:
        self.buf += _I8.pack(v)
        return self

    def i16(self, v: int) -> Writer:
        self.buf += _I16.pack(v)
        return self

    def i32(self, v: int) -> Writer:
        self.buf += _I32.pack(v)
        return self

    def i64(self, v: int) -> Writer:
        self.buf += _I64.pack(v)
        return self

    def string(self, v: str | None) -> Writer:
        if v is None:
            return self.i16(-1)
        raw = v.encode()
        self.i16(len(raw))
        self.buf += raw
        return self

    def blob(self, v: bytes) -> Writer:
        self.i32(len(v))
        self.buf += v
        return self

    # -- flexible versions: unsigned varints, compact strings and arrays, tagged fields --

    def uvarint(self, v: int) -> Writer:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)
        return self

    def compact_string(self, v: str) -> Writer:
        raw = v.encode()
        self.uvarint(len(raw) + 1)
        self.buf += raw
        return self

    def compact_nullable_string(self, v: str | None) -> Writer:
        return self.uvarint(0) if v is None else self.compact_string(v)

    def compact_bytes(self, v: bytes) -> Writer:
        self.uvarint(len(v) + 1)
        self.buf += v
        return self

    def uuid(self, v: uuid.UUID) -> Writer:
        self.buf += v.bytes
        return self

    def compact_length(self, n: int | None) -> Writer:
        """A compact array's length (None: a null array)."""
        return self.uvarint(0 if n is None else n + 1)

    def tagged(self, fields: dict[int, bytes]) -> Writer:
        """Tagged fields, by tag, each already encoded."""
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag).uvarint(len(fields[tag]))
            self.buf += fields[tag]
        return self


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, s: struct.Struct) -> int:
        (v,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return v

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        v = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return v

    def blob(self) -> bytes:
        n = self.i32()
        v = bytes(self.data[self.pos : self.pos + max(n, 0)])
        self.pos += max(n, 0)
        return v

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        v = bytes(self.data[self.pos : self.pos + n]).decode()
        self.pos += n
        return v

    def compact_bytes(self) -> bytes:
        n = self.uvarint() - 1
        v = bytes(self.data[self.pos : self.pos + max(n, 0)])
        self.pos += max(n, 0)
        return v

    def uuid(self) -> uuid.UUID:
        v = uuid.UUID(bytes=bytes(self.data[self.pos : self.pos + 16]))
        self.pos += 16
        return v

    def compact_length(self) -> int | None:
        n = self.uvarint() - 1
        return None if n < 0 else n

    def tagged(self) -> dict[int, bytes]:
        fields = {}
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            fields[tag] = bytes(self.data[self.pos : self.pos + size])
            self.pos += size
        return fields
