"""The samplers a variant can choose, all built from the model's own noise-schedule config.

``dpmsolver++`` is the default: DPM-Solver++ of order 2 on steps linear in log-SNR
(``use_lu_lambdas``), a first-order final step (second-order steps near t=0 are unstable at few
steps) and a zero final sigma, so the last step lands on the clean sample. ``ddim`` and
``euler`` are there for comparison. Sigmas and timesteps stay fp32 whatever the model's dtype:
the pipeline keeps latents in fp32 and casts only the U-Net input.
"""

from __future__ import annotations

from typing import Any

from diffusers import DDIMScheduler, DPMSolverMultistepScheduler, EulerDiscreteScheduler

SCHEDULERS = ("dpmsolver++", "ddim", "euler")

# Keys of a DPM-Solver config that the other schedulers do not take; from_config ignores
# unknown keys, but it warns about them, and the worker's warnings are errors in tests.
_NOISE_SCHEDULE_KEYS = (
    "num_train_timesteps",
    "beta_start",
    "beta_end",
    "beta_schedule",
    "trained_betas",
    "prediction_type",
    "timestep_spacing",
    "steps_offset",
)


def make_scheduler(name: str, config: Any) -> Any:
    """A fresh scheduler called ``name`` on the noise schedule in ``config``.

    Raises ValueError for a name not in :data:`SCHEDULERS`.
    """
    schedule = {key: config[key] for key in _NOISE_SCHEDULE_KEYS if key in config}
    if name == "dpmsolver++":
        return DPMSolverMultistepScheduler(
            **schedule,
            algorithm_type="dpmsolver++",
            solver_order=2,
            use_lu_lambdas=True,
            lower_order_final=True,
            final_sigmas_type="zero",
        )
    if name == "ddim":
        return DDIMScheduler(**schedule, set_alpha_to_one=True, clip_sample=False)
    if name == "euler":
        return EulerDiscreteScheduler(**schedule, final_sigmas_type="zero")
    raise ValueError(f"`scheduler` must be one of {', '.join(SCHEDULERS)}, got {name!r}")
