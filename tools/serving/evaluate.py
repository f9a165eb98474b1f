"""Motion accuracy of the served configuration against the fp32 eager model, on the held-out
clips of ``animfleet eval``: the worker's own ``Animator`` (serving profile, AOT artifact,
warm-up check) and a plain fp32 eager one animate the same first frames and prompts. With
``--photos``, both also run ``animfleet eval --photos`` (held-out real photographs at 256 and
512 px, rendered as the worker renders) at the served step count.
``python -m tools.serving.evaluate``."""

from __future__ import annotations

import argparse
import io
import os
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from PIL import Image

from animfleet.jobs import JobParams
from animfleet.shipped_models import resolve_model
from tools.training.data.scenes import heldout_sample
from tools.training.evaluation.evaluate import EvalSettings
from tools.training.evaluation.frame_metrics import to_uint8
from tools.training.evaluation.motion_estimate import classify
from tools.training.evaluation.photo_eval import PhotoEvalSettings, run_photo_eval
from tools.training.evaluation.photo_eval import summary as photo_summary
from workers.model.animator import Animator, load_animator
from workers.model.runtime.loading import Variant
from workers.model.runtime.profile import psnr
from workers.settings import WorkerSettings


def _png(frame: npt.NDArray[np.uint8]) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="PNG")
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="animfleet-small-distilled")
    parser.add_argument("--per-family", type=int, default=16)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--photos", action="store_true", help="also the held-out photographs")
    parser.add_argument("--out", type=Path, default=Path("out/served"), help="photo reports")
    args = parser.parse_args()
    model = resolve_model(args.model)
    size, frames = args.size, EvalSettings.num_frames
    os.environ.setdefault("ANIMFLEET_WORKER_SHAPE_BUCKETS", f"{frames}x{size}x{size}")
    settings = WorkerSettings.from_env({**os.environ, "ANIMFLEET_MODEL_DIR": str(model)})
    served = load_animator(settings)
    reference = Animator(
        model,
        Variant(
            name="fp32 eager",
            steps=served.variant.steps,
            image_guidance_scale=served.variant.image_guidance_scale,
            text_guidance_scale=served.variant.text_guidance_scale,
        ),
    )
    print(
        f"served: {served.info['serving']} compiled={served.info['compiled']}"
        f" ({served.info['aot']})"
    )
    correct = {"served": 0, "fp32 eager": 0}
    worst, count = float("inf"), 0
    for family in EvalSettings.families:
        for index in range(args.per_family):
            sample = heldout_sample(family, index, size, frames)
            truth = to_uint8(sample.video)
            params = JobParams(
                prompt=sample.prompt, frames=frames, fps=8, width=size, height=size, seed=index
            )
            image = _png(np.ascontiguousarray(truth[0]))
            outputs = {
                "served": served.animate(image, params),
                "fp32 eager": reference.animate(image, params),
            }
            for name, video in outputs.items():
                correct[name] += classify(torch.from_numpy(video)) is sample.motion
            worst = min(worst, psnr(outputs["served"], outputs["fp32 eager"]))
            count += 1
    for name, hits in correct.items():
        print(f"{name:<11} motion accuracy {hits / count:.1%} ({hits}/{count} held-out clips)")
    print(
        f"served vs fp32 eager: lowest PSNR over the clips {worst:.1f} dB; "
        f"AOT misses {served.recompiles}"
    )
    if args.photos:
        photos = PhotoEvalSettings(steps=served.variant.steps)
        for name, animator in (("served", served), ("fp32 eager", reference)):
            out = args.out / name.replace(" ", "-")
            print(f"\nheld-out photographs, {name} ({out / 'photos.json'}):")
            print(photo_summary(run_photo_eval(animator.pipeline, out, photos)))


if __name__ == "__main__":
    main()
