"""The recovery command's points: one measured point of one curve and system (the JSON a
run writes), and the rule that a point's failure is its figure, never the run's end."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Point:
    """One measured point of one curve and system. ``seconds`` is the curve's headline
    figure (recovery: (b), readable; metadata: every broker; image: committed), None when
    the point did not finish; ``figures`` holds the rest, ``notes`` what was seen."""

    curve: str
    system: str
    x: float  # GB of log, or partitions
    seconds: float | None
    figures: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def why(error: BaseException) -> str:
    """The error as a point's figure: its type and first line, short enough for a cell."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def run_point(fn: Callable[..., Point], curve: str, system: str, x: float,
              *args: Any) -> Point:
    """One point; a failure becomes the point's figure, never the run's end."""
    try:
        return fn(system, x, *args)
    except KeyboardInterrupt:
        raise
    except Exception as e:
        traceback.print_exc()
        return Point(curve, system, x, None, error=why(e))


def describe(point: Point) -> str:
    head = "-" if point.seconds is None else f"{point.seconds:.2f} s"
    extra = ", ".join(f"{k}={v}" for k, v in point.figures.items())
    return f"{head}; {extra}" + (f"; ERROR {point.error}" if point.error else "") + \
        "".join(f"\n     {n}" for n in point.notes)

