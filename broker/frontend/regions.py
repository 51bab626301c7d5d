"""File regions of a fetch response read into memory: what the socket server sends inline
(small responses) or under TLS, where sendfile cannot be used."""

from __future__ import annotations

import os
from collections.abc import Iterator

from broker.protocol.fetch import EncodedResponse
from broker.protocol.file_region import FileRegion


def inline(response: EncodedResponse) -> bytes:
    """The whole response frame as bytes, its file regions read with pread."""
    return b"".join(read_region(chunk) if isinstance(chunk, FileRegion) else chunk
                    for chunk in response.chunks)


def slices(region: FileRegion, size: int) -> Iterator[bytes]:
    """A region read ``size`` bytes at a time: under TLS a fetch of a large partition
    holds at most that much plaintext at once."""
    for start in range(0, region.length, size):
        yield read_region(FileRegion(region.fd, region.position + start,
                                      min(size, region.length - start)))


def read_region(region: FileRegion) -> bytes:
    data = os.pread(region.fd, region.length, region.position) if region.length else b""
    if len(data) != region.length:
        # The file shrank under us: the frame can no longer be completed.
        raise ConnectionError("segment file truncated during a fetch")
    return data
