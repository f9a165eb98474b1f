"""FLOPs of the U-Net with and without context de-dup, and the temporal cross-attention alone."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from diffusers import UNetSpatioTemporalConditionModel
from diffusers.models.attention_processor import Attention, AttnProcessor2_0
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.shapes import TEXT_TOKENS
from workers.model.networks.attention import (
    ContextDedupProcessor,
    RepeatLayout,
    install_context_dedup,
    uninstall_context_dedup,
)
from workers.model.runtime.loading import ShapeBucket

BATCH = 3  # the teacher's three guidance passes
TOKENS = TEXT_TOKENS + 1  # text tokens and the image token


def _unet(model_dir: Path) -> UNetSpatioTemporalConditionModel:
    return UNetSpatioTemporalConditionModel.from_pretrained(model_dir / "unet").eval()


def unet_flops(model_dir: Path, bucket: ShapeBucket) -> dict[str, int]:
    """Total FLOPs of one U-Net call (three passes batched), stock and de-duplicated."""
    unet = _unet(model_dir)
    side = bucket.height // 8  # the VAE downsamples 8x, see benchmarks.shapes
    inputs = {
        "sample": torch.randn(BATCH, bucket.frames, 8, side, side),
        "timestep": torch.tensor(500),
        "encoder_hidden_states": torch.randn(BATCH, TOKENS, unet.config.cross_attention_dim),
        "added_time_ids": torch.randn(BATCH, 3),
    }
    flops = {}
    for name in ("stock", "dedup"):
        if name == "dedup":
            install_context_dedup(unet)
        else:
            uninstall_context_dedup(unet)
        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            unet(**inputs)
        flops[name] = counter.get_total_flops()
    return flops


def attention_report(model_dir: Path, bucket: ShapeBucket, repeats: int = 50) -> str:
    """Time and K/V projection FLOPs of the largest temporal cross-attention, both ways."""
    unet = _unet(model_dir)
    block = unet.down_blocks[0].attentions[0].temporal_transformer_blocks[0]
    attn = block.attn2
    side = bucket.height // 8
    positions = side * side
    rows = BATCH * positions  # one temporal sequence per spatial position
    hidden = torch.randn(rows, bucket.frames, attn.to_q.in_features)
    context = torch.randn(BATCH, TOKENS, attn.to_k.in_features)
    repeated = context.repeat_interleave(positions, dim=0)  # as TransformerSpatioTemporalModel
    processors = {
        "stock": AttnProcessor2_0(),
        "dedup": ContextDedupProcessor(RepeatLayout(contexts=BATCH)),
    }
    kv_flops, call_flops, outputs = {}, {}, {}
    samples: dict[str, list[float]] = {name: [] for name in processors}
    with torch.inference_mode():
        for name, processor in processors.items():
            attn.set_processor(processor)
            with FlopCounterMode(display=False) as counter:
                outputs[name] = attn(hidden, encoder_hidden_states=repeated)
            call_flops[name] = counter.get_total_flops()
            kv_flops[name] = _kv_flops(attn, name, rows, BATCH)
        torch.testing.assert_close(outputs["dedup"], outputs["stock"], atol=1e-4, rtol=1e-4)
        # Alternate the two, so a burst of load from other processes hits both alike.
        for _ in range(repeats):
            for name, processor in processors.items():
                attn.set_processor(processor)
                started = time.perf_counter()
                attn(hidden, encoder_hidden_states=repeated)
                samples[name].append(time.perf_counter() - started)
    times = {name: statistics.median(values) for name, values in samples.items()}
    return (
        f"temporal cross-attention ({rows} sequences of {bucket.frames} frames, context "
        f"{TOKENS} tokens x {attn.to_k.in_features}, inner {attn.to_k.out_features}):\n"
        f"  K/V projection FLOPs: stock {kv_flops['stock'] / 1e6:.1f} M, de-dup "
        f"{kv_flops['dedup'] / 1e6:.2f} M ({kv_flops['stock'] / kv_flops['dedup']:.0f}x fewer); "
        f"whole call {call_flops['stock'] / 1e6:.1f} M -> {call_flops['dedup'] / 1e6:.1f} M\n"
        f"  time per call (median of {repeats}): stock {times['stock'] * 1e3:.2f} ms, de-dup "
        f"{times['dedup'] * 1e3:.2f} ms ({times['stock'] / times['dedup']:.1f}x)"
    )


def _kv_flops(attn: Attention, name: str, rows: int, contexts: int) -> int:
    """2 x rows x tokens x in x out, for K and V: on every repeated row, or once per context."""
    projected = rows if name == "stock" else contexts
    return int(2 * 2 * projected * TOKENS * attn.to_k.in_features * attn.to_k.out_features)
