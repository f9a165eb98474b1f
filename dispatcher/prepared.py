"""A job's inputs as computed once at the edge, then passed down to its record.

The submit decodes the image once (validation), hashes it once and packs every input image
into the one stored value once; the record, the idempotency fingerprint, placement (which
workers hold the image's template) and the workers all read what was computed here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from animfleet.job_inputs import MASK, JobInputs


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
    # The sha256 state after the image's bytes: the fingerprint goes on from it, so the image
    # is read once for both digests.
    image_hash: hashlib._Hash = field(repr=False, compare=False)

    @classmethod
    def of(
        cls,
        image: bytes,
        size: tuple[int, int],
        mask: bytes | None = None,
        mask_sha256: str | None = None,
        extras: Mapping[str, bytes] | None = None,
    ) -> PreparedInputs:
        """The inputs of a validated image of ``size`` (width, height, from its check), its
        ``mask`` (with the digest its check computed) and other ``extras`` by input name."""
        image_hash = hashlib.sha256(image)
        stored = {**({MASK: mask} if mask is not None else {}), **(extras or {})}
        return cls(
            width=size[0],
            height=size[1],
            image_sha256=image_hash.hexdigest(),
            mask_sha256=mask_sha256,
            packed=JobInputs(image, stored).pack(),
            image_hash=image_hash,
        )
