"""Add-ons at submit: control images taken off the request, and whether a region serves the
add-ons a job asks for, with or without an image as each needs.

What a region serves is read from its Redis (what its workers advertised) and kept for
``ttl_s``, like the deployments in :mod:`dispatcher.version_pick`: a new add-on is accepted
within that of a worker advertising it.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis

from animfleet.addons import AddonUse, control_input
from animfleet.region.served_addons import RegionAddons
from dispatcher.inputs import InvalidInput, check_image


def take_images(addons: Any) -> tuple[Any, dict[str, bytes]]:
    """Split the control images off a caller's add-ons.

    Each add-on (a mapping or model) may carry ``image``: the control image's bytes, checked
    like the job's image (errors name ``addons.<i>.image``). Returns the add-ons with each
    image replaced by its ``image_sha256``, and the images by input name
    (:func:`animfleet.addons.control_input`). Anything else is left for the request's own
    validation to judge.
    """
    if not isinstance(addons, Sequence) or isinstance(addons, str | bytes):
        return addons, {}
    plain: list[Any] = []
    images: dict[str, bytes] = {}
    for index, addon in enumerate(addons):
        fields = dict(addon) if isinstance(addon, Mapping) else _fields(addon)
        if fields is None:
            plain.append(addon)
            continue
        if fields.get("image_sha256") is not None:
            raise InvalidInput(
                f"addons.{index}.image_sha256",
                "is set by the dispatcher from the image; send the control image as image",
            )
        image = fields.pop("image", None)
        fields.pop("image_sha256", None)
        if image is not None:
            if not isinstance(image, bytes | bytearray):
                raise InvalidInput(
                    f"addons.{index}.image", f"must be bytes, got {type(image).__name__}"
                )
            check_image(bytes(image), f"addons.{index}.image")
            fields["image_sha256"] = hashlib.sha256(image).hexdigest()
            images[control_input(str(fields.get("name")))] = bytes(image)
        plain.append(fields)
    return plain, images


def _fields(addon: Any) -> dict[str, Any] | None:
    dump = getattr(addon, "model_dump", None)
    return dict(dump()) if callable(dump) else None


class AddonChecker:
    """Checks requested add-ons against a short-lived copy of each region's served set."""

    def __init__(self, redis_of: Callable[[str], redis.Redis], ttl_s: float = 1.0) -> None:
        self.redis_of, self.ttl_s = redis_of, ttl_s
        self._served: dict[str, tuple[float, frozenset[str], frozenset[str]]] = {}
        self._lock = threading.Lock()

    def _read(self, region: str) -> tuple[frozenset[str], frozenset[str]]:
        with self._lock:
            held = self._served.get(region)
        if held is not None and time.monotonic() - held[0] < self.ttl_s:
            return held[1], held[2]
        advertised = RegionAddons(self.redis_of(region), region)
        names, with_image = advertised.served(), advertised.with_image()
        with self._lock:
            self._served[region] = (time.monotonic(), names, with_image)
        return names, with_image

    def served(self, region: str) -> frozenset[str]:
        """The add-ons ``region``'s workers serve (cached for ``ttl_s``)."""
        return self._read(region)[0]

    def with_image(self, region: str) -> frozenset[str]:
        """Those of them that take a control image."""
        return self._read(region)[1]

    def serves(self, region: str, addons: Sequence[AddonUse]) -> bool:
        """Whether ``region`` serves every add-on in ``addons`` as asked (always, for none)."""
        if not addons:
            return True
        try:
            self.check(region, addons)
        except InvalidInput:
            return False
        return True

    def check(self, region: str, addons: Sequence[AddonUse]) -> None:
        """Raises :class:`InvalidInput` for an add-on ``region`` lacks (field ``addons``), or
        one given a control image it does not take, or lacking one it needs
        (``addons.<i>.image``)."""
        if not addons:
            return
        served, with_image = self._read(region)
        missing = sorted({a.name for a in addons} - served)
        if missing:
            known = ", ".join(sorted(served)) or "none"
            raise InvalidInput(
                "addons", f"the region serves no add-on {', '.join(missing)} (it serves: {known})"
            )
        for index, addon in enumerate(addons):
            needs = addon.name in with_image
            if needs and addon.image_sha256 is None:
                raise InvalidInput(
                    f"addons.{index}.image",
                    f"add-on {addon.name!r} needs a control image (PNG, JPEG or WebP)",
                )
            if not needs and addon.image_sha256 is not None:
                raise InvalidInput(
                    f"addons.{index}.image", f"add-on {addon.name!r} takes no control image"
                )
