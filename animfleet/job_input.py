"""A job's stored input: the image as submitted, and its optional mask, in one Redis value.

Every path that moves an input (admission, the backlog, a spill to another region, deletion
once the job ends) copies one value; packing the mask beside the image lets it travel every one
of them unchanged. A plain image (every job without a mask, and every input stored before masks
existed) is stored as its own bytes; with a mask the value is a small frame that no image
format starts with: ``MAGIC``, the image's length as 8 big-endian bytes, the image, the mask.
"""

from __future__ import annotations

from animfleet.errors import PermanentError

MAGIC = b"AFINPUT1"
_LENGTH = 8


class BrokenInput(PermanentError, ValueError):
    """A stored input that starts like a packed one but does not hold what it says."""


def pack_input(image: bytes, mask: bytes | None = None) -> bytes:
    """The value to store for ``image`` and its ``mask`` (none: the image's own bytes)."""
    if mask is None:
        return bytes(image)
    return MAGIC + len(image).to_bytes(_LENGTH, "big") + bytes(image) + bytes(mask)


def unpack_input(stored: bytes) -> tuple[bytes, bytes | None]:
    """(image, mask or ``None``) of a stored value; raises :class:`BrokenInput`."""
    if not stored.startswith(MAGIC):
        return stored, None
    head = len(MAGIC) + _LENGTH
    if len(stored) < head:
        raise BrokenInput(f"a packed input of {len(stored)} bytes is shorter than its header")
    size = int.from_bytes(stored[len(MAGIC) : head], "big")
    if size == 0 or head + size >= len(stored):
        raise BrokenInput(f"a packed input of {len(stored)} bytes cannot hold {size} image bytes")
    return stored[head : head + size], stored[head + size :]
