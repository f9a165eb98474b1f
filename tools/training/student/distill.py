"""``animfleet distill``: guidance + step distillation of the shipped teacher, in one stage.

The teacher samples with three U-Net passes per step (guided) and 32 DPM-Solver++ steps. The
student is the teacher's U-Net plus an embedding of the two guidance scales
(:class:`~workers.model.networks.motion_unet.MotionUNet` ``guidance_embedding``), initialised from
the teacher's weights, so it starts as the teacher's image + text pass.

One combined stage, because the targets of both distillations come from one teacher run:

1. **Targets.** For training scenes, prompts, guidance scales drawn from the range and starting
   noise ``z``, the teacher samples its guided 32-step output ``x0*`` (96 U-Net evaluations).
2. **Student states.** A sampler whose clean-sample predictions all equal ``x0*`` moves along
   one line: ``x_t = a_t x0* + s_t e`` with ``e = (z - a_T x0*) / s_T`` (a DDIM step, and a
   DPM-Solver++ step, keep ``e`` fixed when the prediction does not change). Those are the
   exact states an ideal 8-step (or 4-step) student visits from ``z``, known in closed form, so
   no teacher evaluation is spent on intermediate steps.
3. **Loss.** ``|| student(x_t, t, image, prompt, scales) - x0* ||^2`` at timesteps of the
   student's 8- and 4-step schedules and uniform ones in between.

So one student pass per step reproduces the teacher's three-pass guided prediction, and one
student step covers four teacher steps. Everything random derives from ``(seed, index)``;
targets are cached in shards and training resumes from its checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from tqdm import tqdm

from tools.training.data.scenes import training_sample
from tools.training.evaluation.evaluate import load_pipeline
from tools.training.loop import RunState, TrainingRun, run_config
from workers.model.networks.motion_unet import MotionUNet
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.runtime.serving import SERVING_FILE

TARGETS = "targets"
FPS = 8
# Distillation scenes are drawn far past the indices the teacher trained on.
SCENE_OFFSET = 50_000_000


@dataclass
class DistillConfig:
    """Hyper-parameters; saved in the run directory and fixed for the life of a run."""

    seed: int = 0
    teacher: str = "models/animfleet-small"  # relative to the checkout, as make runs it
    teacher_steps: int = 32
    student_steps: int = 8
    # The scales the student learns; serving ones are drawn with ``serving_share``.
    image_guidance: tuple[float, float] = (1.0, 2.0)
    text_guidance: tuple[float, float] = (1.0, 3.0)
    serving_guidance: tuple[float, float] = (1.0, 1.0)
    serving_share: float = 0.25
    trajectories: int = 1024
    shard_size: int = 32
    steps: int = 1500
    batch_size: int = 16
    learning_rate: float = 1e-4
    warmup_steps: int = 100
    ema_decay: float = 0.995
    size: int = 32
    num_frames: int = 8


@dataclass
class DistillState(RunState):
    target_seconds: float = 0.0  # spent sampling the teacher, apart from training ``seconds``


@dataclass
class Targets:
    """The teacher's outputs for ``N`` trajectories, with what produced them."""

    images: torch.Tensor  # (N, 3, H, W) in [-1, 1]
    prompts: list[str]
    scales: torch.Tensor  # (N, 2): image, text
    noise: torch.Tensor  # (N, F, C, H, W): z
    samples: torch.Tensor  # (N, F, C, H, W): the teacher's guided sample x0*


def schedule_states(scheduler: Any, steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(timesteps, a, s) of a sampler's states: ``x = a x0 + s e`` at each step.

    DPM-Solver++ on log-SNR steps uses interpolated noise levels whose rounded timesteps are
    what the U-Net sees, so ``a`` and ``s`` come from the scheduler's own sigmas.
    """
    scheduler.set_timesteps(steps)
    sigmas = scheduler.sigmas[: len(scheduler.timesteps)].double()  # sqrt((1 - abar) / abar)
    alpha = 1 / (sigmas**2 + 1).sqrt()
    return scheduler.timesteps.clone().long(), alpha.float(), (sigmas * alpha).float()


def make_student(teacher: AnimationPipeline, seed: int) -> AnimationPipeline:
    """The teacher's pipeline with a guidance-conditioned copy of its U-Net."""
    torch.manual_seed(seed)
    # Private keys (``_use_default_values``) would make from_config drop the override.
    config = {k: v for k, v in teacher.unet.config.items() if not k.startswith("_")}
    unet = MotionUNet.from_config({**config, "guidance_embedding": True})
    missing, unexpected = unet.load_state_dict(teacher.unet.state_dict(), strict=False)
    if unexpected or not all(key.startswith("guidance_mlp.") for key in missing):
        raise ValueError(f"the teacher is not a MotionUNet of this shape: {missing, unexpected}")
    return AnimationPipeline(
        unet=unet,
        vae=teacher.vae,
        image_encoder=teacher.image_encoder,
        text_encoder=teacher.text_encoder,
        tokenizer=teacher.tokenizer,
        scheduler=teacher.scheduler,
    )


class Distiller(TrainingRun[DistillConfig, DistillState, AnimationPipeline]):
    """A distillation run: the teacher, its targets and the student (the base's ``model``)."""

    desc = "distill"
    loss_format = ".2e"
    plot_labels: ClassVar[dict[str, str]] = {
        "ylabel": "MSE to the teacher's guided sample",
        "title": "animfleet-small-distilled: distillation loss",
    }
    weights_key = "student"
    bare_weights = True

    def __init__(self, run_dir: Path, config: DistillConfig | None = None) -> None:
        config = run_config(run_dir, config, DistillConfig)
        self.teacher = load_pipeline(Path(config.teacher))
        student = make_student(self.teacher, config.seed)
        ema = make_student(self.teacher, config.seed)
        for module in (self.teacher.unet, self.teacher.text_encoder, ema.unet):
            module.requires_grad_(False)
        alphas = self.teacher.scheduler.alphas_cumprod.double()
        every = (torch.arange(len(alphas)), alphas.sqrt().float(), (1 - alphas).sqrt().float())
        # States trained on: the student's schedule (half), the half-length one, any timestep.
        scheduler = self.teacher.scheduler
        self.state_pools = [
            schedule_states(scheduler, config.student_steps),
            schedule_states(scheduler, max(1, config.student_steps // 2)),
            every,
        ]
        super().__init__(run_dir, config, student, ema, DistillState(), weight_decay=0.0)

    @property
    def student(self) -> AnimationPipeline:
        """The pipeline being trained (the base's ``model``)."""
        return self.model

    def _trained(self, pipe: AnimationPipeline) -> list[torch.nn.Module]:
        return [pipe.unet]  # the text encoder is the teacher's, frozen

    # -- stage 1: the teacher's guided samples ------------------------------------------------

    def _shard_path(self, shard: int) -> Path:
        return self.run_dir / TARGETS / f"{shard:05d}.pt"

    @property
    def shards(self) -> int:
        return math.ceil(self.config.trajectories / self.config.shard_size)

    def make_targets(self) -> None:
        """Sample the teacher for every trajectory not cached yet (resumable by shard)."""
        cfg = self.config
        todo = [s for s in range(self.shards) if not self._shard_path(s).exists()]
        done = (self.shards - len(todo)) * cfg.shard_size
        with tqdm(
            total=self.shards * cfg.shard_size, initial=done, desc="teacher", unit="clip"
        ) as bar:
            for shard in todo:
                started = time.monotonic()
                self._write_shard(shard)
                self.state.target_seconds += time.monotonic() - started
                bar.update(cfg.shard_size)
        self.save()

    def _write_shard(self, shard: int) -> None:
        cfg = self.config
        first = shard * cfg.shard_size
        count = min(cfg.shard_size, cfg.trajectories - first)
        scenes = [
            training_sample(SCENE_OFFSET + first + i, cfg.size, cfg.num_frames)
            for i in range(count)
        ]
        generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + shard)
        images = torch.stack([scene.image for scene in scenes])
        prompts = [scene.prompt for scene in scenes]
        scales = self._draw_scales(count, generator)
        noise = torch.randn((count, cfg.num_frames, 3, cfg.size, cfg.size), generator=generator)
        with torch.inference_mode():
            conditions = self.teacher.condition(images, prompts, cfg.num_frames, FPS)
            samples = self.teacher.denoise(noise, conditions, scales, cfg.teacher_steps)
        path = self._shard_path(shard)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"images": images, "prompts": prompts, "scales": scales, "noise": noise}
        torch.save({**payload, "samples": samples.clone()}, path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)

    def _draw_scales(self, count: int, generator: torch.Generator) -> torch.Tensor:
        cfg = self.config
        low = torch.tensor([cfg.image_guidance[0], cfg.text_guidance[0]])
        high = torch.tensor([cfg.image_guidance[1], cfg.text_guidance[1]])
        scales = low + (high - low) * torch.rand((count, 2), generator=generator)
        serving = torch.rand(count, generator=generator) < cfg.serving_share
        scales[serving] = torch.tensor(cfg.serving_guidance)
        return scales

    def load_targets(self) -> Targets:
        shards = [torch.load(self._shard_path(s)) for s in range(self.shards)]
        return Targets(
            images=torch.cat([s["images"] for s in shards]),
            prompts=[p for s in shards for p in s["prompts"]],
            scales=torch.cat([s["scales"] for s in shards]),
            noise=torch.cat([s["noise"] for s in shards]),
            samples=torch.cat([s["samples"] for s in shards]),
        )

    # -- stage 2: the student ----------------------------------------------------------------

    def loss(self, step: int, targets: Targets) -> torch.Tensor:
        """The student's loss on training step ``step`` (its batch is fixed by the step)."""
        cfg = self.config
        generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 7 + step)
        pick = torch.randint(0, len(targets.prompts), (cfg.batch_size,), generator=generator)
        pools = self.state_pools
        # z is the state at the first step; the line's direction follows from it.
        start_alpha, start_sigma = pools[0][1][0], pools[0][2][0]
        which = torch.multinomial(
            torch.tensor([0.5, 0.25, 0.25]), cfg.batch_size, True, generator=generator
        )
        chosen = [int(torch.randint(0, len(pools[w][0]), (1,), generator=generator)) for w in which]
        timesteps = torch.stack([pools[w][0][i] for w, i in zip(which, chosen, strict=True)])
        a = torch.stack([pools[w][1][i] for w, i in zip(which, chosen, strict=True)])
        s = torch.stack([pools[w][2][i] for w, i in zip(which, chosen, strict=True)])
        x0, z = targets.samples[pick], targets.noise[pick]
        direction = (z - start_alpha * x0) / start_sigma
        noisy = a.view(-1, 1, 1, 1, 1) * x0 + s.view(-1, 1, 1, 1, 1) * direction
        with torch.no_grad():
            conditions = self.student.condition(
                targets.images[pick], [targets.prompts[i] for i in pick], cfg.num_frames, FPS
            )
        sample = torch.cat([noisy, conditions.latents], dim=2)
        output = self.student.unet(
            sample,
            timesteps,
            encoder_hidden_states=conditions.context,
            guidance_scale=targets.scales[pick],
        )
        loss: torch.Tensor = F.mse_loss(output.sample, x0)
        return loss

    def _learning_rate(self, step: int) -> float:
        cfg = self.config
        warm = min(1.0, (step + 1) / cfg.warmup_steps)
        return (
            cfg.learning_rate
            * warm
            * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / cfg.steps)))
        )

    def train(
        self, minutes: float | None = None, checkpoint_every: int = 50, stop_at: int | None = None
    ) -> None:
        """Train until ``config.steps`` (or ``stop_at``, or ``minutes`` of this stretch)."""
        targets = self.load_targets()
        self.student.unet.train()
        self._run(
            lambda step: self.loss(step, targets),
            min(self.config.steps, stop_at or self.config.steps),
            self.config.steps,
            minutes,
            checkpoint_every,
        )

    # -- export ------------------------------------------------------------------------------

    def _describe(self, directory: Path) -> None:
        """``serving.json`` (how workers run the student) and ``distillation.json``."""
        cfg = self.config
        serving = {
            "image_guidance_scale": cfg.serving_guidance[0],
            "text_guidance_scale": cfg.serving_guidance[1],
            "steps": cfg.student_steps,
            "passes_per_step": 1,
            "guidance_range": {"image": list(cfg.image_guidance), "text": list(cfg.text_guidance)},
        }
        (directory / SERVING_FILE).write_text(json.dumps(serving, indent=2) + "\n")
        summary = {
            "steps": self.state.step,
            "train_seconds": round(self.state.seconds, 1),
            "target_seconds": round(self.state.target_seconds, 1),
            "teacher_unet_evaluations": cfg.trajectories * cfg.teacher_steps * 3,
            "parameters": sum(p.numel() for p in self.exported.unet.parameters()),
            "config": asdict(cfg),
        }
        (directory / "distillation.json").write_text(json.dumps(summary, indent=2) + "\n")
