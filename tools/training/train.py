"""``animfleet train``: train the small model in resumable stretches, state in one directory.

Everything random in a step (which clips, timesteps, noise, condition dropout) derives from
``(seed, step)``, so a run resumed from a checkpoint takes the same steps as one that never
stopped.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from tools.training.data import training_batch
from tools.training.loop import run_steps, update_ema
from tools.training.model import build_small_pipeline
from workers.model.pipeline import AnimationPipeline

CHECKPOINT = "checkpoint.pt"


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


@dataclass
class TrainState:
    step: int = 0
    seconds: float = 0.0
    losses: list[tuple[int, float]] = field(default_factory=list)


class Trainer:
    """Owns the pipeline being trained, its EMA copy, the optimiser and the run directory."""

    def __init__(self, run_dir: Path, config: TrainConfig | None = None) -> None:
        self.run_dir = run_dir
        saved = run_dir / "config.json"
        if saved.exists():
            loaded = json.loads(saved.read_text())
            loaded["block_out_channels"] = tuple(loaded["block_out_channels"])
            if config is not None and asdict(config) != loaded:
                raise ValueError(f"{run_dir} was started with another config: {loaded}")
            config = TrainConfig(**loaded)
        self.config = config or TrainConfig()
        self.pipe = build_small_pipeline(self.config.seed, self.config.block_out_channels)
        self.ema = build_small_pipeline(self.config.seed, self.config.block_out_channels)
        self.ema.unet.load_state_dict(self.pipe.unet.state_dict())
        self.ema.text_encoder.load_state_dict(self.pipe.text_encoder.state_dict())
        self.params = [*self.pipe.unet.parameters(), *self.pipe.text_encoder.parameters()]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=self.config.learning_rate, weight_decay=self.config.weight_decay
        )
        alphas = self.pipe.scheduler.alphas_cumprod.float()
        self.alpha = alphas.sqrt()
        self.sigma = (1 - alphas).sqrt()
        self.state = TrainState()
        if (run_dir / CHECKPOINT).exists():
            self._load()

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
        output = self.pipe.unet(sample, timesteps, encoder_hidden_states=context)
        # The generator knows each clip's true flow: supervising the flow head with it (where the
        # model sees both image and prompt) teaches motion directly, while warping gradients
        # alone reach only about a pixel.
        known = (~drop_text).float().view(-1, 1, 1, 1, 1)
        flow_error = ((output.flow - flows) ** 2 * known).mean()
        loss: torch.Tensor = F.mse_loss(output.sample, video) + cfg.flow_weight * flow_error
        return loss

    def _context(self, prompts: list[str]) -> torch.Tensor:
        tokenizer = self.pipe.tokenizer
        ids = tokenizer(
            prompts,
            padding="max_length",
            max_length=tokenizer.model_max_length,
            truncation=True,
            return_tensors="pt",
        ).input_ids
        text = self.pipe.text_encoder(ids).last_hidden_state
        return torch.cat([torch.zeros_like(text[:, :1]), text], dim=1)  # token 0: image slot

    def _learning_rate(self, step: int) -> float:
        cfg = self.config
        rate = cfg.learning_rate * min(1.0, (step + 1) / cfg.warmup_steps)
        if cfg.decay_from is not None and step > cfg.decay_from:
            progress = min(1.0, (step - cfg.decay_from) / cfg.decay_steps)
            rate *= 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
        return rate

    def train_step(self) -> float:
        step = self.state.step
        for group in self.optimizer.param_groups:
            group["lr"] = self._learning_rate(step)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(step)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        update_ema(self._trained(self.pipe), self._trained(self.ema), step, self.config.ema_decay)
        self.state.step += 1
        return loss.item()

    def run(self, steps: int, minutes: float | None = None, checkpoint_every: int = 100) -> None:
        """Train until ``steps`` in total (or ``minutes`` of this stretch), checkpointing."""
        run_steps(
            self.state,
            steps,
            self.train_step,
            self.save,
            total=steps,
            desc="train",
            minutes=minutes,
            checkpoint_every=checkpoint_every,
        )

    def save(self) -> None:
        """Write the checkpoint atomically (a kill mid-write leaves the previous one)."""
        from tools.training.plots import plot_loss

        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.json").write_text(json.dumps(asdict(self.config), indent=2))
        payload: dict[str, Any] = {
            "model": [m.state_dict() for m in self._trained(self.pipe)],
            "ema": [m.state_dict() for m in self._trained(self.ema)],
            "optimizer": self.optimizer.state_dict(),
            "state": asdict(self.state),
        }
        tmp = self.run_dir / (CHECKPOINT + ".tmp")
        torch.save(payload, tmp)
        os.replace(tmp, self.run_dir / CHECKPOINT)
        if self.state.losses:
            plot_loss(self.state.losses, self.run_dir / "loss.png")

    def _load(self) -> None:
        payload = torch.load(self.run_dir / CHECKPOINT, weights_only=False)
        for module, weights in zip(self._trained(self.pipe), payload["model"], strict=True):
            module.load_state_dict(weights)
        for module, weights in zip(self._trained(self.ema), payload["ema"], strict=True):
            module.load_state_dict(weights)
        self.optimizer.load_state_dict(payload["optimizer"])
        state = payload["state"]
        self.state = TrainState(
            step=state["step"],
            seconds=state["seconds"],
            losses=[(int(s), float(v)) for s, v in state["losses"]],
        )

    def export(self, directory: Path) -> Path:
        """Save the EMA weights as a ``from_pretrained`` directory."""
        self.ema.save_pretrained(directory, safe_serialization=True)
        summary = {
            "steps": self.state.step,
            "train_seconds": round(self.state.seconds, 1),
            "parameters": {
                "unet": sum(p.numel() for p in self.ema.unet.parameters()),
                "text_encoder": sum(p.numel() for p in self.ema.text_encoder.parameters()),
            },
            "config": asdict(self.config),
        }
        (directory / "training.json").write_text(json.dumps(summary, indent=2))
        if (self.run_dir / "loss.png").exists():
            shutil.copyfile(self.run_dir / "loss.png", directory / "loss.png")
        return directory


def steps_per_second(trainer: Trainer) -> float:
    return trainer.state.step / max(trainer.state.seconds, math.ulp(1.0))
