"""``animfleet train``: train the small model in resumable stretches, state in one directory.

Everything random in a step (which clips, timesteps, noise, condition dropout) derives from
``(seed, step)``, so a run resumed from a checkpoint takes the same steps as one that never
stopped.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from tools.training.base.model import build_small_pipeline
from tools.training.data.scenes import training_batch
from tools.training.loop import RunState, TrainingRun, run_config
from workers.model.pipelines.animation import AnimationPipeline


@dataclass
class TrainConfig:
    """Hyper-parameters; saved next to the checkpoints and fixed for the life of a run."""

    seed: int = 0
    batch_size: int = 8
    size: int = 32
    num_frames: int = 8
    learning_rate: float = 3e-4
    warmup_steps: int = 200
    weight_decay: float = 0.01
    ema_decay: float = 0.999
    # Condition dropout, so all three guidance passes are trained: P(no text), P(no image+text).
    drop_text: float = 0.1
    drop_all: float = 0.1
    flow_weight: float = 1.0
    block_out_channels: tuple[int, ...] = (32, 64, 96)
    # Cosine decay of the learning rate to a tenth over these steps from this step (None: the
    # rate stays constant after warm-up). A function of the step, so resumes stay exact.
    decay_from: int | None = None
    decay_steps: int = 2000


class Trainer(TrainingRun[TrainConfig, RunState, AnimationPipeline]):
    """Trains the small pipeline's U-Net and text encoder on denoising with flow supervision."""

    def __init__(self, run_dir: Path, config: TrainConfig | None = None) -> None:
        config = run_config(run_dir, config, TrainConfig)
        pipe = build_small_pipeline(config.seed, config.block_out_channels)
        ema = build_small_pipeline(config.seed, config.block_out_channels)
        alphas = pipe.scheduler.alphas_cumprod.float()
        self.alpha = alphas.sqrt()
        self.sigma = (1 - alphas).sqrt()
        super().__init__(run_dir, config, pipe, ema, RunState(), config.weight_decay)

    def schedule_decay(self, decay_from: int, decay_steps: int) -> None:
        """Add a learning-rate decay to a run that has not reached it yet.

        Steps before ``decay_from`` are the same with or without it, so the run stays the one
        a fresh start with the new config would take; a decay in the past is refused.
        """
        if decay_from < self.state.step:
            raise ValueError(f"decay_from {decay_from} is before the run's step {self.state.step}")
        self.config.decay_from, self.config.decay_steps = decay_from, decay_steps
        self.save()

    def _trained(self, pipe: AnimationPipeline) -> list[torch.nn.Module]:
        return [pipe.unet, pipe.text_encoder]

    def loss(self, step: int) -> torch.Tensor:
        """The denoising loss of training step ``step`` (its batch and noise are fixed by it)."""
        cfg = self.config
        video, prompts, flows = training_batch(
            step * cfg.batch_size, cfg.batch_size, cfg.size, cfg.num_frames
        )
        generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
        batch = video.shape[0]
        timesteps = torch.randint(0, len(self.alpha), (batch,), generator=generator)
        noise = torch.randn(video.shape, generator=generator)
        choice = torch.rand(batch, generator=generator)
        drop_all = choice < cfg.drop_all
        drop_text = choice < cfg.drop_all + cfg.drop_text
        prompts = ["" if drop else p for p, drop in zip(prompts, drop_text.tolist(), strict=True)]
        a = self.alpha[timesteps].view(-1, 1, 1, 1, 1)
        s = self.sigma[timesteps].view(-1, 1, 1, 1, 1)
        noisy = a * video + s * noise
        image = video[:, :1] * (~drop_all).float().view(-1, 1, 1, 1, 1)
        sample = torch.cat([noisy, image.expand_as(video)], dim=2)
        context = self._context(prompts)
        output = self.model.unet(sample, timesteps, encoder_hidden_states=context)
        # The generator knows each clip's true flow: supervising the flow head with it (where the
        # model sees both image and prompt) teaches motion directly, while warping gradients
        # alone reach only about a pixel.
        known = (~drop_text).float().view(-1, 1, 1, 1, 1)
        flow_error = ((output.flow - flows) ** 2 * known).mean()
        loss: torch.Tensor = F.mse_loss(output.sample, video) + cfg.flow_weight * flow_error
        return loss

    def _context(self, prompts: list[str]) -> torch.Tensor:
        tokenizer = self.model.tokenizer
        ids = tokenizer(
            prompts,
            padding="max_length",
            max_length=tokenizer.model_max_length,
            truncation=True,
            return_tensors="pt",
        ).input_ids
        text = self.model.text_encoder(ids).last_hidden_state
        return torch.cat([torch.zeros_like(text[:, :1]), text], dim=1)  # token 0: image slot

    def _learning_rate(self, step: int) -> float:
        cfg = self.config
        rate = cfg.learning_rate * min(1.0, (step + 1) / cfg.warmup_steps)
        if cfg.decay_from is not None and step > cfg.decay_from:
            progress = min(1.0, (step - cfg.decay_from) / cfg.decay_steps)
            rate *= 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
        return rate

    def run(self, steps: int, minutes: float | None = None, checkpoint_every: int = 100) -> None:
        """Train until ``steps`` in total (or ``minutes`` of this stretch), checkpointing."""
        self._run(self.loss, steps, steps, minutes, checkpoint_every)

    def _describe(self, directory: Path) -> None:
        """``training.json``, which the model card (``card.py``) is written from."""
        summary = {
            "steps": self.state.step,
            "train_seconds": round(self.state.seconds, 1),
            "parameters": {
                "unet": sum(p.numel() for p in self.exported.unet.parameters()),
                "text_encoder": sum(p.numel() for p in self.exported.text_encoder.parameters()),
            },
            "config": asdict(self.config),
        }
        (directory / "training.json").write_text(json.dumps(summary, indent=2))


def steps_per_second(trainer: Trainer) -> float:
    return trainer.state.step / max(trainer.state.seconds, math.ulp(1.0))
