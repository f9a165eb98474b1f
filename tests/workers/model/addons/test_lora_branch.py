"""Parallel low-rank branches: exactly the base without deltas, exactly base + delta with."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workers.model.addons.lora_branch import LoraBranches, LowRank


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), nn.Flatten(), nn.Linear(6 * 8 * 8, 5))


def _deltas(seed: int) -> dict[str, LowRank]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "0": LowRank(
            torch.randn(2, 4, 3, 3, generator=generator),
            torch.randn(6, 2, 1, 1, generator=generator),
        ),
        "2": LowRank(
            torch.randn(2, 384, generator=generator), torch.randn(5, 2, generator=generator)
        ),
    }


def test_without_deltas_the_output_is_the_base_bit_for_bit() -> None:
    model, x = _model(), torch.randn(3, 4, 8, 8)
    before = model(x)
    branches = LoraBranches(model, ["0", "2"])
    assert torch.equal(model(x), before)
    with branches.activate([]):
        assert torch.equal(model(x), before)
    with branches.activate([(_deltas(1), 1.0)]):
        assert not torch.equal(model(x), before)
    assert torch.equal(model(x), before)  # deactivated after the call
    assert [k for k, _ in model.state_dict().items()] == [
        k for k, _ in _model().state_dict().items()
    ]


def test_a_delta_equals_fusing_it_into_the_weights() -> None:
    model, x = _model(), torch.randn(3, 4, 8, 8)
    deltas = _deltas(1)
    branches = LoraBranches(model, ["0", "2"])
    with torch.no_grad(), branches.activate([(deltas, 0.5)]):
        served = model(x)
    fused = _model()
    with torch.no_grad():
        conv_delta = torch.einsum("or,rikl->oikl", deltas["0"].up[:, :, 0, 0], deltas["0"].down)
        fused[0].weight += 0.5 * conv_delta
        fused[2].weight += 0.5 * deltas["2"].up @ deltas["2"].down
        expected = fused(x)
    torch.testing.assert_close(served, expected, rtol=1e-4, atol=1e-4)


def test_two_addons_add_up_and_an_error_still_deactivates() -> None:
    model, x = _model(), torch.randn(1, 4, 8, 8)
    branches = LoraBranches(model, ["0", "2"])
    base = model(x)
    # On one layer two deltas add up (across layers the first feeds the second).
    first, second = {"2": _deltas(1)["2"]}, {"2": _deltas(2)["2"]}
    with branches.activate([(first, 1.0)]):
        one = model(x) - base
    with branches.activate([(second, 1.0)]):
        other = model(x) - base
    with branches.activate([(first, 1.0), (second, 1.0)]):
        both = model(x) - base
    torch.testing.assert_close(both, one + other, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError), branches.activate([(_deltas(1), 1.0)]):
        raise RuntimeError("the job failed")
    assert torch.equal(model(x), base)


def test_targets_and_deltas_must_name_branch_layers() -> None:
    model = _model()
    with pytest.raises(ValueError, match="not a Linear or Conv2d"):
        LoraBranches(model, ["1"])
    branches = LoraBranches(model, ["0"])
    with pytest.raises(ValueError, match="no branch"), branches.activate([(_deltas(1), 1.0)]):
        pass
    branches.remove()
    assert not model[0]._forward_hooks
