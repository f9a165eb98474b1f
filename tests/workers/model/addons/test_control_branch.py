"""The image-conditioned add-on's branch: zero-initialised (a fresh one changes nothing), hooks
that leave the base model bit-identical when idle, the control image's decoding, its file,
the store serving it with a job's control image, and serial vs concurrent runs giving the
same residuals and frames."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from animfleet.addons import AddonUse, control_input
from animfleet.jobs import JobParams
from workers.model.addons.control_branch import (
    CONTROL_SIZE,
    ControlAddonError,
    ControlEncoder,
    ControlHooks,
    Ready,
    Residuals,
    control_pixels,
    read_control,
)
from workers.model.addons.control_run import BranchRunner, compute
from workers.model.addons.store import AddonError, AddonStore, job_addons, kinds, read_addon
from workers.model.networks.motion_unet import MotionUNet

BASE = "base-model"


@pytest.fixture(scope="module")
def unet() -> MotionUNet:
    torch.manual_seed(0)
    model = MotionUNet(block_out_channels=(16, 32), embed_dim=32, cross_attention_dim=8)
    for weight in model.motion_head[-1].parameters():  # a trained head is not zero
        torch.nn.init.normal_(weight, std=0.1)
    return model.eval()


def _inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "sample": torch.randn(1, 4, 6, 16, 16, generator=generator),
        "timestep": torch.tensor(500),
        "encoder_hidden_states": torch.randn(1, 5, 8, generator=generator),
    }


def _png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def _path_png(size: int = 48) -> bytes:
    drawing = np.zeros((size, size), dtype=np.uint8)
    drawing[size // 2, 4 : size - 4] = np.linspace(60, 255, size - 8).astype(np.uint8)
    return _png(drawing)


def _trained(unet: MotionUNet) -> ControlEncoder:
    """A branch whose zero outputs have moved (as training moves them)."""
    torch.manual_seed(1)
    encoder = ControlEncoder(32, 32, width=8)
    for weight in [*encoder.zero_mid.parameters(), *encoder.zero_motion.parameters()]:
        torch.nn.init.normal_(weight, std=0.5)
    return encoder.eval()


def test_idle_hooks_and_a_fresh_branch_leave_the_output_bit_identical(unet: MotionUNet) -> None:
    with torch.no_grad():
        reference = unet(**_inputs()).sample
        hooks = ControlHooks(unet)
        try:
            assert torch.equal(unet(**_inputs()).sample, reference)
            fresh = ControlEncoder(32, 32, width=8)(torch.rand(1, 1, CONTROL_SIZE, CONTROL_SIZE))
            assert not fresh[0].any() and not fresh[1].any()  # zero-initialised outputs
            with hooks.activate([(Ready(Residuals(*fresh)), 1.0)]):
                assert torch.equal(unet(**_inputs()).sample, reference)
            moved = _trained(unet)(torch.rand(1, 1, CONTROL_SIZE, CONTROL_SIZE))
            with hooks.activate([(Ready(Residuals(*moved)), 1.0)]):
                steered = unet(**_inputs()).sample
            assert not torch.equal(steered, reference)
            assert torch.equal(unet(**_inputs()).sample, reference)  # idle again after
        finally:
            hooks.remove()


def test_control_pixels_fit_the_frame_and_read_dark_on_light_as_light_on_dark() -> None:
    light = control_pixels(_path_png(), 64, 64)
    assert light.shape == (1, 1, CONTROL_SIZE, CONTROL_SIZE)
    assert float(light.min()) >= 0.0 and float(light.max()) <= 1.0
    inverted = 255 - np.asarray(Image.open(io.BytesIO(_path_png())))
    dark = control_pixels(_png(inverted.astype(np.uint8)), 64, 64)
    assert torch.allclose(light, dark, atol=1 / 255 + 1e-6)
    # A wide drawing for a square job: the centre is kept, as the input image's is.
    wide = np.zeros((32, 96), dtype=np.uint8)
    wide[:, 40:56] = 255
    assert control_pixels(_png(wide), 32, 32)[0, 0, :, 30:34].min() > 0.9


def _write_control(root: Path, name: str, encoder: ControlEncoder, base: str = BASE) -> None:
    directory = root / name
    directory.mkdir(parents=True)
    meta = {"format": "animfleet-addon", "kind": "control", "base": base}
    tensors = {k: v.contiguous() for k, v in encoder.state_dict().items()}
    save_file(tensors, str(directory / "addon.safetensors"), metadata=meta)


def test_a_control_file_is_read_back_and_checked(tmp_path: Path, unet: MotionUNet) -> None:
    encoder = _trained(unet)
    _write_control(tmp_path, "path", encoder)
    loaded = read_control(tmp_path / "path", "path", BASE)
    control = torch.rand(1, 1, CONTROL_SIZE, CONTROL_SIZE)
    with torch.no_grad():
        pairs = zip(loaded(control), encoder(control), strict=True)
        assert all(torch.equal(a, b) for a, b in pairs)
    with pytest.raises(ControlAddonError, match="is for"):
        read_control(tmp_path / "path", "path", "another-model")
    addon = read_addon(tmp_path / "path", "path", BASE)
    assert addon.control is not None and not addon.layers and addon.nbytes > 0
    assert kinds(tmp_path, BASE) == {"path": "control"}


def test_serial_and_concurrent_runs_give_equal_residuals(unet: MotionUNet) -> None:
    encoder = _trained(unet)
    image = _path_png()
    serial = BranchRunner("cpu", concurrent=False)
    beside = BranchRunner("cpu", concurrent=True)
    try:
        one = serial.start(encoder, image, 32, 32).wait()
        two = beside.start(encoder, image, 32, 32).wait()
    finally:
        beside.close()
    plain = compute(encoder, image, 32, 32)
    for residuals in (one, two):
        assert torch.equal(residuals.mid, plain.mid)
        assert torch.equal(residuals.motion, plain.motion)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_side_stream_gives_the_serial_residuals() -> None:
    encoder = ControlEncoder(32, 32, width=8).cuda().eval()
    for weight in encoder.zero_motion.parameters():
        torch.nn.init.normal_(weight)
    image = _path_png()
    streamed = BranchRunner("cuda", concurrent=True).start(encoder, image, 32, 32).wait()
    plain = compute(encoder, image, 32, 32)
    torch.cuda.synchronize()
    assert torch.equal(streamed.motion, plain.motion) and torch.equal(streamed.mid, plain.mid)


def test_the_store_serves_a_control_addon_with_the_jobs_image(
    tmp_path: Path, unet: MotionUNet
) -> None:
    _write_control(tmp_path, "path", _trained(unet))
    store = AddonStore(tmp_path, BASE)
    try:
        assert store.names() == ["path"] and store.with_image() == ["path"]
        store.attach(unet)
        with torch.no_grad():
            reference = unet(**_inputs()).sample
        image = _path_png()
        params = JobParams(
            prompt="still",
            frames=4,
            fps=8,
            width=16,
            height=16,
            seed=0,
            addons=(AddonUse(name="path", image_sha256="0" * 64),),
        )
        outputs = []
        for concurrent in (False, True):
            store.runner.concurrent = concurrent
            with job_addons(store, params, {control_input("path"): image}), torch.no_grad():
                outputs.append(unet(**_inputs()).sample)
        assert torch.equal(outputs[0], outputs[1])
        assert not torch.equal(outputs[0], reference)
        with torch.no_grad():
            assert torch.equal(unet(**_inputs()).sample, reference)
        with pytest.raises(AddonError, match="needs its control image"):
            job_addons(store, params, {})
    finally:
        store.close()
