"""Full-resolution output: motion predicted at the working size, pixels rendered at any size.

The U-Net predicts each frame as the first frame warped by a flow plus a residual. Both are
smooth, so they are predicted at the small working size (:func:`working_size`, the sizes the
worker warms up) and applied to the full-resolution input: the flow is upsampled and the
full-resolution image warped by it (so every pixel keeps the input's sharpness), the residual
is upsampled and added. Frame 0 is the input itself. Pixels whose warp source lies outside
the image (what a pan or zoom-out brings into view) are filled at full resolution by
:func:`workers.model.imaging.fill.fill_replicated`: the warp's border replication blurred more the
farther the source lies outside, so the strip continues the picture without a seam.

The cost of the U-Net does not grow with the requested size; only the warp does, a few
operations per output pixel. Rendering is a separate step after the model, so later steps
(compositing, encoding) see plain frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from PIL import Image

from workers.model.imaging.brush import BrushPlan
from workers.model.imaging.fill import fill_replicated
from workers.model.networks.motion_unet import MotionUNet, pixel_centres, warp
from workers.model.pipelines.animation import AnimationPipeline, Conditions, StepCallback
from workers.model.pipelines.generation import GenerationParams

# The long side the U-Net runs at for a larger request: the shipped models' training size.
WORKING_SIDE = 64
# Output frames rendered together: bounds the memory of a 1024 px, 32-frame video.
CHUNK = 4
# A brushed job's camera is still when the model's flow moves less than this (working-size
# pixels per frame, averaged over the frame): the model's own imprecision on a still prompt
# (about 0.05) would otherwise wobble the background the brush leaves still by a few tenths of
# a pixel at 512 px. Every prompted camera motion moves far faster.
STILL_PX_PER_FRAME = 0.15


def working_size(
    height: int, width: int, side: int = WORKING_SIDE, multiple: int = 8
) -> tuple[int, int]:
    """(height, width) the U-Net runs at for a requested size: the size itself up to ``side``,
    else the aspect ratio scaled to a long side of ``side`` (sides multiples of ``multiple``)."""
    if max(height, width) <= side:
        return height, width
    scale = side / max(height, width)
    return (
        max(multiple, round(height * scale / multiple) * multiple),
        max(multiple, round(width * scale / multiple) * multiple),
    )


def renders(height: int, width: int, side: int = WORKING_SIDE) -> bool:
    """Whether a request of this size runs at a working size and is rendered up."""
    return working_size(height, width, side) != (height, width)


def downsample(image: npt.NDArray[np.uint8], height: int, width: int) -> npt.NDArray[np.uint8]:
    """The image at (height, width), antialiased (PIL's resampling widens its filter)."""
    small = Image.fromarray(image).resize((width, height), Image.Resampling.BICUBIC)
    return np.array(small, dtype=np.uint8)


@dataclass(frozen=True)
class WorkingClip:
    """The model's output at the working size, split as the U-Net builds it: ``frames``
    (F, 3, h, w) in [-1, 1] equal ``warp(image, flow) + residual``; frame 0 has zero flow and
    zero residual."""

    image: torch.Tensor  # (1, 3, h, w)
    frames: torch.Tensor
    flow: torch.Tensor  # (F, 2, h, w), grid_sample units
    residual: torch.Tensor  # (F, 3, h, w)


def final_flow(
    pipe: AnimationPipeline,
    latents: torch.Tensor,
    conditions: Conditions,
    guidance: torch.Tensor,
    scheduler: Any = None,
) -> torch.Tensor:
    """The flow (F, 2, h, w) of the clean clip: one eager U-Net pass at the last timestep.

    Compiled and ahead-of-time packaged U-Nets return only the frames, so the flow comes from
    the model's own forward (the class's, past any compiled or cached wrapper), run once on
    the clean latents with the conditioning the clip was denoised with. ``scheduler``: the one
    the clip was denoised with when it is not the pipeline's (a batched job has its own).
    """
    unet = pipe.unet
    if not isinstance(unet, MotionUNet):
        raise TypeError(f"rendering needs a MotionUNet, got {type(unet).__name__}")
    scheduler = scheduler or pipe.scheduler
    t = scheduler.timesteps[-1]
    model_in = scheduler.scale_model_input(latents, t).repeat(conditions.passes, 1, 1, 1, 1)
    model_in = torch.cat([model_in.to(unet.dtype), conditions.latents], dim=2)
    extra = {"guidance_scale": guidance.to(unet.dtype)} if pipe.guidance_distilled else {}
    out = MotionUNet.forward(
        unet,
        model_in,
        t,
        encoder_hidden_states=conditions.context,
        added_time_ids=conditions.time_ids,
        **extra,
    )
    assert not isinstance(out, tuple) and out.flow is not None
    flow: torch.Tensor = out.flow[-1].float()  # the last pass is the image + text one
    return flow


@torch.inference_mode()
def predict(
    pipe: AnimationPipeline,
    image: npt.NDArray[np.uint8],
    params: GenerationParams,
    on_step: StepCallback | None = None,
) -> WorkingClip:
    """Run the model on ``image`` (at the working size) and split its clip into flow and
    residual; the frames are exactly those ``pipe(...)`` returns before rounding."""
    latents, conditions = pipe.generate(image, params, on_step)
    if not bool(torch.isfinite(latents).all()):
        raise ValueError("the denoiser produced non-finite latents (NaN or inf)")
    guidance = params.guidance(latents.device)
    return split_clip(latents, conditions, final_flow(pipe, latents, conditions, guidance))


def split_clip(latents: torch.Tensor, conditions: Conditions, flow: torch.Tensor) -> WorkingClip:
    """The denoised clip (1, F, 3, h, w) and its flow as a :class:`WorkingClip`: the residual
    is what the warp of the conditioning image by the flow leaves; frame 0 has neither."""
    frames = latents[0].float().clamp(-1, 1)
    small = conditions.latents[-1:, 0].float()
    residual = frames - warp(small, flow, frames.shape[0])
    flow[0] = 0
    residual[0] = 0
    return WorkingClip(small, frames, flow, residual)


def outside(grid: torch.Tensor) -> torch.Tensor:
    """(N, 1, H, W): 1.0 where a sampling grid (N, H, W, 2) points outside the image."""
    return (grid.abs() > 1).any(dim=-1).unsqueeze(1).float()


def sampling_grid(flow: torch.Tensor) -> torch.Tensor:
    """grid_sample's grid (N, H, W, 2) of a flow (N, 2, H, W)."""
    height, width = flow.shape[-2:]
    return pixel_centres(height, width, flow.device)[None] + flow.permute(0, 2, 3, 1)


def to_uint8(frames: torch.Tensor) -> npt.NDArray[np.uint8]:
    """(N, 3, H, W) in [-1, 1] to (N, H, W, 3) uint8."""
    out = ((frames.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    array: npt.NDArray[np.uint8] = out.permute(0, 2, 3, 1).cpu().numpy()
    return array


def outside_distance(grid: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(N, H, W): how far, in the image's pixels, each sampling point of ``grid`` (N, H, W, 2)
    lies outside an image of (height, width); 0 inside."""
    dx = (grid[..., 0].abs() - 1).clamp(min=0) * (width / 2)
    dy = (grid[..., 1].abs() - 1).clamp(min=0) * (height / 2)
    return torch.hypot(dx, dy)


@torch.inference_mode()
def render(
    image: npt.NDArray[np.uint8],
    clip: WorkingClip,
    fill: bool = True,
    brush: BrushPlan | None = None,
) -> npt.NDArray[np.uint8]:
    """Frames (F, H, W, 3 uint8) at the size of ``image`` (H, W, 3 uint8): the full-resolution
    image warped by the upsampled flow plus the upsampled residual, the strip that came into
    view filled (:func:`fill_replicated`; with ``fill=False`` the warp's border replication),
    frame 0 the image itself. With ``brush``, each point the flow samples is moved again by
    the brushed regions' motion."""
    height, width = image.shape[:2]
    count = clip.flow.shape[0]
    # On 0-255 levels throughout: the full-size tensors skip a rescale pass each.
    full = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float()
    # Near the strip that came into view the working-size residual corrects the warp's border
    # streaks; upsampled, it would bleed that correction into the sharp warp beside the strip.
    unknown = outside(sampling_grid(clip.flow))
    residual = clip.residual * (1 - F.max_pool2d(unknown, 3, stride=1, padding=1)) * 127.5
    # Flow and residual upsampled in one call per chunk.
    working = torch.cat([clip.flow, residual], dim=1)
    base = pixel_centres(height, width)[None]
    out = np.empty((count, height, width, 3), dtype=np.uint8)
    out[0] = image
    for start in range(1, count, CHUNK):
        stop = min(start + CHUNK, count)
        up = F.interpolate(
            working[start:stop], size=(height, width), mode="bilinear", align_corners=False
        )
        grid = base + up[:, :2].permute(0, 2, 3, 1)
        if brush is None:
            source = full.expand(stop - start, -1, -1, -1)
            frames = F.grid_sample(
                source, grid, mode="bilinear", padding_mode="border", align_corners=False
            )
        else:
            frames = brush.sample(full, grid, start)
        frames += up[:, 2:5]
        if fill:
            distance = outside_distance(grid, height, width)
            for index in range(stop - start):
                strip = distance[index] > 0
                frames[index] = fill_replicated(frames[index], strip, distance[index])
        levels = frames.clamp_(0, 255).round_().to(torch.uint8)
        out[start:stop] = levels.permute(0, 2, 3, 1).numpy()
    return out


def still_camera(clip: WorkingClip) -> WorkingClip:
    """``clip`` as it is, or with no flow and no residual when its camera moves less than
    :data:`STILL_PX_PER_FRAME` (then the brushed regions are all that moves)."""
    height, width = clip.flow.shape[-2:]
    pixels = clip.flow.abs() * torch.tensor([width / 2, height / 2])[:, None, None]
    steps = torch.arange(1, clip.flow.shape[0], dtype=torch.float32)
    if steps.numel() == 0:
        return clip
    per_frame = pixels[1:].mean(dim=(1, 2, 3)) / steps
    if float(per_frame.max()) >= STILL_PX_PER_FRAME:
        return clip
    small = clip.image.expand_as(clip.frames)
    return WorkingClip(clip.image, small, torch.zeros_like(clip.flow), torch.zeros_like(small))


def upscale(frames: npt.NDArray[np.uint8], height: int, width: int) -> npt.NDArray[np.uint8]:
    """Frames (F, h, w, 3) resized to (height, width), bicubic: for models that cannot be
    rendered (no flow), and the "today's model upscaled" baseline of the evaluation."""
    resized = [
        np.asarray(Image.fromarray(f).resize((width, height), Image.Resampling.BICUBIC))
        for f in frames
    ]
    return np.stack(resized)


def render_job(
    pipe: object,
    image: npt.NDArray[np.uint8],
    params: GenerationParams,
    on_step: StepCallback | None = None,
    brush: BrushPlan | None = None,
) -> npt.NDArray[np.uint8]:
    """A job's frames at the size of ``image`` (the requested one): the model runs at
    :func:`working_size` and :func:`render` brings its clip to full resolution, with
    ``brush``'s regions moving. A pipeline without a flow (an SVD checkpoint) has its frames
    upscaled instead, the brush then moving each frame's pixels."""
    height, width = image.shape[:2]
    small = downsample(image, *working_size(height, width))
    if isinstance(pipe, AnimationPipeline) and isinstance(pipe.unet, MotionUNet):
        clip = predict(pipe, small, params, on_step)
        if brush is None:
            return render(image, clip)
        return render(image, still_camera(clip), brush=brush)
    frames: npt.NDArray[np.uint8] = pipe(small, params, on_step)  # type: ignore[operator]
    frames = upscale(frames, height, width)
    return frames if brush is None else moved(frames, brush)


def moved(frames: npt.NDArray[np.uint8], plan: BrushPlan) -> npt.NDArray[np.uint8]:
    """Frames (F, H, W, 3) each moved by the brush's motion at its index (frame 0 kept)."""
    height, width = frames.shape[1:3]
    base = pixel_centres(height, width)[None]
    out = frames.copy()
    with torch.inference_mode():
        for t in range(1, frames.shape[0]):
            pixels = torch.from_numpy(np.ascontiguousarray(frames[t])).permute(2, 0, 1)[None]
            shifted = plan.sample(pixels.float(), base, t)[0].clamp(0, 255).round()
            out[t] = shifted.to(torch.uint8).permute(1, 2, 0).numpy()
    return out
