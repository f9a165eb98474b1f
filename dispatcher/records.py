"""What a submit writes: the job record from a validated request, and the fingerprint that
makes two submits "the same request" for idempotency."""

from __future__ import annotations

import secrets
import time

from animfleet.jobs import WEBHOOK_EVENTS, JobParams, JobRecord
from dispatcher.inputs import AnimationRequest
from dispatcher.prepared import PreparedInputs
from dispatcher.version_pick import WORKER_MODEL, Choice


def new_record(
    job_id: str,
    target: str,
    home: str,
    request: AnimationRequest,
    inputs: PreparedInputs,
    default_start_deadline_s: float | None = None,
    choice: Choice = WORKER_MODEL,
) -> JobRecord:
    """The queued record of a new job held by ``target`` for users of ``home``; a request
    without a start deadline gets ``default_start_deadline_s`` (so no job waits forever);
    ``inputs``: the digests it carries; ``choice``: the model version picked for it."""
    now = time.time()
    start_within = request.start_deadline or default_start_deadline_s
    return JobRecord(
        id=job_id,
        created_at=now,
        region=target,
        home_region=home,
        params=JobParams(
            prompt=request.prompt,
            frames=request.frames,
            fps=request.fps,
            width=request.width,
            height=request.height,
            seed=request.seed if request.seed is not None else secrets.randbelow(2**32),
            steps=request.steps,
            variant=request.variant,
            model=choice.model,
            model_version=choice.version,
            addons=request.addons,
            mask=inputs.mask_sha256,
            image_sha256=inputs.image_sha256,
            regions=request.regions,
            loop=request.loop,
            negative_prompt=request.negative_prompt,
            guidance=request.guidance,
            family=choice.family.pipeline_class if choice.family else None,
            adjustments=choice.adjustments,
        ),
        webhook_url=request.webhook_url,
        webhook_events=list(request.webhook_events_filter or WEBHOOK_EVENTS),
        start_deadline=now + start_within if start_within else None,
        deadline=now + request.deadline if request.deadline else None,
        metadata=request.metadata,
        tenant=request.tenant,
        priority=request.priority,
    )


def fingerprint(inputs: PreparedInputs, request: AnimationRequest, home: str) -> str:
    """What makes two submissions "the same request" for idempotency: the sha256 of the
    image's bytes, then the mask's digest, the request and the home region (the image's
    digest so far is the one the record holds: the bytes are read once)."""
    digest = inputs.image_hash.copy()
    if inputs.mask_sha256 is not None:  # none: as requests from before masks existed
        digest.update(b"mask:" + bytes.fromhex(inputs.mask_sha256))
    # Without add-ons, regions or a loop, the JSON of requests from before they existed:
    # their keys still match. A region's mask is in it by its hash.
    unused = {"addons"} if not request.addons else set()
    unused |= {"regions"} if not request.regions else set()
    unused |= {"loop"} if not request.loop else set()
    unused |= {name for name in ("negative_prompt", "guidance") if getattr(request, name) is None}
    digest.update(request.model_dump_json(exclude=unused or None).encode())
    digest.update(home.encode())
    return digest.hexdigest()
