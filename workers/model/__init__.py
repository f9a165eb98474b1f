"""The animation model: a diffusers pipeline behind one small interface, :class:`Animator`.

``networks`` holds the trained modules (U-Net, pixel codec, edge fill, attention processor,
tokenizer); ``imaging`` what is done to a job's pixels outside them (masks, brush fields, the
fill, greyscale, the per-image template cache); ``addons`` the LoRA and control branches and
their store; ``pipelines`` how a job's frames are sampled and rendered; ``runtime`` how a
worker loads and serves a model on its device (variant, profile, compilation, caches).
"""

import sys

# Imported for their side effect: diffusers' from_pretrained resolves a component that
# model_index.json names by module path (["workers.model.networks.motion_unet", "MotionUNet"])
# only from modules already imported, so every user of this package can load those models.
from workers.model.animator import Animator, ModelError
from workers.model.networks import motion_unet, pixel_codec
from workers.model.runtime.loading import Variant

# Model directories saved before the modules moved into ``networks`` name the old paths.
sys.modules.setdefault("workers.model.motion_unet", motion_unet)
sys.modules.setdefault("workers.model.pixel_codec", pixel_codec)

__all__ = ["Animator", "ModelError", "Variant", "motion_unet", "pixel_codec"]
