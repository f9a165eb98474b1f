"""The animation model: a diffusers pipeline behind one small interface, :class:`Animator`."""

# Imported for their side effect: diffusers' from_pretrained resolves a component that
# model_index.json names by module path (["workers.model.motion_unet", "MotionUNet"]) only
# from modules already imported, so every user of this package can load those models.
from workers.model import motion_unet, pixel_codec
from workers.model.animator import Animator, ModelError
from workers.model.loading import Variant

__all__ = ["Animator", "ModelError", "Variant", "motion_unet", "pixel_codec"]
