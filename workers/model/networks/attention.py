"""Cross-attention on a repeated context: project K/V once per distinct context, not per copy.

``UNetSpatioTemporalConditionModel`` repeats its ``encoder_hidden_states`` ``[B, L, D]`` once
per frame (``repeat_interleave``: ``[B*F, L, D]``) for the spatial cross-attention, and
``TransformerSpatioTemporalModel`` copies frame 0's context to every spatial position
(``[B*H*W, L, D]``) for the temporal cross-attention. Stock attention then runs the K and V
projections on ``F`` (or ``H*W``) identical copies of each row: with a 77-token text context
that is a large share of the U-Net's FLOPs.

Both layouts are "batch-major": row ``b*R + r`` is a copy of context ``b``. The knowledge is
structural: a forward pre-hook on the U-Net records ``B`` (the rows of the context the U-Net was
given, before it repeats them); an attention call whose context has ``N = B*R`` rows then
projects K/V on rows ``0, R, 2R, ...`` (a strided view, no copy) and shares them with all ``R``
query groups by folding the groups into the query sequence: ``[B*R, S, C] -> [B, R*S, C]``. That
is the broadcast of K/V over ``R`` without materialising it; softmax is per query row, so the
result equals the stock one. Anything else (self-attention, a mask, a context that is not a
multiple of ``B``, an unknown U-Net class) takes the stock path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import UNetSpatioTemporalConditionModel
from diffusers.models.attention_processor import Attention, AttnProcessor2_0


@dataclass
class RepeatLayout:
    """The number of distinct contexts in the current U-Net call; set by a pre-hook."""

    contexts: int | None = None


class ContextDedupProcessor:
    """An attention processor for contexts repeated batch-major; see the module docstring."""

    def __init__(self, layout: RepeatLayout) -> None:
        self.layout = layout
        self.stock = AttnProcessor2_0()
        self.hook: torch.utils.hooks.RemovableHandle | None = None

    def __call__(
        self,
        attn: Attention,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        temb: torch.Tensor | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> torch.Tensor:
        repeats = self._repeats(attn, hidden_states, encoder_hidden_states, attention_mask)
        if repeats is None:
            result: torch.Tensor = self.stock(
                attn, hidden_states, encoder_hidden_states, attention_mask, temb, *args, **kwargs
            )
            return result
        assert encoder_hidden_states is not None  # _repeats checked it
        residual = hidden_states
        rows, length, _ = hidden_states.shape
        contexts = rows // repeats
        context = encoder_hidden_states[::repeats]  # one row per distinct context: a view
        if attn.norm_cross:
            context = attn.norm_encoder_hidden_states(context)
        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)

        query = attn.to_q(hidden_states)
        key = attn.to_k(context)
        value = attn.to_v(context)
        head_dim = key.shape[-1] // attn.heads
        # Fold the R query groups of each context into one sequence: they all read the same K/V.
        query = query.reshape(contexts, repeats * length, attn.heads, head_dim).transpose(1, 2)
        key = key.view(contexts, -1, attn.heads, head_dim).transpose(1, 2)
        value = value.view(contexts, -1, attn.heads, head_dim).transpose(1, 2)
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)

        out = F.scaled_dot_product_attention(query, key, value, dropout_p=0.0, is_causal=False)
        out = out.transpose(1, 2).reshape(rows, length, attn.heads * head_dim).to(query.dtype)
        out = attn.to_out[1](attn.to_out[0](out))
        if attn.residual_connection:
            out = out + residual
        scaled: torch.Tensor = out / attn.rescale_output_factor
        return scaled

    def _repeats(
        self,
        attn: Attention,
        hidden_states: torch.Tensor,
        context: torch.Tensor | None,
        mask: torch.Tensor | None,
    ) -> int | None:
        """How many copies of each context this call holds, or None for the stock path."""
        contexts = self.layout.contexts
        if context is None or mask is not None or contexts is None:
            return None
        if hidden_states.ndim != 3 or attn.spatial_norm is not None:
            return None
        rows = context.shape[0]
        if rows == contexts or rows % contexts or hidden_states.shape[0] != rows:
            return None
        return rows // contexts


def _record_contexts(layout: RepeatLayout) -> Any:
    def hook(_: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        context = kwargs.get("encoder_hidden_states")
        if context is None and len(args) > 2:
            context = args[2]
        layout.contexts = None if context is None else int(context.shape[0])

    return hook


def install_context_dedup(unet: Any) -> bool:
    """Install :class:`ContextDedupProcessor` on every attention of ``unet``.

    Returns False (and changes nothing) for a U-Net class whose context layout is not known
    to be batch-major repeated; only ``UNetSpatioTemporalConditionModel`` is.
    """
    if not isinstance(unet, UNetSpatioTemporalConditionModel):
        return False
    uninstall_context_dedup(unet)
    layout = RepeatLayout()
    processor = ContextDedupProcessor(layout)
    processor.hook = unet.register_forward_pre_hook(_record_contexts(layout), with_kwargs=True)
    unet.set_attn_processor(processor)
    return True


def uninstall_context_dedup(unet: Any) -> None:
    """Back to stock attention, and the pre-hook removed."""
    for processor in {id(p): p for p in unet.attn_processors.values()}.values():
        if isinstance(processor, ContextDedupProcessor) and processor.hook is not None:
            processor.hook.remove()
            processor.hook = None
    unet.set_attn_processor(AttnProcessor2_0())
