"""Each family at its standard size on a GPU: the stock pipeline call vs the profile's options.

Random weights at the released checkpoints' real sizes (speed does not depend on the
weights' values); text and image conditioning go in as random embeddings of the real
shapes, so no text encoder is built. Per family, one pipeline at a time (a 14B transformer
in bf16 is 28 GiB): the stock call (bf16, diffusers' default attention, no cache), then each
option on top, every one timed over ``--videos`` videos after a warm-up, its peak memory and
its PSNR against the stock call's frames (same seed). Hunyuan is not built here: its
image-to-video pipeline needs a LLaVA text encoder instance even with embeddings given.

``--device cpu --tiny`` runs the same logic on the tiny checkpoints (a dry run for tests).
Run on a GPU host:  python -m benchmarks.gpu_families --steps 8
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workers.model.families.profile import FamilyChoice, apply_choice
from workers.model.pipelines.generation import GenerationParams
from workers.model.runtime.profile import PSNR_FLOOR_DB, psnr

# family -> (frames, height, width) at which each publishes its speed
STANDARD = {
    "ltx": (97, 512, 768),
    "wan": (81, 480, 832),
    "cogvideox": (49, 480, 720),
    "svd": (25, 576, 1024),
}
OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("attention _native_flash", {"attention": "_native_flash"}),
    ("attention _native_cudnn", {"attention": "_native_cudnn"}),
    ("cache first_block", {"cache": "first_block"}),
    ("cache taylorseer", {"cache": "taylorseer"}),
    ("compile repeated blocks", {"compile_blocks": True}),
]


def real_pipeline(family: str, dtype: torch.dtype) -> tuple[Any, dict[str, Any]]:
    """A random-weight pipeline at the released size and the call's conditioning kwargs."""
    import diffusers as d

    g = torch.Generator().manual_seed(0)
    if family == "ltx":  # LTX-Video 0.9 (2B): diffusers' defaults are the released config
        pipe = d.LTXImageToVideoPipeline(
            scheduler=d.FlowMatchEulerDiscreteScheduler(),
            vae=d.AutoencoderKLLTXVideo(),
            text_encoder=None,
            tokenizer=None,
            transformer=d.LTXVideoTransformer3DModel(),
        )
        text = torch.randn(1, 128, 4096, generator=g)
        mask = torch.ones(1, 128)
        return pipe, dict(
            prompt_embeds=text,
            prompt_attention_mask=mask,
            negative_prompt_embeds=text,
            negative_prompt_attention_mask=mask,
        )
    if family == "wan":  # Wan 2.1 I2V 14B 480p
        transformer = d.WanTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=40,
            attention_head_dim=128,
            in_channels=36,
            out_channels=16,
            text_dim=4096,
            freq_dim=256,
            ffn_dim=13824,
            num_layers=40,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            eps=1e-6,
            image_dim=1280,
            added_kv_proj_dim=5120,
            rope_max_seq_len=1024,
        )
        scheduler = d.UniPCMultistepScheduler(
            prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0
        )
        pipe = d.WanImageToVideoPipeline(
            tokenizer=None,
            text_encoder=None,
            vae=d.AutoencoderKLWan(),
            scheduler=scheduler,
            transformer=transformer,
        )
        text = torch.randn(1, 512, 4096, generator=g)
        return pipe, dict(
            prompt_embeds=text,
            negative_prompt_embeds=text,
            image_embeds=torch.randn(1, 257, 1280, generator=g),
        )
    if family == "cogvideox":  # CogVideoX-5b-I2V
        transformer = d.CogVideoXTransformer3DModel(
            num_attention_heads=48,
            attention_head_dim=64,
            in_channels=32,
            out_channels=16,
            time_embed_dim=512,
            text_embed_dim=4096,
            num_layers=42,
            sample_width=90,
            sample_height=60,
            sample_frames=49,
            use_rotary_positional_embeddings=True,
            use_learned_positional_embeddings=True,
        )
        pipe = d.CogVideoXImageToVideoPipeline(
            tokenizer=None,
            text_encoder=None,
            vae=d.AutoencoderKLCogVideoX(),
            transformer=transformer,
            scheduler=d.CogVideoXDDIMScheduler(),
        )
        text = torch.randn(1, 226, 4096, generator=g)
        return pipe, dict(prompt_embeds=text, negative_prompt_embeds=text)
    if family == "svd":  # SVD-XT: diffusers' defaults, a ViT-H image encoder
        from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

        encoder = CLIPVisionModelWithProjection(
            CLIPVisionConfig(
                hidden_size=1280,
                intermediate_size=5120,
                num_hidden_layers=32,
                num_attention_heads=16,
                patch_size=14,
                image_size=224,
                projection_dim=1024,
            )
        )
        pipe = d.StableVideoDiffusionPipeline(
            vae=d.AutoencoderKLTemporalDecoder(),
            image_encoder=encoder,
            unet=d.UNetSpatioTemporalConditionModel(),
            scheduler=d.EulerDiscreteScheduler(),
            feature_extractor=CLIPImageProcessor(),
        )
        return pipe, {}
    raise ValueError(f"no real-size config for {family!r}")


@dataclass
class Row:
    label: str
    seconds: float
    peak_gib: float
    psnr_db: float
    note: str = ""


def timed(render: Callable[[], Any], videos: int, device: str) -> tuple[float, float, Any]:
    """(median seconds per video, peak GiB, last frames) after one warm-up video."""
    render()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times, frames = [], None
    for _ in range(videos):
        started = time.perf_counter()
        frames = render()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else 0.0
    return statistics.median(times), peak, frames


def bench_family(family: str, args: argparse.Namespace, root: Path) -> list[Row]:
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    precision = "bf16" if dtype == torch.bfloat16 else "fp32"
    frames, height, width = (9, 32, 32) if args.tiny else STANDARD[family]
    image = (np.random.default_rng(0).random((height, width, 3)) * 255).astype(np.uint8)

    def build() -> tuple[Any, dict[str, Any]]:
        if args.tiny:
            from tools.families.tiny import build_tiny
            from workers.model.families.registry import load_family

            path = root / family
            return load_family(path if path.is_dir() else build_tiny(family, path)), {}
        pipe, extra = real_pipeline(family, dtype)
        return pipe.to(args.device, dtype), extra

    def render_with(pipe: Any, extra: dict[str, Any]) -> Callable[[], Any]:
        from PIL import Image

        def render() -> Any:
            if args.tiny:  # the worker's own adapter: its prompt encoding, its call
                params = GenerationParams("a boat", frames, 8, num_inference_steps=args.steps)
                return pipe(image, params)
            out = pipe(
                image=Image.fromarray(image),
                height=height,
                width=width,
                num_frames=frames,
                num_inference_steps=args.steps,
                generator=torch.Generator().manual_seed(0),
                output_type="np",
                **extra,
            )
            return (np.clip(np.asarray(out.frames[0]), 0, 1) * 255).round().astype(np.uint8)

        return render

    rows: list[Row] = []
    pipe, extra = build()
    pipe.set_progress_bar_config(disable=True)
    seconds, peak, reference = timed(render_with(pipe, extra), args.videos, args.device)
    rows.append(Row(f"stock call ({precision})", seconds, peak, float("inf")))
    del pipe
    wanted = args.options.split(",") if args.options else [label for label, _ in OPTIONS]
    for label, update in (option for option in OPTIONS if option[0] in wanted):
        choice = FamilyChoice(precision=precision, **update)  # type: ignore[arg-type]
        try:
            pipe, extra = build()
            pipe.set_progress_bar_config(disable=True)
            apply_choice(pipe, choice, args.steps)
            seconds, peak, frames_ = timed(render_with(pipe, extra), args.videos, args.device)
            rows.append(Row(label, seconds, peak, psnr(frames_, reference)))
        except Exception as error:
            rows.append(Row(label, float("nan"), 0.0, float("nan"), str(error)[:80]))
        finally:
            pipe = None
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(STANDARD))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--videos", type=int, default=1)
    parser.add_argument("--tiny", action="store_true", help="the tiny checkpoints (dry run)")
    parser.add_argument("--options", default="", help="comma-separated labels (default: all)")
    args = parser.parse_args()
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"{name}: {args.steps} steps, median of {args.videos} video(s) after a warm-up")
    print(
        f"{'family':<10} {'size':<12} {'configuration':<26} {'s/video':>8} {'speedup':>8} "
        f"{'peak GiB':>8} {'PSNR dB':>8}  verdict"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families.split(","):
            rows = bench_family(family, args, Path(tmp))
            size = "x".join(map(str, (9, 32, 32) if args.tiny else STANDARD[family]))
            stock = rows[0].seconds
            for row in rows:
                ok = row.psnr_db >= PSNR_FLOOR_DB
                verdict = row.note or ("ok" if ok else f"below {PSNR_FLOOR_DB:g} dB")
                print(
                    f"{family:<10} {size:<12} {row.label:<26} {row.seconds:>8.2f} "
                    f"{stock / row.seconds:>7.2f}x {row.peak_gib:>8.1f} {row.psnr_db:>8.1f}  "
                    f"{verdict}"
                )


if __name__ == "__main__":
    main()
