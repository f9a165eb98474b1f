from collections.abc import Iterator

import pytest
import torch
from diffusers.models.attention_processor import Attention
from torch.utils.flop_counter import FlopCounterMode

from tests.workers.model.tiny import CONTEXT_DIM, tiny_unet, unet_inputs
from workers.model.networks.attention import (
    ContextDedupProcessor,
    RepeatLayout,
    install_context_dedup,
    uninstall_context_dedup,
)


@pytest.fixture(scope="module")
def unet() -> torch.nn.Module:
    return tiny_unet()


@pytest.fixture
def dedup_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The repeat factor of every attention call that took the de-duplicated path."""
    calls: list[int] = []
    original = ContextDedupProcessor._repeats

    def spy(self: ContextDedupProcessor, *args: object) -> int | None:
        repeats = original(self, *args)  # type: ignore[arg-type]
        if repeats is not None:
            calls.append(repeats)
        return repeats

    monkeypatch.setattr(ContextDedupProcessor, "_repeats", spy)
    yield calls


def run(unet: torch.nn.Module, inputs: dict[str, torch.Tensor], dedup: bool) -> torch.Tensor:
    if dedup:
        assert install_context_dedup(unet)
    else:
        uninstall_context_dedup(unet)
    with torch.inference_mode():
        out: torch.Tensor = unet(**inputs).sample
    return out


@pytest.mark.parametrize("frames", [1, 8, 14])
@pytest.mark.parametrize("tokens", [1, 17], ids=["svd-image-token", "text-context"])
def test_dedup_equals_stock_attention(
    unet: torch.nn.Module, dedup_calls: list[int], frames: int, tokens: int
) -> None:
    inputs = unet_inputs(frames, tokens)
    stock = run(unet, inputs, dedup=False)
    assert not dedup_calls
    dedup = run(unet, inputs, dedup=True)
    torch.testing.assert_close(dedup, stock, atol=1e-5, rtol=1e-5)
    # Temporal cross-attention repeats per spatial position (8x8 and 4x4 latents); spatial
    # cross-attention per frame (only when there is more than one).
    assert {64, 16} <= set(dedup_calls)
    assert (frames in dedup_calls) == (frames > 1)


def test_dedup_cuts_flops_with_a_long_context(unet: torch.nn.Module) -> None:
    # The share saved depends on the model's shape ratios: `make bench-model` measures it on a
    # realistic one. Here: fewer FLOPs, by at least the skipped K/V projection rows.
    inputs = unet_inputs(frames=8, tokens=77)
    flops = {}
    for dedup in (False, True):
        with FlopCounterMode(display=False) as counter:
            run(unet, inputs, dedup)
        flops[dedup] = counter.get_total_flops()
    assert flops[True] < 0.95 * flops[False]


def test_falls_back_to_stock_with_a_mask_or_unrepeated_context() -> None:
    torch.manual_seed(0)
    attn = Attention(query_dim=8, cross_attention_dim=CONTEXT_DIM, heads=2, dim_head=4).eval()
    layout = RepeatLayout(contexts=2)
    attn.set_processor(ContextDedupProcessor(layout))
    hidden = torch.randn(6, 5, 8)
    context = torch.randn(6, 3, CONTEXT_DIM)  # six different rows: NOT repeated
    mask = torch.ones(6, 1, 3, dtype=torch.bool)
    processor = attn.processor
    assert processor._repeats(attn, hidden, context, mask) is None
    assert processor._repeats(attn, hidden, context[:5], None) is None  # 5 % 2 != 0
    assert processor._repeats(attn, hidden, None, None) is None  # self-attention
    layout.contexts = None  # called outside a U-Net with the pre-hook
    assert processor._repeats(attn, hidden, context, None) is None
    layout.contexts = 2
    repeated = context[:2].repeat_interleave(3, dim=0)
    stock = Attention(query_dim=8, cross_attention_dim=CONTEXT_DIM, heads=2, dim_head=4).eval()
    stock.load_state_dict(attn.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(
            attn(hidden, encoder_hidden_states=repeated),
            stock(hidden, encoder_hidden_states=repeated),
            atol=1e-6,
            rtol=1e-6,
        )


def test_other_denoisers_keep_stock_attention() -> None:
    assert not install_context_dedup(torch.nn.Linear(2, 2))


def test_traces_as_one_graph_without_breaks(unet: torch.nn.Module) -> None:
    install_context_dedup(unet)
    inputs = unet_inputs(frames=2, tokens=17)
    with torch.inference_mode():
        explained = torch._dynamo.explain(unet)(**inputs)
    torch._dynamo.reset()
    assert explained.graph_break_count == 0 and explained.graph_count == 1
