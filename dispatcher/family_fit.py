"""A job fitted to the family of the model version picked for it (:mod:`animfleet.families`):
frames and sides its rules adjust (listed on the record, asked vs delivered), or a refusal
naming the field, the model and the rule."""

from __future__ import annotations

from dataclasses import replace

from animfleet.families import JobAsk, Refused, fit_job
from dispatcher.inputs import AnimationRequest, InvalidInput
from dispatcher.version_pick import Choice


def fit_to_family(
    request: AnimationRequest, choice: Choice, size_given: bool
) -> tuple[AnimationRequest, Choice]:
    """``request`` as ``choice``'s family runs it, and ``choice`` with what changed; both as
    given for the built-in model. ``size_given``: the caller set a side (else the size is the
    image's default). Raises :class:`InvalidInput` for what the family cannot do."""
    spec = choice.family
    if spec is None:
        return request, choice
    ask = JobAsk(
        frames=request.frames,
        width=request.width,
        height=request.height,
        loop=request.loop,
        regions=bool(request.regions),
        negative_prompt=request.negative_prompt is not None,
        size_given=size_given,
    )
    try:
        fitted = fit_job(spec, choice.version or str(choice.model), ask)
    except Refused as refused:
        raise InvalidInput(refused.field, str(refused)) from None
    update = {"frames": fitted.frames, "width": fitted.width, "height": fitted.height}
    return request.model_copy(update=update), replace(choice, adjustments=fitted.adjustments)
