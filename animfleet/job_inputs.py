"""A job's input images as the one blob a region stores for it.

Every path that moves a job's input (admission, the backlog, hand-offs between regions, the
cleanup of terminal jobs) moves one opaque value, so extra images (the job's mask, an add-on's
control image, a brushed region's mask) travel inside it rather than under keys of their own.
A job with only its image stores the image's bytes as they are (the layout from before extra
inputs existed); one with extra images stores :data:`MAGIC`, a JSON header line naming each
part and its length, then the parts' bytes in that order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from animfleet.errors import PermanentError

MAGIC = b"animfleet-inputs/1\n"
MASK = "mask"  # the extra holding the job's mask PNG (white animates)
REGION_PREFIX = "region:"  # extras holding brushed regions' masks (animfleet.brush.region_input)
NAME = re.compile(r"^[a-z][a-z0-9:_-]{0,63}$")


class MalformedInputs(PermanentError, ValueError):
    """A stored inputs blob that does not unpack (truncated, or a header that lies)."""


@dataclass(frozen=True)
class JobInputs:
    """The job's image and its extra images by name (:data:`MASK`, ``addon:<name>``)."""

    image: bytes
    extras: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def mask(self) -> bytes | None:
        return self.extras.get(MASK)

    @property
    def controls(self) -> dict[str, bytes]:
        """The add-ons' control images: every extra but the mask and the regions' masks."""
        return {
            name: data
            for name, data in self.extras.items()
            if name != MASK and not name.startswith(REGION_PREFIX)
        }

    @property
    def region_masks(self) -> dict[str, bytes]:
        """The motion-brush regions' masks by input name (``region:<i>``)."""
        return {n: data for n, data in self.extras.items() if n.startswith(REGION_PREFIX)}

    def pack(self) -> bytes:
        """The blob to store; just the image's bytes when there are no extras."""
        if not self.extras:
            return bytes(self.image)
        for name in self.extras:
            if not NAME.match(name):
                raise ValueError(f"input name {name!r} must match {NAME.pattern}")
        parts = [("image", bytes(self.image))] + [(n, bytes(b)) for n, b in self.extras.items()]
        header = json.dumps({"parts": [{"name": n, "bytes": len(b)} for n, b in parts]})
        return MAGIC + header.encode() + b"\n" + b"".join(b for _, b in parts)

    @classmethod
    def unpack(cls, blob: bytes) -> JobInputs:
        """The inputs a :meth:`pack` blob holds; raises :class:`MalformedInputs`."""
        if not blob.startswith(MAGIC):
            return cls(blob)  # an image (no image format starts with MAGIC)
        end = blob.find(b"\n", len(MAGIC))
        try:
            header: Any = json.loads(blob[len(MAGIC) : end]) if end > 0 else {}
            parts = [(str(p["name"]), int(p["bytes"])) for p in header["parts"]]
        except (ValueError, TypeError, KeyError) as error:
            raise MalformedInputs(f"the inputs header does not parse: {error}") from None
        sizes = sum(size for _, size in parts)
        if not parts or sizes != len(blob) - end - 1 or parts[0][0] != "image":
            raise MalformedInputs("the inputs header does not match the stored bytes")
        found: dict[str, bytes] = {}
        offset = end + 1
        for name, size in parts:
            found[name] = blob[offset : offset + size]
            offset += size
        image = found.pop("image")
        return cls(image, found)
