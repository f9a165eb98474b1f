"""``animfleet slim train``: distil the served student into a slimmed copy of itself.

The distillation of :mod:`tools.training.student.distill` with two changes. The teacher is the
current
student (one pass per step, 8 steps): its targets are its own 8-step samples, on the path its
own sampler takes, at guidance scales drawn from its trained range. The student is a thinner
MotionUNet whose widths come from :func:`~tools.training.slim.plan.plan_pca` (or, for the control,
:func:`~tools.training.slim.plan.plan_uniform` at the same parameter count) and whose weights start
as the wide student's kept channels, not from scratch.

Every arm reads one cache of teacher targets (``targets_dir``): the teacher, the scenes, the
noise and the scales are the same for all of them, so sampling it once is enough and the arms
differ only in their architecture.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import torch

from tools.training.evaluation.evaluate import load_pipeline
from tools.training.loop import TrainingRun, run_config
from tools.training.slim.plan import SlimPlan, count_parameters, plan_pca, plan_uniform, slim_unet
from tools.training.student.distill import (
    DistillConfig,
    Distiller,
    DistillState,
    schedule_states,
)
from workers.model.networks.motion_unet import MotionUNet
from workers.model.pipelines.animation import AnimationPipeline
from workers.model.runtime.serving import SERVING_FILE

SOURCE = "models/animfleet-small-distilled"
SAMPLING = "sampling_seconds.json"  # in the targets directory
# The served guidance range is kept, so the slimmed student serves every request the wide one
# does; targets share the fields below, which must agree between the arms reading them.
TARGET_FIELDS = (
    "seed",
    "teacher",
    "teacher_steps",
    "image_guidance",
    "text_guidance",
    "serving_guidance",
    "serving_share",
    "trajectories",
    "shard_size",
    "size",
    "num_frames",
)


@dataclass
class SlimConfig(DistillConfig):
    """A distillation from the served student (``teacher``) into ``method``'s widths at
    ``share`` (for ``uniform``: the parameter count of ``pca`` at that share)."""

    teacher: str = SOURCE
    teacher_steps: int = 8
    steps: int = 1200
    # Higher than the wide student's 1e-4: a pruned start is further from its target (over the
    # first 200 steps, 5e-4 reached half of 1e-4's loss on the 70% arm).
    learning_rate: float = 5e-4
    warmup_steps: int = 50
    method: str = "pca"  # "pca" | "uniform"
    share: float = 0.7
    targets_dir: str = "run/slim/targets"


def arm_name(method: str, share: float) -> str:
    return f"{method}-{round(share * 100):d}"


def plan_for(config: SlimConfig, unet: MotionUNet) -> SlimPlan:
    """The arm's widths and kept channels, a function of the wide U-Net and the config."""
    pca = plan_pca(unet, config.share)
    if config.method == "pca":
        return pca
    if config.method == "uniform":
        return plan_uniform(unet, count_parameters(unet.config, pca.widths))
    raise ValueError(f"unknown slimming method {config.method!r} (pca or uniform)")


def slim_pipeline(teacher: AnimationPipeline, plan: SlimPlan) -> AnimationPipeline:
    """The teacher's pipeline around a slimmed copy of its U-Net (the other parts shared)."""
    return AnimationPipeline(
        unet=slim_unet(teacher.unet, plan),
        vae=teacher.vae,
        image_encoder=teacher.image_encoder,
        text_encoder=teacher.text_encoder,
        tokenizer=teacher.tokenizer,
        scheduler=teacher.scheduler,
    )


class SlimDistiller(Distiller):
    """A :class:`Distiller` whose student is a slimmed MotionUNet and whose targets are shared
    between arms."""

    desc = "slim"
    plot_labels: ClassVar[dict[str, str]] = {
        "ylabel": "MSE to the served student's sample",
        "title": "slimmed student: distillation loss",
    }

    def __init__(self, run_dir: Path, config: SlimConfig | None = None) -> None:
        # Distiller.__init__ builds its student from the teacher's own shape; this one builds
        # the slimmed shape, then the shared run (optimiser, EMA, checkpoint) as the base does.
        config = run_config(run_dir, config, SlimConfig)
        self.teacher = load_pipeline(Path(config.teacher))
        if not self.teacher.guidance_distilled:
            raise ValueError(f"{config.teacher} is not a guidance-distilled student")
        self.plan = plan_for(config, self.teacher.unet)
        student = slim_pipeline(self.teacher, self.plan)
        ema = slim_pipeline(self.teacher, self.plan)
        for module in (self.teacher.unet, self.teacher.text_encoder, ema.unet):
            module.requires_grad_(False)
        scheduler = self.teacher.scheduler
        alphas = scheduler.alphas_cumprod.double()
        own = [
            schedule_states(scheduler, n)
            for n in (config.student_steps, config.student_steps // 2 or 1)
        ]
        every = (torch.arange(len(alphas)), alphas.sqrt().float(), (1 - alphas).sqrt().float())
        self.state_pools = [*own, every]
        TrainingRun.__init__(self, run_dir, config, student, ema, DistillState(), weight_decay=0.0)

    @property
    def slim_config(self) -> SlimConfig:
        assert isinstance(self.config, SlimConfig)
        return self.config

    def _shard_path(self, shard: int) -> Path:
        return Path(self.slim_config.targets_dir) / f"{shard:05d}.pt"

    def make_targets(self) -> None:
        """Sample the teacher for the shared cache (once for every arm); refuse a cache made
        with other settings."""
        directory = Path(self.slim_config.targets_dir)
        wanted = {name: getattr(self.config, name) for name in TARGET_FIELDS}
        wanted = json.loads(json.dumps(wanted))  # tuples as JSON lists, as read back
        made = directory / "targets.json"
        if made.exists() and json.loads(made.read_text()) != wanted:
            raise ValueError(f"{directory} holds targets of other settings: {made.read_text()}")
        directory.mkdir(parents=True, exist_ok=True)
        made.write_text(json.dumps(wanted, indent=2))
        before = self.state.target_seconds
        super().make_targets()
        # The cache's sampling time, whichever arm paid it: each arm's card reports it.
        spent = self.state.target_seconds - before
        if spent:  # unrounded: a tiny test cache samples in well under a tenth of a second
            (directory / SAMPLING).write_text(json.dumps(self._sampling_seconds() + spent))

    def _sampling_seconds(self) -> float:
        record = Path(self.slim_config.targets_dir) / SAMPLING
        return float(json.loads(record.read_text())) if record.exists() else 0.0

    def _describe(self, directory: Path) -> None:
        """``serving.json`` as the wide student's (same steps, passes and guidance range) and
        ``slim.json``: widths, what PCA found per layer, and the training cost."""
        source = Path(self.slim_config.teacher) / SERVING_FILE
        (directory / SERVING_FILE).write_text(source.read_text())
        cfg = self.slim_config
        summary = {
            "method": cfg.method,
            "share": cfg.share,
            "source": cfg.teacher,
            "parameters": sum(p.numel() for p in self.exported.unet.parameters()),
            "source_parameters": sum(p.numel() for p in self.teacher.unet.parameters()),
            "widths": self.plan.widths,
            "layer_widths": self.plan.layer_widths,
            "variance_kept": self.plan.variance_kept,
            "steps": self.state.step,
            "train_seconds": round(self.state.seconds, 1),
            "target_seconds": self._sampling_seconds(),  # of the shared cache
            "config": asdict(cfg),
        }
        (directory / "slim.json").write_text(json.dumps(summary, indent=2) + "\n")


def train_arms(
    run: Path,
    shares: tuple[float, ...],
    steps: int,
    minutes: float | None = None,
    methods: tuple[str, ...] = ("pca", "uniform"),
) -> list[Path]:
    """Train every arm to ``steps`` (resuming each), exporting each to ``run/ARM/model``; with
    ``minutes``, stop after that long in all (re-running continues)."""
    import time

    started = time.monotonic()
    exported: list[Path] = []
    for share in shares:
        for method in methods:
            left = None if minutes is None else minutes - (time.monotonic() - started) / 60
            if left is not None and left <= 0:
                return exported
            arm = run / arm_name(method, share)
            config = SlimConfig(
                method=method, share=share, steps=steps, targets_dir=str(run / "targets")
            )
            distiller = SlimDistiller(arm, config)
            distiller.make_targets()
            print(f"{arm.name}: widths {distiller.plan.widths}")
            distiller.train(minutes=left)
            if distiller.state.step >= steps:
                exported.append(distiller.export(arm / "model"))
    return exported
