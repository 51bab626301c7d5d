"""A region of an open file, the value a fetch response carries instead of record bytes.

It lives in the protocol layer, the lowest that needs it: the log hands regions up, the fetch
response encoder keeps them as they are, and the socket server sends them with
``os.sendfile``; none of these layers needs another to name it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FileRegion:
    """Bytes [position, position + length) of an open file: what a fetch sends by sendfile."""

    fd: int
    position: int
    length: int
