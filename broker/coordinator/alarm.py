"""When the group coordinator next has something to do on a timer.

Kafka keeps a timer per session and per rebalance (its purgatories' timing wheel). The
coordinator here keeps plain deadlines in its membership tables, and one task that expires
whatever is due (``GroupCoordinator.tick``). That task used to wake every 50 ms to look: 20
event-loop wake-ups a second on an idle broker, each walking every member of every group.
Now it sleeps until the earliest deadline, and whatever sets a deadline sooner than the one it
sleeps towards rings the alarm, so the task looks again at once and sleeps towards the new
one. Deadlines are ``time.monotonic()`` seconds, as the membership tables keep them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time

Key = tuple[str, str]  # (group id, member id)


class Alarm:
    """Wakes the one task sleeping on it when a deadline sooner than its own is set."""

    def __init__(self) -> None:
        self._wake = asyncio.Event()
        # The deadline the task sleeps towards; -inf while it is awake, as it is about to
        # look at every table anyway.
        self._until = -math.inf

    def at(self, deadline: float) -> None:
        """Something is due at ``deadline``."""
        if deadline < self._until:
            self.ring()

    def ring(self) -> None:
        """Look again now: deadlines changed in a way ``at`` cannot say (a load)."""
        self._until = -math.inf
        self._wake.set()

    async def sleep_until(self, deadline: float) -> bool:
        """Return at ``deadline`` (False), or sooner when rung (True)."""
        self._wake.clear()
        self._until = deadline
        try:
            delay = deadline - time.monotonic()
            if delay <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            return self._wake.is_set()
        finally:
            self._until = -math.inf


class Deadlines(dict[Key, float]):
    """A table of deadlines by (group, member) that tells ``alarm`` of each one set, so
    code that sets a session or a rebalance timeout cannot forget to."""

    def __init__(self, alarm: Alarm) -> None:
        super().__init__()
        self.alarm = alarm

    def __setitem__(self, key: Key, deadline: float) -> None:
        super().__setitem__(key, deadline)
        self.alarm.at(deadline)

    def setdefault(self, key: Key, deadline: float) -> float:  # type: ignore[override]
        if key not in self:
            self[key] = deadline
        return self[key]

    def update(self, *args: object, **kwargs: object) -> None:  # type: ignore[override]
        raise TypeError("set deadlines one at a time, so the alarm hears of each")

