"""The template cache: keyed by the image's hash, least recently used out under a byte cap,
built on a background thread (a request for a template being built waits for that build), and
a masked job served from a cached template gives exactly the frames of one served cold."""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from animfleet.jobs import JobParams
from workers.model import Animator, ModelError
from workers.model.imaging.mask import composite, mask_region
from workers.model.imaging.templates import TemplateCache
from workers.model.pipelines.animation import pixels_of
from workers.model.runtime.loading import prepare_image

FRAME_BYTES = 16 * 16 * 3


def _mask(height: int, width: int, rows: slice, cols: slice) -> bytes:
    inside = np.zeros((height, width), dtype=np.uint8)
    inside[rows, cols] = 255
    buffer = io.BytesIO()
    Image.fromarray(inside).save(buffer, format="PNG")
    return buffer.getvalue()


class Calls:
    """A ``prepare`` that records where it ran and can be held until released."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()

    def prepare(self, image: bytes, width: int, height: int) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        self.started.set()
        assert self.release.wait(30)
        return np.full((height, width, 3), image[0], dtype=np.uint8)


def _cache(calls: Calls, max_bytes: int = 10 * FRAME_BYTES) -> TemplateCache:
    return TemplateCache(calls.prepare, lambda m, w, h: mask_region(m, w, h, 8), None, max_bytes)


def test_templates_are_keyed_by_the_image_hash_and_built_in_the_background() -> None:
    calls = Calls()
    cache = _cache(calls)
    template = cache.get(b"\x07image", 16, 16)
    assert template.key == hashlib.sha256(b"\x07image").hexdigest()
    assert cache.held() == [template.key]
    assert calls.threads and all(name.startswith("templates") for name in calls.threads)
    assert cache.get(b"\x07image", 16, 16) is template
    assert (cache.hits, cache.misses, len(calls.threads)) == (1, 1, 1)
    cache.close()


def test_a_load_never_blocks_the_caller_and_a_second_request_joins_it() -> None:
    calls = Calls()
    calls.release.clear()
    cache = _cache(calls)
    first = cache.prefetch(b"\x01a", 16, 16)  # returns while the build is held
    assert calls.started.wait(30)
    assert not first.done()
    second = cache.prefetch(b"\x01a", 16, 16)
    assert second is first
    calls.release.set()
    assert first.result(30) is second.result(30)
    assert len(calls.threads) == 1
    cache.close()


def test_least_recently_used_templates_leave_first_under_the_byte_cap() -> None:
    calls = Calls()
    cache = _cache(calls, max_bytes=2 * FRAME_BYTES)
    keys = [cache.get(bytes([n]) + b"img", 16, 16).key for n in range(3)]
    assert cache.held() == keys[1:]  # the oldest went when the third came
    cache.get(bytes([1]) + b"img", 16, 16)  # a hit: now the most recently used
    cache.get(bytes([3]) + b"img", 16, 16)
    assert cache.held() == [keys[1], cache.held()[-1]]
    assert keys[2] not in cache.held()
    assert cache.nbytes <= 2 * FRAME_BYTES
    cache.close()


def test_a_template_larger_than_the_cap_is_used_but_not_kept() -> None:
    calls = Calls()
    cache = _cache(calls, max_bytes=FRAME_BYTES - 1)
    template = cache.get(b"\x05big", 16, 16)
    assert template.frames[(16, 16)].shape == (16, 16, 3)
    assert cache.held() == []
    cache.close()


def test_sizes_and_masks_add_to_one_template_without_changing_the_one_handed_out() -> None:
    calls = Calls()
    cache = _cache(calls)
    first = cache.get(b"\x09pic", 16, 16)
    mask = _mask(16, 32, slice(4, 12), slice(8, 24))
    second = cache.get(b"\x09pic", 32, 16, mask)
    assert second is not first and list(first.frames) == [(16, 16)]
    assert set(second.frames) == {(16, 16), (32, 16)}
    assert len(second.regions) == 1 and cache.held() == [first.key]
    cache.close()


@pytest.fixture(scope="module")
def animator(random_model: Path) -> Animator:
    return Animator(random_model)


PARAMS = JobParams(prompt="pan left", frames=4, fps=8, width=48, height=32, seed=3, steps=2)


def test_a_cache_hit_gives_the_frames_of_a_miss_and_of_the_uncached_crop(
    animator: Animator, make_image: Callable[..., bytes]
) -> None:
    image = make_image(96, 64, 4)
    mask = _mask(64, 96, slice(8, 40), slice(30, 60))
    animator.templates.clear()
    miss = animator.animate(image, PARAMS, mask=mask)
    assert animator.templates.held() == [hashlib.sha256(image).hexdigest()]
    hit = animator.animate(image, PARAMS, mask=mask)
    assert np.array_equal(miss, hit)
    # The same crop through the pipeline with nothing cached: the features are the same.
    region = mask_region(mask, 48, 32, 8)
    rows, cols = region.box.slices
    fitted = prepare_image(image, 48, 32)
    crop = np.ascontiguousarray(fitted[rows, cols])
    plain = animator.run_frames(crop, PARAMS)
    expected = composite(plain, fitted[rows, cols], region.alpha[rows, cols])
    assert np.array_equal(miss[:, rows, cols], expected)
    assert (miss[:, ~region.inside] == fitted[~region.inside]).all()


def test_the_cached_features_are_the_pipelines_own(animator: Animator) -> None:
    crop = np.random.default_rng(0).integers(0, 256, (16, 24, 3), dtype=np.uint8)
    with torch.inference_mode():
        latent, token = animator.pipeline.image_features(pixels_of(crop, "cpu"))
        conditions = animator.pipeline.condition(pixels_of(crop, "cpu"), ["x"], 4, 8)
        cached = animator.pipeline.condition(pixels_of(crop, "cpu"), ["x"], 4, 8, (latent, token))
    assert torch.equal(conditions.latents, cached.latents)
    assert torch.equal(conditions.context, cached.context)


def test_a_mask_that_animates_nothing_at_the_jobs_size_fails_the_job(
    animator: Animator, make_image: Callable[..., bytes]
) -> None:
    with pytest.raises(ModelError, match="mask"):
        animator.animate(make_image(96, 64), PARAMS, mask=_mask(64, 96, slice(0, 0), slice(0, 0)))


def test_an_unmasked_job_from_its_template_gives_the_pipelines_own_frames(
    animator: Animator, make_image: Callable[..., bytes]
) -> None:
    image = make_image(80, 60, 6)
    animator.templates.clear()
    cold = animator.animate(image, PARAMS)
    assert animator.templates.held() == [hashlib.sha256(image).hexdigest()]
    hit = animator.animate(image, PARAMS)
    # Nothing cached: the pipeline fits nothing and encodes the frame itself.
    plain = animator.run_frames(prepare_image(image, 48, 32), PARAMS)
    assert np.array_equal(cold, plain) and np.array_equal(hit, plain)
