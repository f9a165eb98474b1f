"""The VAE decode in fp32 and in bf16: time and PSNR of the frames (the worker decodes in fp32)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from diffusers import AutoencoderKLTemporalDecoder

from workers.model.runtime.loading import ShapeBucket


def _decode(vae: AutoencoderKLTemporalDecoder, latents: torch.Tensor) -> npt.NDArray[np.uint8]:
    frames = vae.decode(latents.to(vae.dtype), num_frames=latents.shape[0]).sample
    scaled = (frames.float().clamp(-1, 1) + 1) * 127.5
    pixels: npt.NDArray[np.uint8] = scaled.round().byte().permute(0, 2, 3, 1).numpy()
    return pixels


def vae_report(
    model_dir: Path, bucket: ShapeBucket, image: npt.NDArray[np.uint8], repeats: int = 3
) -> str:
    vae = AutoencoderKLTemporalDecoder.from_pretrained(model_dir / "vae").eval()
    pixels = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 127.5 - 1
    with torch.inference_mode():
        latent = vae.encode(pixels).latent_dist.mode()
        generator = torch.Generator().manual_seed(0)
        noise = torch.randn(bucket.frames, *latent.shape[1:], generator=generator)
        latents = latent.expand(bucket.frames, -1, -1, -1) + 0.1 * noise
        results = {}
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            vae.to(dtype)
            frames = _decode(vae, latents)
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                _decode(vae, latents)
                times.append(time.perf_counter() - started)
            results[name] = (frames, statistics.median(times))
    error = np.mean((results["fp32"][0].astype(float) - results["bf16"][0].astype(float)) ** 2)
    quality = float("inf") if error == 0 else 10 * np.log10(255.0**2 / error)
    return (
        f"VAE decode of {bucket.frames} frames: fp32 {results['fp32'][1]:.2f} s, bf16 "
        f"{results['bf16'][1]:.2f} s; bf16 frames vs fp32: PSNR {quality:.1f} dB"
    )
