"""The motion brush's renderer: frame 0 is the input, everything outside the regions (past
their soft edge) is the input exactly, the content inside moves in the stroke's direction at
the asked speed (measured by phase correlation, which shares nothing with the renderer), a
curved stroke bends the flow, loops close, a mask painted over a neighbour does not drag it
in (nor smear or double the region's texture), and the fields are served by the template
cache."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from animfleet.brush import RegionUse, region_input
from animfleet.jobs import JobParams
from workers.model.animator import Animator
from workers.model.imaging.brush import brush_frames, build_motion, feather_radius
from workers.model.pipelines.render import WorkingClip, render

SIZE = 256


def _texture(size: int = SIZE, seed: int = 0) -> np.ndarray:
    """Band-limited noise: texture everywhere, no aliasing when shifted by a fraction."""
    rng = np.random.default_rng(seed)
    spectrum = np.fft.fft2(rng.standard_normal((3, size, size)))
    f = np.fft.fftfreq(size)
    spectrum *= np.exp(-(f[:, None] ** 2 + f[None, :] ** 2) / (2 * 0.08**2))
    pixels = np.real(np.fft.ifft2(spectrum)).transpose(1, 2, 0)
    pixels = (pixels - pixels.mean()) / pixels.std() * 40 + 128
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _png(inside: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(inside.astype(np.uint8) * 255).save(buffer, format="PNG")
    return buffer.getvalue()


def _box(rows: slice, cols: slice, size: int = SIZE) -> np.ndarray:
    inside = np.zeros((size, size), dtype=bool)
    inside[rows, cols] = True
    return inside


def _shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(dx, dy) that moves ``a``'s content to ``b`` (phase correlation, sub-pixel by parabola)."""
    window = np.outer(np.hanning(a.shape[0]), np.hanning(a.shape[1]))
    grey_a, grey_b = a.astype(float).mean(-1), b.astype(float).mean(-1)
    fa = np.fft.fft2((grey_a - grey_a.mean()) * window)
    fb = np.fft.fft2((grey_b - grey_b.mean()) * window)
    cross = fb * np.conj(fa)
    corr = np.real(np.fft.ifft2(cross / np.maximum(np.abs(cross), 1e-9)))
    peak = np.unravel_index(int(np.argmax(corr)), corr.shape)
    found = []
    for axis in (1, 0):
        i = peak[axis]
        n = corr.shape[axis]
        at = [peak[0], peak[1]]
        values = []
        for d in (-1, 0, 1):
            at[axis] = (i + d) % n
            values.append(corr[tuple(at)])
        offset = 0.5 * (values[0] - values[2]) / (values[0] - 2 * values[1] + values[2])
        found.append(((i + offset + n / 2) % n) - n / 2)
    return np.array(found)


def _outside(inside: np.ndarray, size: int = SIZE) -> np.ndarray:
    grown = 2 * feather_radius(size, size) + 2
    rows, cols = np.nonzero(inside)
    far = np.ones_like(inside)
    far[
        rows.min() - grown : rows.max() + grown + 1, cols.min() - grown : cols.max() + grown + 1
    ] = False
    return far


def test_flow_moves_the_region_along_the_stroke_at_its_speed_and_nothing_else() -> None:
    image = _texture()
    inside = _box(slice(64, 192), slice(48, 208))
    use = RegionUse(stroke=((0.3, 0.6), (0.7, 0.4)), speed=2.5)  # right and up
    frames = brush_frames(image, build_motion(image, [(use, _png(inside))], 8, loop=False))
    assert frames.shape == (8, SIZE, SIZE, 3)
    assert np.array_equal(frames[0], image)
    outside = _outside(inside)
    for frame in frames[1:]:
        assert np.array_equal(frame[outside], image[outside])
    core = (slice(96, 160), slice(96, 160))
    # Each pixel hands over once from one layer to the next (a two-frame cross-fade, its own
    # time): the frame pair that sees the core's handover is no step of the flow.
    moves = [_shift(frames[t][core], frames[t + 1][core]) for t in range(1, 7)]
    mean = np.median(moves, axis=0)
    direction = np.array([0.4, -0.2]) / np.hypot(0.4, -0.2)
    assert np.degrees(np.arccos(mean @ direction / np.hypot(*mean))) < 5
    assert np.hypot(*mean) == pytest.approx(2.5, rel=0.1)


def test_the_stroke_length_sets_the_speed_and_a_curved_stroke_bends_the_flow() -> None:
    image = _texture(seed=1)
    inside = _box(slice(0, SIZE), slice(0, SIZE))
    # Right along the top, then down the right-hand side: an L.
    use = RegionUse(stroke=((0.1, 0.1), (0.9, 0.1), (0.9, 0.9)))
    frames = brush_frames(image, build_motion(image, [(use, _png(inside))], 9, loop=False))
    speed = 1.6 * SIZE / 8
    top = _shift(frames[1][:64, 32:160], frames[2][:64, 32:160])
    side = _shift(frames[1][96:224, 192:], frames[2][96:224, 192:])
    assert top[0] == pytest.approx(speed, rel=0.15) and abs(top[1]) < 0.25 * speed
    assert side[1] == pytest.approx(speed, rel=0.15) and abs(side[0]) < 0.25 * speed


@pytest.mark.parametrize("kind", ["flow", "drift", "sway", "ripple", "pulse"])
def test_a_loop_ends_one_step_before_its_first_frame(kind: str) -> None:
    image = _texture(seed=2)
    inside = _box(slice(48, 208), slice(48, 208))
    stroke = ((0.3, 0.5), (0.7, 0.5))
    use = RegionUse(kind=kind, stroke=stroke, speed=3.0, amplitude=6.0)
    motion = build_motion(image, [(use, _png(inside))], 8, loop=True)
    frames = brush_frames(image, motion).astype(float)
    assert np.array_equal(frames[0], image)
    steps = [np.abs(frames[t + 1] - frames[t]).mean() for t in range(7)]
    closing = np.abs(frames[-1] - frames[0]).mean()
    assert 0 < closing <= 1.5 * np.median(steps), (closing, steps)
    outside = _outside(inside)
    assert np.array_equal(frames[3][outside], image[outside].astype(float))


def _detail(pixels: np.ndarray) -> float:
    grey = pixels.astype(float).mean(-1)
    return float((np.diff(grey, axis=0) ** 2).mean() + (np.diff(grey, axis=1) ** 2).mean())


@pytest.mark.parametrize("loop", [False, True])
def test_a_mask_painted_over_a_neighbour_does_not_drag_it_in(loop: bool) -> None:
    # A bright neighbour left of a textured region flowing right; the mask runs 5 px (at
    # 256 px: 10 px at 512) over it, as a hurried brush does.
    image = _texture(seed=5)
    image[:, :96] = 250
    inside = _box(slice(64, 192), slice(91, 224))
    use = RegionUse(kind="drift", stroke=((0.3, 0.5), (0.7, 0.5)), speed=2.5)
    frames = brush_frames(image, build_motion(image, [(use, _png(inside))], 16, loop=loop))
    region = (slice(72, 184), slice(100, 216))
    for t, frame in enumerate(frames):
        # The neighbour's brightness reaches no further than 4 px into the region...
        bright = (frame[72:184, 100:216].astype(float).mean(-1) > 240).mean(axis=0)
        assert bright.max() < 0.05, (t, bright[:8])
        # ...nor is the region's texture smeared or doubled at any frame.
        assert _detail(frame[region]) >= 0.8 * _detail(image[region]), t
    steps = [np.abs(frames[t + 1].astype(float) - frames[t]).mean() for t in range(15)]
    if loop:
        closing = np.abs(frames[-1].astype(float) - frames[0]).mean()
        assert closing <= 1.3 * np.median(steps), (closing, steps)


def test_render_composes_the_brush_with_the_models_camera_flow() -> None:
    image = _texture(64, seed=3)
    inside = _box(slice(16, 48), slice(16, 48), 64)
    use = RegionUse(stroke=((0.3, 0.5), (0.7, 0.5)), speed=2.0)
    motion = build_motion(image, [(use, _png(inside))], 4, loop=False)
    small = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 127.5 - 1
    still = WorkingClip(
        small, small.expand(4, -1, -1, -1), torch.zeros(4, 2, 64, 64), torch.zeros(4, 3, 64, 64)
    )
    assert np.array_equal(render(image, still, None, motion.plan()), brush_frames(image, motion))
    # A camera pan of 4 px per frame (content moves right) carries the brushed frame with it.
    flow = torch.zeros(4, 2, 64, 64)
    flow[:, 0] = -torch.arange(4.0)[:, None, None] * 4 * 2 / 64
    panned = WorkingClip(small, small.expand(4, -1, -1, -1), flow, torch.zeros(4, 3, 64, 64))
    frames = render(image, panned, None, motion.plan())
    brushed = brush_frames(image, motion)
    assert np.abs(frames[2][:, 12:].astype(float) - brushed[2][:, 4:56]).mean() < 1.0


def test_a_brushed_job_renders_at_any_size_with_its_fields_from_the_template_cache(
    random_model: Path,
) -> None:
    animator = Animator(random_model)
    image = _texture(96, seed=4)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    inside = _box(slice(24, 72), slice(24, 72), 96)
    params = JobParams(
        prompt="still",
        frames=4,
        fps=8,
        width=48,
        height=48,
        seed=0,
        steps=2,
        regions=(RegionUse(kind="ripple", amplitude=3.0),),
        loop=True,
    )
    inputs = {region_input(0): _png(inside)}
    first = animator.animate(buffer.getvalue(), params, inputs=inputs)
    hits = animator.templates.hits
    again = animator.animate(buffer.getvalue(), params, inputs=inputs)
    assert np.array_equal(first, again) and animator.templates.hits >= hits + 1
    assert first.shape == (4, 48, 48, 3)
    for size in (64, 128):
        sized = params.model_copy(update={"width": size, "height": size})
        assert animator.animate(buffer.getvalue(), sized, inputs=inputs).shape == (4, size, size, 3)
    with pytest.raises(Exception, match=r"regions\.0\.mask"):
        animator.animate(buffer.getvalue(), params, inputs={})
