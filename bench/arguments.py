"""Command-line value types the benchmarks share: sizes, ``KEY=VALUE`` settings, lists."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any


def parse_size(text: str) -> int:
    """"2GiB", "500MiB", "1048576" -> bytes."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMG]i?B?)?", text.strip(), re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 2GiB, 500MiB, 1048576)")
    unit = (match.group(2) or "").upper().rstrip("B").rstrip("I")
    return int(float(match.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[unit])


def parse_setting(text: str) -> tuple[str, str]:
    """"KEY=VALUE" -> (key, value)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def positive_int(text: str) -> int:
    """"3" -> 3; a count or size of at least 1 (rounds, members, partitions)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def comma_list(choices: tuple[str, ...] | None, convert: Callable[[str], Any] = str
               ) -> Callable[[str], list[Any]]:
    """A type for a comma-separated list, each item converted and, with ``choices``, one of
    them."""
    def parse(text: str) -> list[Any]:
        items = [convert(x.strip()) for x in text.split(",") if x.strip()]
        bad = [x for x in items if choices is not None and x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {choices}, got {text!r}")
        return items
    return parse
