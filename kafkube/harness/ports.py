"""Free loopback ports, for brokers and the servers around them."""

from __future__ import annotations

import random
import socket

# Below Linux's default ephemeral range (32768-60999), so no client connection of ours can
# take a broker's port between a kill and the restart.
PORT_RANGE = (20000, 32000)


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_base(count: int, tries: int = 50) -> int:
    """A port ``p`` such that ``p .. p+count-1`` are all free on 127.0.0.1, in
    ``PORT_RANGE``: brokers that must come back on their ports after a kill."""
    rng = random.Random()
    for _ in range(tries):
        base = rng.randrange(PORT_RANGE[0], PORT_RANGE[1] - count)
        if all(port_free(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free loopback ports in {PORT_RANGE}")
