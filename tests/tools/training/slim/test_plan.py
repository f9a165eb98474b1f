"""PCA slimming: widths from a known spectrum, exact initialisation at full width, per-layer
widths in MotionUNet, the uniform control's parameter count and the shipped slimmed student."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from animfleet.shipped_models import SHIPPED_STUDENT_DIR
from tools.training.slim.plan import (
    count_parameters,
    filter_rows,
    pca_width,
    plan_pca,
    plan_uniform,
    projection,
    round_width,
    select_channels,
    slim_unet,
    variance_shares,
)
from workers.model.networks.motion_unet import MotionUNet

VARIANCES = torch.tensor([50.0, 30.0, 15.0, 4.0, 1.0], dtype=torch.float64)


def _rows_with_spectrum(channels: int = 16, dim: int = 40) -> torch.Tensor:
    """Rows whose centred PCA has exactly VARIANCES (plus an offset every row shares)."""
    generator = torch.Generator().manual_seed(0)
    left = torch.randn(channels, len(VARIANCES), generator=generator, dtype=torch.float64)
    left -= left.mean(dim=0)  # centred columns: the mean row is the offset alone
    left = torch.linalg.qr(left).Q
    right = torch.linalg.qr(torch.randn(dim, len(VARIANCES), dtype=torch.float64)).Q.T
    offset = torch.randn(1, dim, generator=generator, dtype=torch.float64)
    rows: torch.Tensor = left @ torch.diag(VARIANCES.sqrt()) @ right + offset
    return rows


def test_pca_width_keeps_the_share_of_a_known_spectrum() -> None:
    rows = _rows_with_spectrum()
    shares = variance_shares(rows)
    torch.testing.assert_close(shares[:5], torch.cumsum(VARIANCES, 0) / VARIANCES.sum())
    assert [pca_width(rows, s) for s in (0.5, 0.8, 0.9, 0.95, 0.99)] == [1, 2, 3, 3, 4]
    assert pca_width(rows, 0.991) == 5 and pca_width(rows, 1.0) == 16
    assert [round_width(w, 32) for w in (1, 8, 9, 40)] == [8, 8, 16, 32]
    conv = nn.Conv2d(4, 16, 3)
    assert filter_rows(conv).shape == (16, 4 * 9 + 1)


def test_kept_filters_reproduce_the_layer_output_when_they_span_it() -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 16, 3, padding=1)
    assert conv.bias is not None
    with torch.no_grad():  # filters 8..15 are combinations of 0..7: an 8-dimensional layer
        mix = torch.randn(8, 8)
        conv.weight[8:] = torch.einsum("ij,jchw->ichw", mix, conv.weight[:8])
        conv.bias[8:] = mix @ conv.bias[:8]
    rows = filter_rows(conv)
    assert pca_width(rows, 0.999999) <= 8
    keep = select_channels(rows, 8)
    coefficients, kept_share = projection(rows, keep)
    assert kept_share == pytest.approx(1.0)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        full = conv(x)
        rebuilt = torch.einsum("ok,bkhw->bohw", coefficients.float(), full[:, keep])
    torch.testing.assert_close(rebuilt, full, atol=1e-4, rtol=1e-4)
    # Keeping every filter is the identity.
    identity, share = projection(rows, list(range(16)))
    torch.testing.assert_close(identity, torch.eye(16, dtype=torch.float64))
    assert share == pytest.approx(1.0)


def _tiny_unet() -> MotionUNet:
    torch.manual_seed(0)
    unet: MotionUNet = MotionUNet(block_out_channels=(8, 16), embed_dim=16, guidance_embedding=True)
    with torch.no_grad():  # zero-initialised heads and convs would hide wrong slicing
        for parameter in unet.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    unet.eval()
    return unet


def _call(unet: MotionUNet) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    sample = torch.randn(2, 4, 6, 16, 16, generator=generator)
    context = torch.randn(2, 5, 32, generator=generator)
    with torch.no_grad():
        out: torch.Tensor = unet(
            sample,
            torch.tensor([900, 20]),
            encoder_hidden_states=context,
            guidance_scale=torch.tensor([[1.0, 1.0], [2.0, 3.0]]),
        ).sample
    return out


def test_full_width_projection_init_is_the_wide_unet_exactly() -> None:
    unet = _tiny_unet()
    plan = plan_pca(unet, 1.0)
    assert all(keep == sorted(keep) for keep in plan.keep.values())
    assert torch.equal(_call(slim_unet(unet, plan)), _call(unet))
    thinner = slim_unet(unet, plan_pca(unet, 0.5))
    assert sum(p.numel() for p in thinner.parameters()) < sum(p.numel() for p in unet.parameters())
    assert torch.isfinite(_call(thinner)).all()


def test_per_layer_widths_default_to_the_block_widths_bit_for_bit() -> None:
    torch.manual_seed(0)
    plain = MotionUNet(block_out_channels=(8, 16), embed_dim=16)
    torch.manual_seed(0)
    explicit = MotionUNet(
        block_out_channels=(8, 16),
        embed_dim=16,
        inner_channels=(8, 16, 16, 16, 8),
        up_block_out_channels=(16, 8),
    )
    for (name, a), (other, b) in zip(
        plain.state_dict().items(), explicit.state_dict().items(), strict=True
    ):
        assert name == other and torch.equal(a, b)
    with pytest.raises(ValueError, match="inner_channels"):
        MotionUNet(block_out_channels=(8, 16), inner_channels=(8, 8))


def test_the_shipped_student_config_loads_unchanged() -> None:
    unet = MotionUNet.from_pretrained(str(SHIPPED_STUDENT_DIR / "unet"))
    assert unet.config.inner_channels is None and unet.config.up_block_out_channels is None
    assert sum(p.numel() for p in unet.parameters()) == 1_288_146


def test_the_uniform_control_has_the_pca_arms_parameter_count() -> None:
    unet = MotionUNet.from_pretrained(str(SHIPPED_STUDENT_DIR / "unet"))
    for share in (0.7,):
        pca = count_parameters(unet.config, plan_pca(unet, share).widths)
        uniform = plan_uniform(unet, pca)
        assert count_parameters(unet.config, uniform.widths) == pytest.approx(pca, rel=0.05)
        # One factor for every width: the ratios to the student's widths agree up to rounding.
        full = {"block.0": 32, "block.1": 64, "block.2": 96}
        ratios = [uniform.widths[slot] / width for slot, width in full.items()]
        assert max(ratios) - min(ratios) <= 8 / 32


def test_the_parameter_count_from_shapes_matches_the_built_model() -> None:
    unet = _tiny_unet()
    for share in (0.3, 0.6, 1.0):
        plan = plan_pca(unet, share)
        built = sum(p.numel() for p in slim_unet(unet, plan).parameters())
        assert count_parameters(unet.config, plan.widths) == built
