"""The template cache: what a worker computes from an input image alone, kept per image.

A template is keyed by ``sha256(image bytes as submitted)`` and holds the decoded, oriented,
fitted frame at each size asked for, the conditioning features (the image latent and the CLIP
image token) of each box the model runs on (the whole frame, or a mask's box), and each mask's
fitted region (keyed by the mask's own hash). None of it depends on the prompt, the seed or the
step, so every request with the same image (and mask) reuses it. Values derived from a frame
and a job's other inputs (a brushed job's motion fields, :mod:`workers.model.imaging.brush`) are
kept with the image's template too (:meth:`TemplateCache.derived`). Entries live in worker memory
under a byte cap, least recently used first out; they are built on one background thread, so a
load never runs inside a denoising step, and a request for a template being built waits for
that build instead of repeating it. :meth:`TemplateCache.held` lists the hashes held, for
placement to prefer a worker that holds a job's template.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch

from workers.model.imaging.mask import Box, MaskRegion

Pixels = npt.NDArray[np.uint8]
# The image latent and image token of one box (see AnimationPipeline.image_features).
Features = tuple[torch.Tensor, torch.Tensor]
Prepare = Callable[[bytes, int, int], Pixels]
Encode = Callable[[Pixels], Features]
Regionize = Callable[[bytes, int, int], MaskRegion]
DEFAULT_MAX_BYTES = 256 * 2**20
Derived = TypeVar("Derived")


def content_hash(data: bytes) -> str:
    """The key of an image's template (and of a mask in it): the hex sha256 of the bytes."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Request:
    """What a job needs of a template: the frame at a size, and a mask's region and box."""

    width: int
    height: int
    mask: str | None = None  # the mask's hash

    @property
    def size(self) -> tuple[int, int]:
        return self.width, self.height


@dataclass
class Template:
    """Everything cached for one image; never changed once handed out (a load makes a new one)."""

    key: str
    frames: dict[tuple[int, int], Pixels] = field(default_factory=dict)  # (width, height)
    regions: dict[Request, MaskRegion] = field(default_factory=dict)
    features: dict[tuple[int, int, Box], Features] = field(default_factory=dict)
    # Values derived from a frame and other inputs (each with ``nbytes``), by their key.
    derived: dict[Hashable, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        arrays = sum(frame.nbytes for frame in self.frames.values())
        masks = sum(r.inside.nbytes + r.alpha.nbytes for r in self.regions.values())
        tensors = sum(t.element_size() * t.numel() for f in self.features.values() for t in f)
        derived = sum(int(getattr(value, "nbytes", 0)) for value in self.derived.values())
        return arrays + masks + tensors + derived

    def has(self, request: Request, encoded: bool) -> bool:
        if request.size not in self.frames:
            return False
        if request.mask is not None and request not in self.regions:
            return False
        return not encoded or self.box_features(request) is not None

    def box(self, request: Request) -> Box | None:
        """The box the model runs on: the mask's, or the whole frame without a mask."""
        if request.mask is None:
            return Box(0, 0, request.height, request.width)
        region = self.regions.get(request)
        return None if region is None else region.box

    def box_features(self, request: Request) -> Features | None:
        """The features of the request's box, if computed."""
        box = self.box(request)
        return None if box is None else self.features.get((*request.size, box))


class TemplateCache:
    """Templates in worker memory, at most ``max_bytes`` of them, least recently used first out.

    ``prepare`` decodes an image to a (height, width, 3) frame; ``regionize`` fits a mask to a
    frame; ``encode`` computes a box's features from its pixels (``None``: the model takes none
    this way, so only frames and regions are cached).
    """

    def __init__(
        self,
        prepare: Prepare,
        regionize: Regionize,
        encode: Encode | None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.prepare, self.regionize, self.encode = prepare, regionize, encode
        self.max_bytes = max_bytes
        self.hits = self.misses = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Template] = OrderedDict()
        self._loading: dict[tuple[str, Request], Future[Template]] = {}
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="templates")

    def held(self) -> list[str]:
        """The image hashes whose templates are held, least recently used first."""
        with self._lock:
            return list(self._entries)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(template.nbytes for template in self._entries.values())

    def prefetch(
        self,
        image: bytes,
        width: int,
        height: int,
        mask: bytes | None = None,
        digests: tuple[str | None, str | None] = (None, None),
    ) -> Future[Template]:
        """Start loading ``image``'s template at ``width`` x ``height`` (with ``mask``'s region
        and box features) on the background thread; a held one is returned done, at once.
        ``digests``: the image's and the mask's sha256 as the job's record holds them (computed
        once at submit); a missing one is computed here."""
        key = digests[0] or content_hash(image)
        mask_key = None if mask is None else digests[1] or content_hash(mask)
        request = Request(width, height, mask_key)
        with self._lock:
            held = self._entries.get(key)
            if held is not None and held.has(request, self.encode is not None):
                self._entries.move_to_end(key)
                self.hits += 1
                done: Future[Template] = Future()
                done.set_result(held)
                return done
            loading = self._loading.get((key, request))
            if loading is not None:
                return loading
            self.misses += 1
            future = self._loader.submit(self._load, key, image, request, mask)
            self._loading[(key, request)] = future
            return future

    def get(self, image: bytes, width: int, height: int, mask: bytes | None = None) -> Template:
        """``image``'s template, loading it (on the background thread) if it is not held.
        (A job's own template: ``prefetch(..., digests).result()``, by its record's digests.)"""
        return self.prefetch(image, width, height, mask).result()

    def derived(
        self,
        image: bytes,
        width: int,
        height: int,
        key: Hashable,
        build: Callable[[Pixels], Derived],
        digest: str | None = None,
    ) -> Derived:
        """The value ``build`` derives from ``image``'s frame at ``width`` x ``height`` (and
        whatever ``key`` names besides: a brushed job's regions), held with the image's
        template: built now (in the caller's thread) the first time, then served. ``digest``:
        the image's sha256 as the job's record holds it."""
        template = self.prefetch(image, width, height, None, (digest, None)).result()
        with self._lock:
            held = self._entries.get(template.key, template).derived.get(key)
            if held is not None:
                self.hits += 1
                return held  # type: ignore[no-any-return]
            self.misses += 1
        value = build(template.frames[(width, height)])
        with self._lock:
            current = self._entries.get(template.key)
            if current is not None:  # a new template: a job reading the held one sees no change
                grown = replace(current, derived={**current.derived, key: value})
                self._entries[template.key] = grown
                self._evict()
        return value

    def clear(self) -> None:
        """Forget every template (loads under way still finish and are kept)."""
        with self._lock:
            self._entries.clear()

    def close(self) -> None:
        self._loader.shutdown(wait=True, cancel_futures=True)

    def _load(self, key: str, image: bytes, request: Request, mask: bytes | None) -> Template:
        try:
            with self._lock:
                held = self._entries.get(key)
            # Copies, not the held dicts: a job reading the held template sees no change.
            template = Template(
                key,
                dict(held.frames) if held else {},
                dict(held.regions) if held else {},
                dict(held.features) if held else {},
                dict(held.derived) if held else {},
            )
            frame = template.frames.get(request.size)
            if frame is None:
                frame = template.frames[request.size] = self.prepare(image, *request.size)
            if mask is not None and request not in template.regions:
                template.regions[request] = self.regionize(mask, *request.size)
            box = template.box(request)
            assert box is not None  # the region is there now
            if self.encode is not None and (*request.size, box) not in template.features:
                rows, cols = box.slices
                with torch.inference_mode():
                    crop = np.ascontiguousarray(frame[rows, cols])
                    template.features[(*request.size, box)] = self.encode(crop)
            with self._lock:
                self._entries[key] = template
                self._entries.move_to_end(key)
                self._evict()
            return template
        finally:
            with self._lock:
                self._loading.pop((key, request), None)

    def _evict(self) -> None:
        """Drop least recently used templates until the rest fit the cap (lock held)."""
        total = sum(template.nbytes for template in self._entries.values())
        while self._entries and total > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            total -= dropped.nbytes
