"""``animfleet addons train|eval``: motion add-ons, LoRAs on the served student's U-Net.

Each add-on teaches one motion of :mod:`tools.training.data.addon_motions` that the base model
does not know. The student stays frozen; peft puts a LoRA (``LoraConfig``) on the layers
workers give a branch (:data:`workers.model.addons.store.TARGETS`), trained on procedural clips of
the motion prompted as still scenes: the clean-clip MSE plus flow supervision, at the noise
levels of the student's own 8-step schedule and uniform ones. The run resumes from its
checkpoint; the export is the peft-named LoRA in ``addon.safetensors`` with its card.

Evaluation runs what workers run: the real pipeline with the add-on on a parallel branch
(:mod:`workers.model.addons.lora_branch`), classified by
:func:`tools.training.evaluation.motion_estimate.classify_with_addons` on held-out scenes.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model
from safetensors.torch import save_file
from tqdm import tqdm

from tools.training.data.addon_motions import AddonMotion, addon_sample
from tools.training.evaluation.evaluate import load_pipeline
from tools.training.evaluation.frame_metrics import to_uint8
from tools.training.evaluation.motion_estimate import classify_with_addons
from tools.training.loop import RunState, TrainingRun, run_config
from tools.training.student.distill import FPS, schedule_states
from workers.model.addons.lora_branch import LoraBranches
from workers.model.addons.store import TARGETS, WEIGHTS_FILE, read_addon
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.pipelines.generation import GenerationParams

BASE = "models/animfleet-small-distilled"


@dataclass
class AddonConfig:
    """Hyper-parameters of one add-on's run; saved in the run directory, fixed for its life."""

    motion: str = AddonMotion.SHAKE.value
    base: str = BASE
    seed: int = 0
    steps: int = 300
    batch_size: int = 8
    rank: int = 4
    alpha: float = 4.0
    learning_rate: float = 3e-3
    ema_decay: float = 0.0  # unused: the LoRA is exported as trained
    flow_weight: float = 1.0
    size: int = 32
    num_frames: int = 8
    targets: tuple[str, ...] = field(default_factory=lambda: TARGETS)


class AddonTrainer(TrainingRun[AddonConfig, RunState, AnimationPipeline]):
    """One add-on's resumable run in ``run_dir``: the frozen student with a peft LoRA, exported
    as trained (no EMA copy)."""

    weights_key = "lora"

    def __init__(self, run_dir: Path, config: AddonConfig | None = None) -> None:
        cfg = run_config(run_dir, config, AddonConfig)
        self.motion = AddonMotion(cfg.motion)
        self.desc = f"addon {self.motion.value}"
        torch.manual_seed(cfg.seed)
        pipe = load_pipeline(Path(cfg.base))
        pipe.unet.requires_grad_(False)
        pipe.text_encoder.requires_grad_(False)
        lora = LoraConfig(
            r=cfg.rank,
            lora_alpha=int(cfg.alpha),
            target_modules=list(cfg.targets),
            init_lora_weights=True,
        )
        inject_adapter_in_model(lora, pipe.unet)
        self.pools = (schedule_states(pipe.scheduler, 8), every_level(pipe.scheduler))
        super().__init__(run_dir, cfg, pipe, None, RunState(), weight_decay=0.0)

    def _trained(self, model: AnimationPipeline) -> list[torch.nn.Module]:
        return [model.unet]

    def _parameters(self) -> list[torch.nn.Parameter]:
        params = [p for name, p in self.model.unet.named_parameters() if "lora_" in name]
        for param in params:
            param.requires_grad_(True)
        return params

    def _pack(self, model: AnimationPipeline) -> Any:
        return {k: v for k, v in model.unet.state_dict().items() if "lora_" in k}

    def _unpack(self, model: AnimationPipeline, saved: Any) -> None:
        model.unet.load_state_dict(saved, strict=False)

    def _learning_rate(self, step: int) -> float:
        return self.config.learning_rate * warm_cosine(step, self.config.steps)

    def _loss_plot(self) -> dict[str, str]:
        title = f"add-on {self.motion.value}: LoRA training loss"
        return {"ylabel": "x0 MSE + flow MSE", "title": title}

    def loss(self, step: int) -> torch.Tensor:
        """The loss of training step ``step`` (its clips, noise and levels fixed by the step)."""
        cfg = self.config
        samples = [
            addon_sample(self.motion, step * cfg.batch_size + i, size=cfg.size)
            for i in range(cfg.batch_size)
        ]
        video = torch.stack([s.video for s in samples])
        flows = torch.stack([s.flow for s in samples])
        noisy, timesteps = noised(video, self.pools, cfg.seed, step)
        with torch.no_grad():
            conditions = self.model.condition(
                video[:, 0], [sample.prompt for sample in samples], cfg.num_frames, FPS
            )
        output = self.model.unet(
            torch.cat([noisy, conditions.latents], dim=2),
            timesteps,
            encoder_hidden_states=conditions.context,
            guidance_scale=torch.ones(cfg.batch_size, 2),
        )
        loss: torch.Tensor = F.mse_loss(output.sample, video) + cfg.flow_weight * F.mse_loss(
            output.flow, flows
        )
        return loss

    def train(self, minutes: float | None = None) -> None:
        """Train to ``config.steps`` (or ``minutes`` of this stretch), checkpointing."""
        self.model.unet.train()
        self._run(self.loss, self.config.steps, self.config.steps, minutes, checkpoint_every=50)

    def _write_weights(self, directory: Path) -> None:
        """``addon.safetensors``: the peft-named LoRA weights, with their metadata."""
        cfg = self.config
        weights = get_peft_model_state_dict(self.model.unet)
        metadata = {
            "format": "animfleet-addon",
            "base": Path(cfg.base).name,
            "motion": self.motion.value,
            "rank": str(cfg.rank),
            "alpha": str(cfg.alpha),
        }
        save_addon(directory, weights, metadata)

    def _describe(self, directory: Path) -> None:
        lora = self._pack(self.model)
        write_summary(directory, self.state, sum(v.numel() for v in lora.values()), self.config)


def warm_cosine(step: int, span: int) -> float:
    """The learning rate's factor at ``step`` of ``span``: a 20-step warm-up, then a cosine
    decay to a tenth."""
    warm = min(1.0, (step + 1) / 20)
    return warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / max(span, 1))))


def every_level(scheduler: Any) -> Levels:
    """Every training timestep of ``scheduler`` with its signal and noise scales."""
    alphas = scheduler.alphas_cumprod.float()
    return torch.arange(len(alphas)), alphas.sqrt(), (1 - alphas).sqrt()


def save_addon(directory: Path, weights: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """``addon.safetensors`` in ``directory``: ``weights`` with the add-on's ``metadata``."""
    tensors = {k: v.detach().contiguous() for k, v in weights.items()}
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata=metadata)


Levels = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # timesteps, a, s: x = a x0 + s e


def noised(
    video: torch.Tensor, pools: tuple[Levels, Levels], seed: int, step: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``video`` (B, F, C, H, W) noised, and the timesteps (B,): each clip at a level drawn
    from the first pool (the student's own schedule) or the second (every level), half and
    half; the draws and the noise fixed by ``seed`` and ``step``."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    picks = []
    for use_first in (torch.rand(video.shape[0], generator=generator) < 0.5).tolist():
        pool = pools[0] if use_first else pools[1]
        index = int(torch.randint(0, len(pool[0]), (1,), generator=generator))
        picks.append((pool[0][index], pool[1][index], pool[2][index]))
    timesteps = torch.stack([p[0] for p in picks])
    a = torch.stack([p[1] for p in picks]).view(-1, 1, 1, 1, 1)
    s = torch.stack([p[2] for p in picks]).view(-1, 1, 1, 1, 1)
    return a * video + s * torch.randn(video.shape, generator=generator), timesteps


def write_summary(directory: Path, state: RunState, parameters: int, config: Any) -> None:
    """An exported add-on's ``training.json``: steps, seconds, size and config."""
    summary = {
        "steps": state.step,
        "train_seconds": round(state.seconds, 1),
        "parameters": parameters,
        "bytes": (directory / WEIGHTS_FILE).stat().st_size,
        "config": asdict(config),
    }
    (directory / "training.json").write_text(json.dumps(summary, indent=2) + "\n")


def evaluate_addon(
    addon_dir: Path, base: Path, clips: int = 32, steps: int = 8, scale: float = 1.0
) -> dict[str, Any]:
    """Motion accuracy of one shipped add-on on held-out scenes, as workers serve it, next to
    the base model's on the same clips; and whether the base stays bit-identical with the
    branch installed but unused."""
    motion = AddonMotion(addon_dir.name)
    pipe: AnimationPipeline = load_pipeline(base)
    addon = read_addon(addon_dir, motion.value, base.name)
    labels: dict[str, Counter[str]] = {"addon": Counter(), "base": Counter()}
    identical = True
    for index in tqdm(range(clips), desc=f"eval {motion.value}", unit="clip"):
        sample = addon_sample(motion, index, heldout=True)
        image = np.ascontiguousarray(to_uint8(sample.video)[0])
        run = {
            "num_frames": sample.video.shape[0],
            "fps": FPS,
            "num_inference_steps": steps,
            "image_guidance_scale": 1.0,
            "text_guidance_scale": 1.0,
            "seed": index,
        }
        plain = pipe(image, GenerationParams(sample.prompt, **run))
        branches = LoraBranches(pipe.unet, TARGETS)
        try:
            unused = pipe(image, GenerationParams(sample.prompt, **run))
            with branches.activate([(addon.layers, scale)]):
                served = pipe(image, GenerationParams(sample.prompt, **run))
        finally:
            branches.remove()
        identical &= bool(np.array_equal(plain, unused))
        labels["addon"][classify_with_addons(torch.from_numpy(served))] += 1
        labels["base"][classify_with_addons(torch.from_numpy(plain))] += 1
    return {
        "motion": motion.value,
        "clips": clips,
        "steps": steps,
        "scale": scale,
        "motion_accuracy": round(labels["addon"][motion.value] / clips, 4),
        "base_model_accuracy": round(labels["base"][motion.value] / clips, 4),
        "predicted": dict(labels["addon"].most_common()),
        "base_predicted": dict(labels["base"].most_common()),
        "base_bit_identical_without_addon": identical,
    }
