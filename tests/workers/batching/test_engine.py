"""The batch engine against the plain path: the same frames per job, failures and cancels alone.

The shipped models (the three-pass teacher and the one-pass student) run in fp32 on small
videos. Frames must match a job run alone to at least 50 dB PSNR: the contract, since a kernel
may pick another reduction order for another batch size on other hardware. On this CPU they
are bit-identical (every row of the U-Net is computed as it would be alone), and the tests
print nothing else; the worst PSNR seen is asserted, not just that of one job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch

from animfleet.addons import AddonUse
from animfleet.jobs import JobCanceled, JobParams
from animfleet.shipped_models import SHIPPED_STUDENT_DIR, SHIPPED_TEACHER_DIR
from workers.batching import BatchEngine
from workers.batching import engine as engine_module
from workers.batching.sample import Sample, prepare
from workers.model import Animator, ModelError
from workers.model.animator import load_animator
from workers.model.pipelines.generation import GenerationParams
from workers.model.runtime.loading import prepare_image
from workers.model.runtime.profile import psnr
from workers.settings import WorkerSettings

MIN_PSNR_DB = 50.0
PROMPTS = ["pan left slowly", "zoom in", "rotate clockwise", "pan right"]

Frames = npt.NDArray[np.uint8]


def _load(model: Path) -> Animator:
    return load_animator(WorkerSettings(model_dir=model, profile=False, compile=False))


@pytest.fixture(scope="module")
def student() -> Animator:
    return _load(SHIPPED_STUDENT_DIR)


@pytest.fixture(scope="module")
def teacher() -> Animator:
    return _load(SHIPPED_TEACHER_DIR)


@pytest.fixture
def engine() -> Iterator[BatchEngine]:
    running = BatchEngine(4)
    yield running
    running.close()


def _jobs(make_image: Callable[..., bytes], count: int) -> list[tuple[bytes, JobParams]]:
    """Different images, prompts, seeds and step counts."""
    return [
        (
            make_image(16, 16, seed=index),
            JobParams(
                prompt=PROMPTS[index % len(PROMPTS)],
                frames=4,
                fps=8,
                width=16,
                height=16,
                seed=100 + index,
                steps=(8, 12, 9, 10)[index % 4],  # long enough for later jobs to join in time
            ),
        )
        for index in range(count)
    ]


class Staggered:
    """Runs jobs in threads through the engine, each starting once the one before it has run
    ``join_after`` steps: jobs join a batch already under way.

    However slow the host, the engine does not run a job past ``join_after`` steps until the
    next job has reached it (queued or in the batch), so the jobs do share U-Net calls.
    """

    def __init__(self, engine: BatchEngine, animator: Animator, join_after: int = 2) -> None:
        self.engine, self.animator, self.join_after = engine, animator, join_after
        self.frames: dict[int, Frames] = {}
        self.errors: dict[int, BaseException] = {}
        self.steps: dict[int, list[int]] = {}

    def _hold_for_joiners(self, jobs: list[tuple[bytes, JobParams]]) -> None:
        """Wrap the engine's step (it runs on the engine thread, which alone takes queued jobs
        into the batch): wait while a member is due past ``join_after`` and the next job has
        neither reached the engine nor failed on its way."""
        engine, step = self.engine, self.engine._step
        job_of = {params.seed: index for index, (_, params) in enumerate(jobs)}
        arrived: set[int] = set()

        def held_step(members: list[Sample]) -> None:
            arrived.update(job_of.get(s.params.seed, -1) for s in engine._active)
            for sample in members:
                following = job_of.get(sample.params.seed, -1) + 1
                if sample.index < self.join_after or following in (0, len(jobs)):
                    continue
                deadline = time.monotonic() + 60
                while following not in arrived and following not in self.errors:
                    if engine._pending.qsize():  # queued: the next admission takes it
                        break
                    assert time.monotonic() < deadline, f"job {following} never reached the engine"
                    time.sleep(0.001)
            step(members)

        engine._step = held_step  # type: ignore[method-assign]

    def run(
        self,
        jobs: list[tuple[bytes, JobParams]],
        on_step: Callable[[int, int, int], None] | None = None,
    ) -> None:
        self._hold_for_joiners(jobs)
        threads = []
        for index, (image, params) in enumerate(jobs):
            joined = threading.Event()
            self.steps[index] = []

            def step(
                done: int, total: int, index: int = index, joined: threading.Event = joined
            ) -> None:
                self.steps[index].append(done)
                if done >= self.join_after or done == total:
                    joined.set()
                if on_step is not None:
                    on_step(index, done, total)

            def work(
                index: int = index,
                image: bytes = image,
                params: JobParams = params,
                joined: threading.Event = joined,
            ) -> None:
                try:
                    self.frames[index] = self.engine.animate(
                        self.animator, image, params, step, None
                    )
                except BaseException as error:
                    self.errors[index] = error
                    joined.set()

            thread = threading.Thread(target=work)
            thread.start()
            threads.append(thread)
            assert joined.wait(60), f"job {index} never ran {self.join_after} steps"
        for thread in threads:
            thread.join(120)
            assert not thread.is_alive()


def _assert_same(batched: Frames, alone: Frames) -> float:
    assert batched.shape == alone.shape
    quality = float("inf") if np.array_equal(batched, alone) else psnr(batched, alone)
    assert quality >= MIN_PSNR_DB
    return quality


def _patch_prepare(monkeypatch: pytest.MonkeyPatch, change: Callable[[Sample], None]) -> None:
    """Apply ``change`` to every sample the engine prepares (a fault, other scales)."""

    def patched(animator: Animator, image: bytes, params: JobParams) -> Sample:
        sample = prepare(animator, image, params)
        change(sample)
        return sample

    monkeypatch.setattr(engine_module, "prepare", patched)


def _only_one_fails(
    staggered: Staggered, alone: list[Frames], culprit: int, kind: type[BaseException]
) -> None:
    assert isinstance(staggered.errors.pop(culprit), kind)
    assert not staggered.errors
    for index, frames in enumerate(alone):
        if index != culprit:
            _assert_same(staggered.frames[index], frames)


@pytest.mark.parametrize("model", ["student", "teacher"])
def test_jobs_joining_at_different_steps_get_the_frames_they_get_alone(
    model: str,
    engine: BatchEngine,
    make_image: Callable[..., bytes],
    request: pytest.FixtureRequest,
) -> None:
    animator: Animator = request.getfixturevalue(model)
    jobs = _jobs(make_image, 4)
    alone = [animator.animate(image, params) for image, params in jobs]
    staggered = Staggered(engine, animator)
    staggered.run(jobs)
    assert not staggered.errors
    for index, frames in enumerate(alone):
        _assert_same(staggered.frames[index], frames)
        total = jobs[index][1].steps
        assert staggered.steps[index] == list(range(1, (total or 0) + 1))  # every step reported
    assert engine.largest_batch >= 3  # they did share U-Net calls
    assert engine.steps_run < sum(params.steps or 0 for _, params in jobs)


def test_a_sample_whose_latents_go_non_finite_fails_alone(
    student: Animator,
    engine: BatchEngine,
    make_image: Callable[..., bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = _jobs(make_image, 3)
    alone = [student.animate(image, params) for image, params in jobs]
    poisoned_seed = jobs[1][1].seed

    def poison(sample: Sample) -> None:
        if sample.params.seed == poisoned_seed:
            sample.latents[0, 0, 0, 0, 0] = float("nan")

    _patch_prepare(monkeypatch, poison)
    staggered = Staggered(engine, student, join_after=1)
    staggered.run(jobs)
    _only_one_fails(staggered, alone, 1, ModelError)


def test_a_sample_that_breaks_the_batched_call_fails_alone(
    student: Animator,
    engine: BatchEngine,
    make_image: Callable[..., bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A U-Net call that raises is retried one sample at a time: only the culprit fails."""
    jobs = _jobs(make_image, 3)
    alone = [student.animate(image, params) for image, params in jobs]
    unet = student.pipeline.unet
    forward = unet.forward
    poison_seed = jobs[2][1].seed

    def poison(sample: Sample) -> None:
        if sample.params.seed == poison_seed:  # a context the U-Net refuses
            sample.conditions.context.fill_(float("inf"))

    def refusing(*args: object, **kwargs: object) -> object:
        context = kwargs["encoder_hidden_states"]
        assert isinstance(context, torch.Tensor)
        if torch.isinf(context).any():
            raise RuntimeError("a sample the kernel cannot take")
        return forward(*args, **kwargs)

    _patch_prepare(monkeypatch, poison)
    monkeypatch.setattr(unet, "forward", refusing)
    staggered = Staggered(engine, student, join_after=1)
    staggered.run(jobs)
    _only_one_fails(staggered, alone, 2, ModelError)


def test_canceling_one_sample_mid_batch_leaves_the_others_untouched(
    student: Animator, engine: BatchEngine, make_image: Callable[..., bytes]
) -> None:
    jobs = _jobs(make_image, 3)
    alone = [student.animate(image, params) for image, params in jobs]

    def cancel_second(index: int, done: int, total: int) -> None:
        if index == 1 and done == 2:  # the record says canceled: on_step raises
            raise JobCanceled("canceled", f"canceled at {done}")

    staggered = Staggered(engine, student, join_after=1)
    staggered.run(jobs, cancel_second)
    assert staggered.steps[1][-1] <= 3  # left the batch within a step of the cancel
    _only_one_fails(staggered, alone, 1, JobCanceled)


def test_past_its_time_limit_a_job_leaves_the_batch(
    student: Animator, engine: BatchEngine, make_image: Callable[..., bytes]
) -> None:
    from billiard.exceptions import SoftTimeLimitExceeded

    image, params = _jobs(make_image, 1)[0]
    slow = params.model_copy(update={"steps": 200})
    with pytest.raises(SoftTimeLimitExceeded):
        engine.animate(student, image, slow, None, 0.05)


def test_a_model_the_engine_cannot_batch_runs_as_it_would_alone(
    engine: BatchEngine, make_image: Callable[..., bytes]
) -> None:
    from tests.fixtures.standin import StandinAnimator

    standin = StandinAnimator(0.01, jitter=0)
    image, params = _jobs(make_image, 1)[0]
    frames = engine.animate(standin, image, params, None, None)
    assert frames.shape == (params.frames, params.height, params.width, 3)
    assert engine.steps_run == 0


def test_jobs_with_and_without_add_ons_share_the_loop_and_each_gets_its_own_frames(
    student: Animator, engine: BatchEngine, make_image: Callable[..., bytes]
) -> None:
    """Add-ons act on the whole U-Net, so their jobs step in a U-Net call of their own; the
    base model's jobs beside them must not see the add-on, nor the add-on job lose it."""
    assert student.addons is not None and "shake" in student.addons.names()
    jobs = _jobs(make_image, 3)
    shaken = jobs[1][1].model_copy(update={"addons": (AddonUse(name="shake", scale=1.0),)})
    jobs[1] = (jobs[1][0], shaken)
    alone = [student.animate(image, params) for image, params in jobs]
    assert not np.array_equal(alone[1], student.animate(jobs[1][0], _jobs(make_image, 3)[1][1]))
    staggered = Staggered(engine, student, join_after=1)
    staggered.run(jobs)
    assert not staggered.errors
    for index, frames in enumerate(alone):
        _assert_same(staggered.frames[index], frames)


def test_an_add_on_the_worker_cannot_serve_fails_the_job_before_any_step(
    student: Animator, engine: BatchEngine, make_image: Callable[..., bytes]
) -> None:
    image, params = _jobs(make_image, 1)[0]
    unknown = params.model_copy(update={"addons": (AddonUse(name="wobble"),)})
    with pytest.raises(ModelError, match="wobble") as caught:
        engine.animate(student, image, unknown, None, None)
    assert not str(caught.value).startswith("ModelError")
    assert engine.steps_run == 0


def test_each_sample_keeps_its_own_guidance_scales(
    student: Animator,
    engine: BatchEngine,
    make_image: Callable[..., bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A guidance-distilled student takes the scales as input, one row per sample."""
    jobs = _jobs(make_image, 2)
    scales = {jobs[0][1].seed: (2.0, 3.0), jobs[1][1].seed: (1.0, 1.0)}
    alone = []
    for image, params in jobs:
        pixels = prepare_image(image, params.width, params.height)
        image_scale, text_scale = scales[params.seed]
        alone.append(
            student.pipeline(
                pixels,
                GenerationParams(
                    params.prompt,
                    num_frames=params.frames,
                    fps=params.fps,
                    num_inference_steps=params.steps,
                    image_guidance_scale=image_scale,
                    text_guidance_scale=text_scale,
                    seed=params.seed,
                ),
            )
        )
    assert not np.array_equal(*alone)

    def scale(sample: Sample) -> None:
        sample.guidance = torch.tensor([scales[sample.params.seed]])

    _patch_prepare(monkeypatch, scale)
    staggered = Staggered(engine, student, join_after=1)
    staggered.run(jobs)
    assert not staggered.errors and engine.largest_batch == 2
    for index, frames in enumerate(alone):
        _assert_same(staggered.frames[index], frames)


def test_rendered_sizes_batch_at_the_working_size_and_match_a_job_alone(
    student: Animator, engine: BatchEngine, make_image: Callable[..., bytes]
) -> None:
    """512 px, 256 px and 64 px jobs share U-Net calls at the 64 px working size; the larger
    two are rendered at their own size, each the job's frames alone (the contract's PSNR: a
    batched 64 px call may sum in another order; here 86-95 dB, a few pixels one level off)."""
    sizes, steps = (512, 256, 64), (8, 9, 10)
    jobs = [
        (
            make_image(side, side, seed=index),
            JobParams(
                prompt=PROMPTS[index],
                frames=4,
                fps=8,
                width=side,
                height=side,
                seed=200 + index,
                steps=steps[index],
            ),
        )
        for index, side in enumerate(sizes)
    ]
    alone = [student.animate(image, params) for image, params in jobs]
    staggered = Staggered(engine, student)
    staggered.run(jobs)
    assert not staggered.errors
    for index, frames in enumerate(alone):
        assert staggered.frames[index].shape == (4, sizes[index], sizes[index], 3)
        _assert_same(staggered.frames[index], frames)
    assert engine.largest_batch >= 2  # rendered jobs batched at the working size


def test_a_non_square_rendered_job_is_bit_identical_to_the_job_alone(
    student: Animator, engine: BatchEngine, make_image: Callable[..., bytes]
) -> None:
    params = JobParams(prompt="pan right", frames=3, fps=8, width=320, height=192, seed=5)
    image = make_image(400, 240, seed=9)
    batched = engine.animate(student, image, params)
    assert batched.shape == (3, 192, 320, 3)
    assert np.array_equal(batched, student.animate(image, params))
