"""A job's inputs as computed once at the edge, then passed down to its record.

The submit hashes the image once, decodes it at most once (validation) and packs every input
image into the one stored value once; the record, the idempotency fingerprint, placement (which
workers hold the image's template) and the workers all read what was computed here.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from animfleet.job_inputs import MASK, JobInputs
from dispatcher.inputs import MAX_IMAGE_BYTES, check_image

# Images whose check is remembered by their digest (a few hundred bytes each).
RECENT_IMAGES = 4096


@dataclass(frozen=True)
class CheckedImage:
    """An image that passed :func:`dispatcher.inputs.check_image`: its size, and its sha256 so
    far (the fingerprint and the record's digest go on from it: the bytes are read once)."""

    width: int
    height: int
    sha256: str
    image_hash: hashlib._Hash = field(repr=False, compare=False)

    @classmethod
    def known(cls, image: bytes, width: int, height: int) -> CheckedImage:
        """An image whose check passed elsewhere, of ``width`` x ``height``: hashed, not
        decoded."""
        image_hash = hashlib.sha256(image)
        return cls(width, height, image_hash.hexdigest(), image_hash)


class ImageChecks:
    """Checks input images, remembering the answer for the most recent ones by digest.

    The check is a pure function of the bytes, so an image submitted again (the same bytes:
    the same digest) is not decoded again; every other image is checked in full.
    """

    def __init__(self, most: int = RECENT_IMAGES) -> None:
        self.most = most
        self._sizes: dict[str, tuple[int, int]] = {}  # oldest first
        self._lock = threading.Lock()

    def check(self, image: bytes) -> CheckedImage:
        """Raises :class:`dispatcher.inputs.InvalidInput` as ``check_image`` does."""
        if not isinstance(image, bytes | bytearray) or not 0 < len(image) <= MAX_IMAGE_BYTES:
            check_image(image)  # raises, naming the type or the size, before any hashing
        known = CheckedImage.known(image, 0, 0)
        with self._lock:
            size = self._sizes.get(known.sha256)
        if size is None:
            _, width, height = check_image(image)
            size = width, height
            with self._lock:
                self._sizes[known.sha256] = size
                if len(self._sizes) > self.most:
                    del self._sizes[next(iter(self._sizes))]
        return CheckedImage(*size, known.sha256, known.image_hash)


@dataclass(frozen=True)
class PreparedInputs:
    """The image's decoded size, the digests the record holds and the bytes stored.

    ``image_sha256`` keys a worker's template of the image; ``mask_sha256`` is the mask's
    (recorded as ``params.mask``); ``packed`` is :meth:`animfleet.job_inputs.JobInputs.pack`
    of the image and its extra images (mask, control images, brushed regions' masks).
    """

    width: int
    height: int
    image_sha256: str
    mask_sha256: str | None
    packed: bytes
    # The sha256 state after the image's bytes: the fingerprint goes on from it.
    image_hash: hashlib._Hash = field(repr=False, compare=False)

    @classmethod
    def of(
        cls,
        image: bytes,
        checked: CheckedImage,
        mask: bytes | None = None,
        mask_sha256: str | None = None,
        extras: Mapping[str, bytes] | None = None,
    ) -> PreparedInputs:
        """The inputs of an image that passed its check, its ``mask`` (with the digest its
        check computed) and other ``extras`` by input name."""
        stored = {**({MASK: mask} if mask is not None else {}), **(extras or {})}
        return cls(
            width=checked.width,
            height=checked.height,
            image_sha256=checked.sha256,
            mask_sha256=mask_sha256,
            packed=JobInputs(image, stored).pack(),
            image_hash=checked.image_hash,
        )
