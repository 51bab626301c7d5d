"""Building kio messages of any version from one version-independent description.

kio has a class per message version, and fields come and go between versions. Handlers
describe a response once, as nested dicts keyed by kio's field names; ``build`` keeps the
fields the requested version has, converts nested dicts into that version's nested classes
and leaves absent optional fields at their defaults. A missing required field still fails,
which is what we want: it is a handler bug.
"""

from __future__ import annotations

import asyncio
import dataclasses
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from broker.protocol.codec import response_schema

LONG_ANSWER = 2000


@cache
def _plan(cls: type) -> tuple[tuple[str, type | None], ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        nested = None
        hint = hints[f.name]
        for arg in typing.get_args(hint) or (hint,):
            inner = typing.get_args(arg)
            candidate = inner[0] if inner else arg
            if dataclasses.is_dataclass(candidate):
                nested = candidate
                break
        plan.append((f.name, nested))
    return tuple(plan)


def build(cls: type, values: Mapping[str, Any]) -> Any:
    kwargs = {}
    for name, nested in _plan(cls):
        if name not in values:
            continue
        value = values[name]
        if nested is not None and value is not None:
            if isinstance(value, dict | Mapping):  # dict first: Mapping's ABC check is slow
                value = build(nested, value)
            elif isinstance(value, list | tuple):
                value = _build_all(nested, value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def _build_all(cls: type, values: list | tuple) -> tuple:
    """Build each element; one mapping object repeated (a handler's answer to a key asked
    for many times) is built once and its frozen result shared."""
    built: dict[int, Any] = {}
    out = []
    for v in values:
        if isinstance(v, dict | Mapping):
            key = id(v)
            if key not in built:
                built[key] = build(cls, v)
            v = built[key]
        out.append(v)
    return tuple(out)


def build_response(request: Any, values: Mapping[str, Any]) -> Any:
    """The response to ``request`` (a kio request), of the same API version."""
    return build(response_schema(request.__api_key__, request.__version__), values)


async def build_long_response(request: Any, values: Mapping[str, Any], entries: int) -> Any:
    """``build_response`` for an answer of ``entries`` entries, one per thing the request
    named: past ``LONG_ANSWER`` it is built on a worker thread (about 5 µs an entry), and
    the event loop keeps serving meanwhile, as the GIL passes between them every 5 ms."""
    if entries < LONG_ANSWER:
        return build_response(request, values)
    return await asyncio.to_thread(build_response, request, values)
