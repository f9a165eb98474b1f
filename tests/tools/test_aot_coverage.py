"""AOT packages cover every size a job can reach: the dynamic package's range holds every working
size and masked box, a non-square job served from a compiled profile runs the package (counted
by path), a shape no package covers runs eagerly and says so in the log and the metrics, and
packages published to the region's bucket reach a peer of the same CPU kind."""

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from animfleet.jobs import JobParams
from animfleet.shipped_models import shipped_model
from animfleet_api.bounds import MAX_FRAMES, MAX_SIDE, MIN_FRAMES, MIN_SIDE, SIDE_STEP
from storage.local import LocalStore
from tests.fixtures.model_copies import copy_model
from tests.workers.model.tiny import tiny_student
from tools.serving.compile import compile_model, served_sizes
from tools.serving.tune import base_variant
from workers.model import Animator
from workers.model.networks.motion_unet import linspace, pixel_centres
from workers.model.pipelines.masked import size_multiple
from workers.model.pipelines.render import working_size
from workers.model.runtime.aot import AOT_DIR, MANIFEST, AOTDenoiser, SizeRange
from workers.model.runtime.aot_share import SharedPackages
from workers.model.runtime.loading import ShapeBucket, load_pipeline
from workers.model.runtime.profile import (
    Choice,
    DeviceProfile,
    device_key,
    psnr,
    save_profile,
    weights_hash,
)
from workers.settings import WorkerSettings

BUCKET = ShapeBucket(frames=4, height=16, width=16)
# Building the packages (two C++ compiles) takes about two minutes on a quiet 2-core machine.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def student(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny student with a static package for BUCKET and the dynamic one, served compiled
    by its profile on this CPU."""
    student = tiny_student(tmp_path_factory.mktemp("models") / "student")
    compile_model(student, [BUCKET], Choice(compile=True), progress=lambda _: None)
    entry = DeviceProfile(
        device=device_key("cpu"),
        torch=torch.__version__,
        weights=weights_hash(student),
        buckets=["4x16x16"],
        steps=4,
        threads=1,
        chosen=Choice(compile=True),
    )
    save_profile(student, entry)
    return student


def _served(student: Path) -> Animator:
    settings = WorkerSettings(model_dir=student, shape_buckets="4x16x16", boot_tune_s=0)
    return Animator.from_settings(settings)


def _working_sizes(multiple: int) -> set[tuple[int, int]]:
    """Every (height, width) the U-Net runs at: each request size the API accepts, and each
    masked box (sides multiples of ``multiple`` inside any request), at its working size."""
    requests = range(MIN_SIDE, MAX_SIDE + 1, SIDE_STEP)
    boxes = range(multiple, MAX_SIDE + 1, multiple)
    sizes = {working_size(h, w) for h in requests for w in requests}
    return sizes | {working_size(h, w, multiple=multiple) for h in boxes for w in boxes}


def test_the_served_models_range_covers_every_working_size_and_box() -> None:
    model = shipped_model()
    assert model is not None
    pipe = load_pipeline(model, base_variant(model))
    sizes = served_sizes(pipe, (1, 8, 6, 64, 64))
    assert sizes is not None
    sides = _working_sizes(size_multiple(pipe))
    assert any(h != w for h, w in sides)  # non-square ones are among them
    missed = [
        (frames, h, w)
        for frames in range(MIN_FRAMES, MAX_FRAMES + 1)
        for h, w in sides
        if not sizes.covers((1, frames, 6, h, w))
    ]
    assert missed == []
    assert not sizes.covers((1, 8, 6, 72, 64)) and not sizes.covers((1, 8, 6, 60, 64))
    assert not sizes.covers((3, 8, 6, 64, 64))  # the batch is as recorded


def test_a_non_square_job_runs_the_compiled_package(student: Path, make_image: object) -> None:
    animator = _served(student)
    assert isinstance(animator.compiled, AOTDenoiser), animator.info["aot"]
    assert animator.info["serving_origin"] == "profile entry"
    animator.compiled.ran.clear()  # warm-up's calls
    params = JobParams(prompt="pan left", frames=6, fps=8, width=24, height=16, seed=3, steps=4)
    image = make_image(24, 16)  # type: ignore[operator]
    frames = animator.animate(image, params)
    assert dict(animator.compiled.ran) == {"aot-dynamic": 4}  # every step, none eager
    expected = Animator(student, animator.variant).animate(image, params)
    assert frames.shape == expected.shape == (6, 16, 24, 3)
    assert psnr(frames, expected) >= 40


def test_a_masked_box_runs_the_compiled_package(student: Path, make_image: object) -> None:
    animator = _served(student)
    assert isinstance(animator.compiled, AOTDenoiser)
    animator.compiled.ran.clear()
    inside = np.zeros((32, 32), dtype=np.uint8)
    inside[4:14, 6:28] = 255  # a box 12 x 24 at the multiple of 4
    buffer = io.BytesIO()
    Image.fromarray(inside).save(buffer, format="PNG")
    params = JobParams(prompt="pan left", frames=4, fps=8, width=32, height=32, seed=1, steps=4)
    image = make_image(32, 32)  # type: ignore[operator]
    frames = animator.animate(image, params, mask=buffer.getvalue())
    assert dict(animator.compiled.ran) == {"aot-dynamic": 4}
    expected = Animator(student, animator.variant).animate(image, params, mask=buffer.getvalue())
    assert psnr(frames, expected) >= 40


def test_a_shape_without_a_package_runs_eagerly_and_says_so(student: Path) -> None:
    animator = _served(student)
    denoiser = animator.compiled
    assert isinstance(denoiser, AOTDenoiser) and denoiser.dynamic is not None
    assert denoiser.runner((1, 4, 6, 16, 16))[0] == "aot"
    assert denoiser.runner((1, 4, 6, 16, 28))[0] == "aot-dynamic"
    before = REGISTRY.get_sample_value("animfleet_model_unet_calls_total", {"path": "eager"}) or 0
    unet = animator.pipeline.unet
    sample = torch.zeros(2, 4, 6, 16, 16)  # a batch of two: as recorded, the batch is one
    with capture_logs() as logs, torch.no_grad():
        unet(
            sample,
            torch.tensor(500.0),
            encoder_hidden_states=torch.zeros(2, 77, unet.config.cross_attention_dim),
            added_time_ids=torch.zeros(2, 3),
            guidance_scale=torch.ones(2, 2),
        )
    assert denoiser.ran["eager"] == 1 and denoiser.misses == 1
    assert [e["event"] for e in logs] == ["model.aot_miss"]
    assert logs[0]["input_shape"] == (2, 4, 6, 16, 16) and logs[0]["serving"] == "eager"
    after = REGISTRY.get_sample_value("animfleet_model_unet_calls_total", {"path": "eager"})
    assert after == before + 1


def test_a_compiled_choice_without_packages_logs_that_it_serves_eagerly(tmp_path: Path) -> None:
    bare = tiny_student(tmp_path / "bare")
    with capture_logs() as logs:
        animator = Animator(bare, compile=True, aot=True, jit=False)
    assert animator.compiled is None
    unavailable = [e for e in logs if e["event"] == "model.aot_unavailable"]
    assert unavailable and unavailable[0]["serving"] == "eager"
    assert "no artifact" in unavailable[0]["why"]


def test_the_range_is_exported_as_symbolic_sizes() -> None:
    sizes = SizeRange(batch=1, channels=6, frames=(2, 32), side=(8, 64), multiple=8)
    sample = sizes.dims()[0]
    assert set(sample) == {1, 3, 4}  # frames, height, width; batch and channels static
    assert sizes.covers((1, 2, 6, 8, 64)) and not sizes.covers((1, 33, 6, 8, 8))
    assert "2-32 frames, sides 8-64" in sizes.label()


def test_a_peer_fetches_published_packages_from_the_bucket(student: Path, tmp_path: Path) -> None:
    """Published once per CPU kind; a worker whose model lacks them fetches them at boot, and a
    set whose manifest is not yet up is not loaded."""
    bucket = SharedPackages(LocalStore(tmp_path / "bucket"))
    keys = bucket.publish(student, "fp32")
    assert keys[-1].endswith(MANIFEST) and any("dynamic" in key for key in keys)
    peer = copy_model(student, tmp_path / "peer")
    assert not (peer / AOT_DIR).exists()
    animator = Animator(peer, compile=True, aot=True, jit=False, shared_packages=bucket)
    assert isinstance(animator.compiled, AOTDenoiser), animator.aot_status
    assert animator.compiled.dynamic is not None and len(animator.compiled.runners) == 1
    assert bucket.fetch(peer, "fp32") == "present"
    late = copy_model(student, tmp_path / "late")
    bucket.objects.delete(keys[-1])  # the manifest, written last
    assert bucket.fetch(late, "fp32").startswith("none in the bucket")
    unshared = Animator(late, compile=True, aot=True, jit=False, shared_packages=bucket)
    assert unshared.compiled is None and "no artifact" in unshared.aot_status


def test_exported_coordinate_grids_follow_the_size() -> None:
    """Exported with a symbolic width, the grid is linspace's at every width (not the
    example's), to float rounding."""

    class Grid(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return linspace(-1, 1, x.shape[-1]) + pixel_centres(8, x.shape[-1])[0, :, 0]

    width = torch.export.Dim("width", min=2, max=64)
    program = torch.export.export(Grid(), (torch.zeros(1, 16),), dynamic_shapes=({1: width},))
    for size in (2, 8, 40, 64):
        expected = torch.linspace(-1, 1, size) + pixel_centres(8, size)[0, :, 0]
        torch.testing.assert_close(program.module()(torch.zeros(1, size)), expected)
