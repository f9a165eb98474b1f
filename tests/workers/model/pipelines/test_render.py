"""Full-resolution rendering: frame 0 is the input, the warp moves full-size pixels, sizes and
aspect ratios come out as asked, the strip that comes into view is filled without a seam."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from animfleet.jobs import JobParams
from animfleet.shipped_models import SHIPPED_STUDENT_DIR
from workers.model.animator import Animator
from workers.model.networks.edge_fill import EdgeFill
from workers.model.pipelines.generation import GenerationParams
from workers.model.pipelines.render import (
    WorkingClip,
    downsample,
    outside,
    predict,
    render,
    renders,
    sampling_grid,
    to_uint8,
    working_size,
)
from workers.model.runtime.loading import Variant, load_pipeline, prepare_image


def _photo(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Smooth colours plus fine texture: detail that a low-resolution path would lose."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    smooth = np.stack([x * 200 // width, y * 200 // height, (x + y) * 100 // (width + height)], -1)
    return (smooth + rng.integers(0, 55, (height, width, 3))).astype(np.uint8)


def _clip(frames: int, height: int, width: int, shift_x: float = 0.0) -> WorkingClip:
    flow = torch.zeros(frames, 2, height, width)
    flow[1:, 0] = shift_x
    image = torch.zeros(1, 3, height, width)
    return WorkingClip(
        image, image.expand(frames, -1, -1, -1), flow, torch.zeros(frames, 3, height, width)
    )


@pytest.mark.parametrize(
    ("height", "width", "expected"),
    [
        (64, 64, (64, 64)),
        (48, 32, (48, 32)),
        (512, 512, (64, 64)),
        (1024, 1024, (64, 64)),
        (640, 512, (64, 48)),  # 4:5
        (1024, 576, (64, 32)),  # 9:16
        (576, 1024, (32, 64)),  # 16:9
    ],
)
def test_working_size_keeps_the_unet_small(
    height: int, width: int, expected: tuple[int, int]
) -> None:
    assert working_size(height, width) == expected
    assert renders(height, width) == (expected != (height, width))


@pytest.mark.parametrize(("height", "width"), [(512, 512), (640, 512), (1024, 576), (576, 1024)])
def test_frame_zero_is_the_input_and_sizes_are_as_asked(height: int, width: int) -> None:
    image = _photo(height, width)
    small_h, small_w = working_size(height, width)
    out = render(image, _clip(5, small_h, small_w, shift_x=0.1))
    assert out.shape == (5, height, width, 3) and out.dtype == np.uint8
    assert np.array_equal(out[0], image)


def test_an_identity_flow_keeps_every_frame_the_input_at_full_size() -> None:
    image = _photo(256, 256)
    out = render(image, _clip(4, 64, 64))
    assert np.abs(out.astype(int) - image[None].astype(int)).max() <= 1


def test_the_warp_moves_full_resolution_pixels() -> None:
    image = _photo(256, 256)
    pixels = 8  # a flow of 2 * 8 / 256 samples each pixel 8 pixels to its right
    out = render(image, _clip(3, 64, 64, shift_x=2 * pixels / 256))
    assert np.abs(out[1, :, : 256 - pixels].astype(int) - image[:, pixels:].astype(int)).max() <= 1


def test_the_strip_that_comes_into_view_is_filled_without_a_seam() -> None:
    image = _photo(256, 256)
    clip = _clip(3, 64, 64, shift_x=0.5)  # the right quarter comes into view
    out, border = render(image, clip), render(image, clip, fill=False)
    # Away from the strip the warp alone; in it, not the border's streaks.
    assert np.array_equal(out[1, :, :180], border[1, :, :180])
    assert np.abs(out[1, :, 200:].astype(int) - border[1, :, 200:].astype(int)).max() > 10
    # No colour the image lacks, and no step where the strip meets the warp.
    for channel in range(3):
        values = out[1, :, 192:, channel]
        assert (
            image[..., channel].min() <= values.min() <= values.max() <= image[..., channel].max()
        )
    seam = np.abs(out[1, :, 192].astype(int) - out[1, :, 191].astype(int)).mean()
    inside = np.abs(out[1, :, 150].astype(int) - out[1, :, 149].astype(int)).mean()
    assert seam <= 2 * inside + 2


@pytest.fixture(scope="module")
def student() -> object:
    return load_pipeline(SHIPPED_STUDENT_DIR, Variant(name="student"))


def test_the_shipped_model_renders_at_512_with_its_own_motion(student: object) -> None:
    image = _photo(512, 512)
    small = downsample(image, 64, 64)
    params = GenerationParams("pan left", 4, 8, 4, 1.0, 1.0, seed=0)
    clip = predict(student, small, params)  # type: ignore[arg-type]
    plain = student(small, params)  # type: ignore[operator]
    # The working clip is the plain pipeline's, but for frame 0, which the pipeline pins to
    # the input.
    assert np.array_equal(to_uint8(clip.frames)[1:], plain[1:])
    assert np.array_equal(plain[0], small)
    # At the working size the renderer is the model (frames 1.., away from the strip).
    at_working = render(small, clip)
    unknown = F.max_pool2d(outside(sampling_grid(clip.flow)), 3, stride=1, padding=1)
    kept = (unknown[1:, 0] == 0).numpy()
    assert np.abs(at_working[1:].astype(int) - plain[1:].astype(int))[kept].max() <= 1
    frames = render(image, clip)
    assert frames.shape == (4, 512, 512, 3) and np.array_equal(frames[0], image)


def test_a_dark_sparse_image_keeps_its_first_frame(student: object) -> None:
    stars = np.zeros((256, 256, 3), dtype=np.uint8)
    rng = np.random.default_rng(1)
    for y, x in rng.integers(0, 254, (150, 2)):
        stars[y : y + 2, x : x + 2] = 230
    params = GenerationParams("zoom out", 3, 8, 4, 1.0, 1.0)
    clip = predict(student, downsample(stars, 64, 64), params)  # type: ignore[arg-type]
    assert np.array_equal(render(stars, clip)[0], stars)


def test_shipped_fill_loads_with_from_pretrained() -> None:
    directory = Path(SHIPPED_STUDENT_DIR).parent / "animfleet-edge-fill"
    fill = EdgeFill.from_pretrained(str(directory))
    frames = torch.rand(2, 3, 64, 64) * 2 - 1
    unknown = torch.zeros(2, 1, 64, 64)
    unknown[..., 48:] = 1
    with torch.no_grad():
        out = fill(frames, unknown)
    assert torch.equal(out[..., :48], frames[..., :48])  # what is visible stays
    assert not torch.equal(out[..., 48:], frames[..., 48:])  # trained: the strip is predicted


def test_a_worker_asked_for_512_px_runs_the_unet_at_its_working_size(
    make_image: Callable[..., bytes],
) -> None:
    animator = Animator(SHIPPED_STUDENT_DIR, Variant(name="student", steps=2))
    shapes: list[tuple[int, ...]] = []
    animator.pipeline.unet.register_forward_pre_hook(
        lambda _, args: shapes.append(tuple(args[0].shape))
    )
    params = JobParams(prompt="pan up", frames=3, fps=8, width=288, height=512, seed=0)
    frames = animator.animate(make_image(300, 500), params)
    assert frames.shape == (3, 512, 288, 3)
    assert shapes and all(shape[-2:] == (64, 32) for shape in shapes)  # 9:16 at 64 px


def test_a_masked_job_at_256_px_renders_its_box_and_keeps_the_rest() -> None:
    animator = Animator(SHIPPED_STUDENT_DIR, Variant(name="student", steps=2))
    image = io.BytesIO()
    Image.fromarray(_photo(400, 400)).save(image, format="PNG")
    mask = np.zeros((400, 400), dtype=np.uint8)
    mask[100:300, 50:250] = 255
    mask_png = io.BytesIO()
    Image.fromarray(mask).save(mask_png, format="PNG")
    params = JobParams(prompt="pan left", frames=3, fps=8, width=256, height=256, seed=0)
    frames = animator.animate(image.getvalue(), params, mask=mask_png.getvalue())
    still = prepare_image(image.getvalue(), 256, 256)
    assert frames.shape == (3, 256, 256, 3) and np.array_equal(frames[0], still)
    assert np.array_equal(frames[:, :40], np.repeat(still[None, :40], 3, axis=0))  # unmasked
    assert not np.array_equal(frames[2], still)  # the masked box moves
