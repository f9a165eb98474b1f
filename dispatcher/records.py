"""What a submit writes: the job record from a validated request, and the fingerprint that
makes two submits "the same request" for idempotency."""

from __future__ import annotations

import hashlib
import secrets
import time

from animfleet.jobs import WEBHOOK_EVENTS, JobParams, JobRecord
from dispatcher.inputs import AnimationRequest
from dispatcher.versions import WORKER_MODEL, Choice


def new_record(
    job_id: str,
    target: str,
    home: str,
    request: AnimationRequest,
    default_start_deadline_s: float | None = None,
    choice: Choice = WORKER_MODEL,
    mask: str | None = None,
) -> JobRecord:
    """The queued record of a new job held by ``target`` for users of ``home``; a request
    without a start deadline gets ``default_start_deadline_s`` (so no job waits forever);
    ``choice``: the model version picked for it; ``mask``: the hash of its mask, if any."""
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
            mask=mask,
            regions=request.regions,
            loop=request.loop,
        ),
        webhook_url=request.webhook_url,
        webhook_events=list(request.webhook_events_filter or WEBHOOK_EVENTS),
        start_deadline=now + start_within if start_within else None,
        deadline=now + request.deadline if request.deadline else None,
        metadata=request.metadata,
        tenant=request.tenant,
        priority=request.priority,
    )


def fingerprint(
    image: bytes, request: AnimationRequest, home: str, mask: bytes | None = None
) -> str:
    """What makes two submissions "the same request" for idempotency."""
    digest = hashlib.sha256(bytes(image))
    if mask is not None:  # none: the fingerprints of requests from before masks existed
        digest.update(b"mask:" + hashlib.sha256(bytes(mask)).digest())
    # Without add-ons, regions or a loop, the JSON of requests from before they existed:
    # their keys still match. A region's mask is in it by its hash.
    unused = {"addons"} if not request.addons else set()
    unused |= {"regions"} if not request.regions else set()
    unused |= {"loop"} if not request.loop else set()
    digest.update(request.model_dump_json(exclude=unused or None).encode())
    digest.update(home.encode())
    return digest.hexdigest()
