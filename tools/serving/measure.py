"""Time model configurations against each other, interleaved, each in its own process.

Every configuration is loaded (and compiled, warmed up and verified, as a worker would) in a
child process of its own, one after another; then the timed videos go round-robin over all of
them, so a burst of load from other processes on a shared machine slows every configuration
alike and the ratios between them hold. Each child runs the worker's own
:meth:`Animator.animate` on the same PNG, prompt and seed, with a fixed number of torch threads.
"""

from __future__ import annotations

import io
import multiprocessing as mp
import os
import resource
import statistics
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from workers.model.runtime.loading import ShapeBucket, Variant

PROMPT = "pan left slowly"
Frames = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Config:
    """One row: a model directory run one way."""

    label: str
    model_dir: Path
    variant: Variant
    compile: bool = False
    aot: bool = False
    device: str = "cpu"
    # Loaded as a worker loads it (settings, serving profile, boot measurement): the served
    # row. The variant then only names the step count; ``compile`` and ``aot`` are the worker's.
    worker: bool = False


@dataclass
class Result:
    config: Config
    times: list[float] = field(default_factory=list)
    frames: Frames | None = None
    load_s: float = 0.0
    warmup_s: float = 0.0
    peak_rss_mb: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return statistics.median(self.times)


def test_card(size: int) -> bytes:
    """A smooth test card as PNG: gradients and a disc, so motion and errors are visible."""
    y, x = np.mgrid[0:size, 0:size] / size
    disc = ((x - 0.6) ** 2 + (y - 0.4) ** 2 < 0.05).astype(float)
    rgb = (np.stack([x, y, 0.5 + 0.5 * disc], axis=-1) * 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return buffer.getvalue()


def _serve(conn: Connection, config: Config, bucket: ShapeBucket, threads: int) -> None:
    """In the child: load as the worker does, report, then time one video per request."""
    os.environ["ANIMFLEET_TORCH_THREADS"] = str(threads)
    from animfleet.jobs import JobParams
    from workers.model.animator import Animator

    started = time.perf_counter()
    if config.worker:
        animator = _worker_animator(config, bucket)
    else:
        animator = Animator(
            config.model_dir,
            config.variant,
            compile=config.compile,
            aot=config.aot,
            max_buckets=1,
            device=config.device,
        )
        if animator.compiled is not None:
            animator.warm_up([bucket])
    params = JobParams(
        prompt=PROMPT,
        frames=bucket.frames,
        fps=8,
        width=bucket.width,
        height=bucket.height,
        seed=0,
        steps=config.variant.steps,
    )
    image = test_card(bucket.height)
    conn.send(
        {
            "load_s": animator.load_time_s,
            "warmup_s": animator.warmup_time_s,
            "ready_s": time.perf_counter() - started,
            "info": animator.info,
        }
    )
    while conn.recv():
        started = time.perf_counter()
        frames = animator.animate(image, params)
        seconds = time.perf_counter() - started
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        conn.send({"seconds": seconds, "frames": frames, "peak_rss_mb": rss})


def _worker_animator(config: Config, bucket: ShapeBucket) -> Any:
    """The animator a worker would serve for ``config.model_dir`` on this host, warming up the
    working size of ``bucket`` (a larger request runs there and is rendered up)."""
    from workers.model.animator import load_animator
    from workers.model.pipelines.render import working_size
    from workers.settings import WorkerSettings

    height, width = working_size(bucket.height, bucket.width)
    env = {
        **os.environ,
        "ANIMFLEET_WORKER_MODEL_DIR": str(config.model_dir),
        "ANIMFLEET_WORKER_SHAPE_BUCKETS": f"{bucket.frames}x{height}x{width}",
        "ANIMFLEET_WORKER_DEVICE": config.device,
    }
    return load_animator(WorkerSettings.from_env(env))


class Runner:
    """A child process holding one loaded configuration."""

    def __init__(self, config: Config, bucket: ShapeBucket, threads: int) -> None:
        context = mp.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, config, bucket, threads))
        self.process.start()
        self.result = Result(config)
        ready = self._receive()
        self.result.load_s, self.result.warmup_s = ready["load_s"], ready["warmup_s"]
        self.result.info = ready["info"]

    def _receive(self) -> dict[str, Any]:
        while not self.conn.poll(1.0):
            if not self.process.is_alive():
                raise RuntimeError(f"{self.result.config.label}: the measuring process died")
        message: dict[str, Any] = self.conn.recv()
        return message

    def video(self, keep: bool) -> None:
        self.conn.send(True)
        message = self._receive()
        if keep:
            self.result.times.append(message["seconds"])
        self.result.frames = message["frames"]
        self.result.peak_rss_mb = message["peak_rss_mb"]

    def close(self) -> None:
        if self.process.is_alive():
            self.conn.send(False)
        self.process.join(timeout=30)


def measure(
    configs: list[Config],
    bucket: ShapeBucket,
    repeats: int = 5,
    threads: int = 1,
    progress: Any = None,
) -> list[Result]:
    """Load every configuration (one at a time), then one untimed and ``repeats`` timed videos
    each, round-robin. ``progress(text)`` is told what happens."""
    say = progress or (lambda _: None)
    runners: list[Runner] = []
    try:
        for config in configs:
            say(f"loading {config.label}")
            runners.append(Runner(config, bucket, threads))
            say(
                f"  ready: load {runners[-1].result.load_s:.1f} s, warm-up "
                f"{runners[-1].result.warmup_s:.1f} s"
            )
        for round_index in range(repeats + 1):
            for runner in runners:
                runner.video(keep=round_index > 0)
            say(f"round {round_index}/{repeats} done")
    finally:
        for runner in runners:
            runner.close()
    return [runner.result for runner in runners]
