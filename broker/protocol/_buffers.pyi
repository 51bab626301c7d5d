"""Types of the C module ``_buffers.c`` (see the comment at its top)."""

def uninitialized(size: int, /) -> bytearray:
    """A bytearray of ``size`` bytes that are not set: write every one before reading."""
