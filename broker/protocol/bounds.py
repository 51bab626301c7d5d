"""Every length a request declares checked against the bytes actually there, before kio.

kio's native reader reserves memory for as many array elements as a count claims before it
reads them: a 60-byte CreateTopics whose topic count is a five-byte uvarint asked for 130 GB
and aborted the whole broker (found by ``bench/fuzz.py``). This walk follows the request's
schema without building anything and refuses, as a framing error, any array count, string
or bytes length, or tagged field that runs past the end of the frame. Produce and Fetch
have their own decoders and never come here.

It also refuses a request naming more than ``MAX_ENTRIES`` array elements in all. Kafka has
no such limit, only ``socket.request.max.bytes``, but 100 MB of partition indexes are 25
million of them: minutes of a Python broker's time and gigabytes of objects, for an answer
no client asks for (the long fuzz run sent such DescribeProducers). No Kafka client names
that many; the cluster image holds about 100,000 partitions at most.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from functools import cache
from types import NoneType, UnionType
from typing import Any

_FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4,
          "uint32": 4, "timedelta_i32": 4, "int64": 8, "timedelta_i64": 8,
          "datetime_i64": 8, "float64": 8, "uuid": 16}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# (name, kafka type or None for an entity, is an array, entity class or None, a nullable
# struct: written after a one-byte marker, -1 for null)
_Field = tuple[str, str | None, bool, type | None, bool]


MAX_ENTRIES = 200_000


class LengthError(ValueError):
    pass


def check_lengths(schema: type, buf: bytes | bytearray | memoryview, pos: int) -> None:
    """Raise LengthError if some declared length in the body at ``pos`` overruns it, or
    its arrays hold more than ``MAX_ENTRIES`` elements in all."""
    try:
        _entity(schema, buf, pos, len(buf), [MAX_ENTRIES])
    except (IndexError, struct.error) as e:
        raise LengthError(f"truncated {schema.__name__}: {e}") from None


@cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue  # travels in the tagged-field section, sized there
        nullable = NoneType in typing.get_args(hints[f.name])
        hint = _strip_none(hints[f.name])
        is_array = typing.get_origin(hint) is tuple
        inner = _strip_none(typing.get_args(hint)[0]) if is_array else hint
        entity = inner if dataclasses.is_dataclass(inner) else None
        out.append((f.name, f.metadata.get("kafka_type") if entity is None else None,
                    is_array, entity, nullable and entity is not None and not is_array))
    return tuple(out)


def _strip_none(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, UnionType):
        args = [a for a in typing.get_args(hint) if a is not NoneType]
        return args[0]
    return hint


def _uvarint(buf: Any, pos: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(5):
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise LengthError("unsigned varint longer than five bytes")


def _need(pos: int, count: int, end: int, what: str) -> None:
    if count > end - pos:
        raise LengthError(f"{what} declares {count} bytes or items, {end - pos} bytes remain")


def _entity(cls: type, buf: Any, pos: int, end: int, budget: list[int]) -> int:
    flexible = cls.__flexible__
    for name, kafka_type, is_array, entity, nullable_struct in _fields(cls):
        if nullable_struct:
            _need(pos, 1, end, name)
            pos += 1
            if buf[pos - 1] == 0xFF:  # -1: null
                continue
        if is_array:
            if flexible:
                count, pos = _uvarint(buf, pos)
                count -= 1
            else:
                (count,) = _I32.unpack_from(buf, pos)
                pos += 4
            if count <= 0:
                continue  # null or empty
            _need(pos, count, end, name)
            budget[0] -= count
            if budget[0] < 0:
                raise LengthError(f"the request names more than {MAX_ENTRIES} array elements "
                                  f"({name} alone {count})")
            for _ in range(count):
                pos = _one(kafka_type, entity, flexible, buf, pos, end, name, budget)
        else:
            pos = _one(kafka_type, entity, flexible, buf, pos, end, name, budget)
    if flexible:
        pos = _tagged(buf, pos, end)
    return pos


def _one(kafka_type: str | None, entity: type | None, flexible: bool, buf: Any, pos: int,
         end: int, name: str, budget: list[int]) -> int:
    if entity is not None:
        return _entity(entity, buf, pos, end, budget)
    size = _FIXED.get(kafka_type or "")
    if size is not None:
        _need(pos, size, end, name)
        return pos + size
    if kafka_type == "string":
        if flexible:
            length, pos = _uvarint(buf, pos)
            length -= 1
        else:
            (length,) = _I16.unpack_from(buf, pos)
            pos += 2
    elif kafka_type in ("bytes", "records"):
        if flexible:
            length, pos = _uvarint(buf, pos)
            length -= 1
        else:
            (length,) = _I32.unpack_from(buf, pos)
            pos += 4
    else:
        raise LengthError(f"{name}: no length rule for kafka type {kafka_type}")
    if length > 0:
        _need(pos, length, end, name)
        pos += length
    return pos


def _tagged(buf: Any, pos: int, end: int) -> int:
    count, pos = _uvarint(buf, pos)
    _need(pos, count, end, "tagged fields")
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        _need(pos, size, end, "a tagged field")
        pos += size
    return pos
