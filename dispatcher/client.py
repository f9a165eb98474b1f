"""The Python client web backends use: submit a job, read its record, wait for it."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
import structlog

from animfleet.errors import AnimfleetError, TransientError
from animfleet.jobs import (
    JobRecord,
    new_job_id,
)
from animfleet.netguard import BlockedURL, NetGuard
from animfleet.region.admission import AdmissionOutcome
from animfleet.region.erasure import Erasure
from animfleet.region.jobstore import JobStore
from animfleet.region.listing import Listing
from animfleet.region.tenants import Tenants
from animfleet.topology import Topology
from animfleet_api.bounds import MAX_IDEMPOTENCY_KEY_CHARS as MAX_KEY_CHARS
from dispatcher import batch, metrics, records
from dispatcher.addon_input import AddonChecker, take_images
from dispatcher.admission import (
    AdmissionSettings,
    AtCapacity,
    BacklogFull,
    Placement,
    RoutingCache,
    admission_settings_from_env,
)
from dispatcher.admission.enqueue import OutcomeUnknown
from dispatcher.brush_input import check_region_masks, take_region_masks
from dispatcher.errors import DispatcherError
from dispatcher.family_fit import fit_to_family
from dispatcher.inputs import (
    AnimationRequest,
    InvalidInput,
    default_size,
    parse_request,
)
from dispatcher.lookup import STORED_CLIENT_JOB_ID, JobLookup, RegionLink
from dispatcher.mask_input import check_mask, check_mask_addons
from dispatcher.prepared import ImageChecks, PreparedInputs
from dispatcher.version_pick import WORKER_MODEL, Choice, VersionChooser

log = structlog.stdlib.get_logger("animfleet.dispatcher")


class EnqueueFailed(DispatcherError, TransientError, RuntimeError):
    """The job could not be put on a queue; its record says ``failed`` (code ``enqueue_failed``).

    ``maybe_admitted``: the region's store could not say whether the admission ran (the call
    and the read of its outcome both failed): the job may exist, so its keys stay bound.
    """

    def __init__(self, message: str, maybe_admitted: bool = False) -> None:
        super().__init__(message)
        self.maybe_admitted = maybe_admitted


@dataclass(frozen=True)
class JobHandle:
    """What :meth:`Client.submit` returns: the job's id, where it runs, and shortcuts."""

    id: str
    region: str
    client: Client
    created: bool = True  # False: an idempotent repeat returned the job created earlier
    # The record as admitted (a new job's; None for a repeat): no need to read it back.
    record: JobRecord | None = field(default=None, compare=False, repr=False)

    def get(self) -> JobRecord:
        return self.client.get(self.id)

    def wait(self, timeout: float = 300.0) -> JobRecord:
        return self.client.wait(self.id, timeout)


class _Repeat(Exception):
    """An idempotency key or client-chosen id named a job created before."""

    def __init__(self, handle: JobHandle) -> None:
        super().__init__(handle.id)
        self.handle = handle


class Client(JobLookup):
    """Submits animation jobs to the fleet described by ``topology``.

    >>> client = Client(Topology.load())
    >>> job = client.submit(png_bytes, "pan left slowly", home_region="us-east")
    >>> record = job.wait(timeout=60)
    >>> record.status, record.output.key
    """

    def __init__(
        self,
        topology: Topology | None = None,
        netguard: NetGuard | None = None,
        admission: AdmissionSettings | None = None,
        routing_region: str | None = None,
    ) -> None:
        """``routing_region``: the region whose Redis this dispatcher reads routing tables from
        (its own; default the first of the topology). Tables refresh in the background."""
        self.topology = topology or Topology.load()
        self.netguard = netguard or NetGuard.from_env()
        self.admission = admission or admission_settings_from_env()
        self._links: dict[str, RegionLink] = {}
        source = routing_region or self.topology.names[0]
        self.routing = RoutingCache(self._link(source).store.redis, self.topology.names)
        self.routing.start()
        self.placement = Placement(
            self.topology.names,
            self.routing,
            self.admission,
            siblings={name: self.topology.siblings(name) for name in self.topology.names},
        )
        self.versions = VersionChooser(lambda region: self._link(region).store.redis)
        self.addons = AddonChecker(lambda region: self._link(region).store.redis)
        self.images = ImageChecks()

    def close(self) -> None:
        """Stop the background refresh of routing tables; close the broker connections."""
        self.routing.stop()
        for link in self._links.values():
            link.queue.close()

    def submit(
        self,
        image: bytes,
        prompt: str,
        *,
        home_region: str | None = None,
        webhook_url: str | None = None,
        idempotency_key: str | None = None,
        job_id: str | None = None,
        backlog_cap: int | None = None,
        mask: bytes | None = None,
        uploads: Sequence[str] = (),
        **options: Any,
    ) -> JobHandle:
        """Validate, record and enqueue one job; returns at once with its handle.

        ``options`` are the optional fields of :class:`dispatcher.inputs.AnimationRequest`
        (frames, fps, width, height, seed, steps, variant, model, addons, webhook_events_filter,
        start_deadline and deadline in seconds from now, metadata, tenant, priority).
        ``addons``: each ``{"name", "scale"}``, and for an image-conditioned add-on its control
        ``image`` (bytes), stored with the job's image.
        ``home_region``: a region name (default the topology's first); for a region split into
        cells, the job's home is the tenant's cell (:meth:`animfleet.topology.Topology.cell_for`),
        so a tenant's backlog and fair share stay in one cell; a cell's name is that cell.
        ``model``: a deployment of the home region or a pinned ``name@version``; the version
        picked is on the record (``params.model_version``), sticky by ``idempotency_key``.
        A job no region can start now waits in its home region's backlog (status ``queued``);
        :class:`dispatcher.admission.regions.BacklogFull` when a backlog cap is reached.
        ``idempotency_key``: the same key with the same request returns the job created first
        (``handle.created`` is False); with a different request it raises
        :class:`animfleet.region.jobstore.IdempotencyConflict`. ``job_id``: a client-chosen id
        (letters, digits, ``_``, ``-``; at most 64), idempotent in the same way.
        ``backlog_cap``: the tenant's own cap on its jobs waiting in a backlog, when tighter
        than the region's. ``mask``: a PNG of the image's size or aspect ratio, white where the
        image animates (elsewhere every frame is the image); stored with the image.
        ``uploads``: the upload keys the request named, recorded with the new job at its home
        in the call that creates it (so deleting the job deletes them).
        ``regions``: up to 8 motion-brush regions (:mod:`animfleet.brush`), each a mapping with
        its ``mask`` (PNG bytes, like ``mask``), ``kind``, ``stroke``, ``speed``, ``amplitude``;
        ``loop``: a seamless loop. The masks are stored with the image, hashed on the record.
        Raises :class:`dispatcher.inputs.InvalidInput` (naming the field) before anything is
        stored or published, and :class:`EnqueueFailed` if the broker cannot take the job.
        """
        addons, controls = take_images(options.pop("addons", ()))
        regions, region_masks = take_region_masks(options.pop("regions", ()))
        checked = self.images.check(image)  # the one digest, and at most one decode
        image_width, image_height = checked.width, checked.height
        given = options.get("width"), options.get("height")
        if all(side is None or type(side) is int for side in given):  # else validation says why
            options["width"], options["height"] = default_size(image_width, image_height, *given)
        request = parse_request(
            prompt=prompt, webhook_url=webhook_url, addons=addons, regions=regions, **options
        )
        if request.regions and mask is not None:
            raise InvalidInput(
                "regions", "cannot be combined with mask: each region's own mask says what moves"
            )
        check_region_masks(region_masks, (image_width, image_height), request.width, request.height)
        masked = (
            None
            if mask is None
            else check_mask(mask, (image_width, image_height), request.width, request.height)
        )
        if mask is not None:
            check_mask_addons(request.addons, controls)
        if request.webhook_url is not None:
            try:
                self.netguard.check_url(request.webhook_url)
            except BlockedURL as error:
                raise InvalidInput("webhook", str(error)) from None
        if job_id is not None and not STORED_CLIENT_JOB_ID.match(job_id):
            raise InvalidInput(
                "id", f"must be 1-64 letters, digits, '_' or '-' (got {job_id[:80]!r})"
            )
        if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_KEY_CHARS:
            raise InvalidInput("Idempotency-Key", f"must be 1-{MAX_KEY_CHARS} characters")
        region = home_region or self.topology.groups[0]
        home = self.topology.cell_for(region, request.tenant)
        # Hashed and decoded once (above), packed once: the mask, add-ons' control images and
        # brushed regions' masks ride with the image in the one value stored.
        inputs = PreparedInputs.of(
            image,
            checked,
            mask,
            masked.sha256 if masked else None,
            {**controls, **region_masks},
        )
        fingerprint = records.fingerprint(inputs, request, home)
        moved = self._bound_before(region, request, inputs, job_id, idempotency_key)
        if moved is not None:
            return moved
        sticky = idempotency_key or job_id or secrets.token_hex(8)
        choice = self.versions.choose(home, request.model, sticky)
        request, choice = fit_to_family(request, choice, size_given=given != (None, None))
        self.addons.check(home, request.addons)
        outcome: list[JobHandle] = []
        waiting: list[str] = []  # this job's entry in its home's waiting set, once it waits

        def admit(target: str, backlog: bool = False) -> JobHandle | None:
            return self._admit(
                target,
                home,
                request,
                inputs,
                job_id,
                idempotency_key,
                fingerprint,
                backlog,
                backlog_cap,
                choice,
                uploads,
            )

        def try_admit(target: str) -> bool:
            if not self.versions.serves(target, choice.version):
                return False  # that region's registry lacks the version: not a place for it
            if not self.addons.serves(target, request.addons):
                return False  # nor is a region whose workers lack a requested add-on
            handle = admit(target)
            if handle is not None:
                outcome.append(handle)
            return handle is not None

        def on_full() -> None:
            # A job waiting for room is demand the router must see to spill traffic. The entry
            # expires by itself should this dispatcher die while the job waits. (A backlog job
            # counts in its home's holding set instead.)
            if self.admission.backlog:
                return
            metrics.ADMISSION_WAITS.labels(home).inc()
            if not waiting:
                waiting.append(secrets.token_hex(8))
                lapse = time.time() + self.admission.retry_budget_s + 30
                self._link(home).store.hold_waiting(home, waiting[0], lapse)

        try:
            if self.placement.place(home, try_admit, on_full) is None:
                backlog = admit(home, backlog=True)
                assert backlog is not None  # FULL is never the answer of a backlog admission
                return backlog
        except _Repeat as repeat:
            return repeat.handle
        except (AtCapacity, BacklogFull):
            metrics.REJECTED.labels(home).inc()
            raise
        finally:
            if waiting:
                self._link(home).store.release_waiting(home, waiting[0])
        return outcome[0]

    def submit_many(
        self, items: Sequence[Mapping[str, Any]], home_region: str | None = None
    ) -> list[JobHandle | AnimfleetError]:
        """Submit up to 500 jobs, each a dict of :meth:`submit`'s arguments (``image`` and
        ``prompt`` included); per item its handle or its own error (see
        :func:`dispatcher.batch.submit_many`)."""
        return batch.submit_many(self, items, home_region)

    def _bound_before(
        self,
        region: str,
        request: AnimationRequest,
        inputs: PreparedInputs,
        job_id: str | None,
        idempotency_key: str | None,
    ) -> JobHandle | None:
        """The job a key of this submit named in the tenant's cell before a cell was added
        (:meth:`animfleet.topology.Topology.earlier_cells_for`): a retry after resharding
        answers it, as in the cell itself. Raises
        :class:`animfleet.region.jobstore.IdempotencyConflict` for a different request."""
        keys = [f"id:{job_id}"] if job_id else []
        keys += [f"key:{idempotency_key}"] if idempotency_key else []
        if not keys:
            return None
        for cell in self.topology.earlier_cells_for(region, request.tenant):
            # Bound there with that cell as the job's home, so fingerprinted with it.
            fingerprint = records.fingerprint(inputs, request, cell)
            for key in keys:
                found = self._link(cell).store.idempotent_job(key, fingerprint)
                if found is not None:
                    return JobHandle(found[0], found[1], self, created=False)
        return None

    def _admit(
        self,
        target: str,
        home: str,
        request: AnimationRequest,
        inputs: PreparedInputs,
        job_id: str | None,
        idempotency_key: str | None,
        fingerprint: str,
        backlog: bool = False,
        cap: int | None = None,
        choice: Choice = WORKER_MODEL,
        uploads: Sequence[str] = (),
    ) -> JobHandle | None:
        """Bind the idempotency keys, then try to take the job into ``target`` atomically
        (with ``backlog``, into its backlog when no GPU is free).

        Returns ``None`` (keys released) when ``target`` is full; raises :class:`_Repeat`
        when a key names a job created before, :class:`BacklogFull` when a cap is reached.
        A new job is listed under its tenant in its home region (by the admission script
        itself at home), with the ``uploads`` its request named.
        """
        new_id = job_id or new_job_id(target)
        keys = [f"id:{job_id}"] if job_id else []
        keys += [f"key:{idempotency_key}"] if idempotency_key else []
        home_store = self._link(home).store
        # At home the keys are bound, the job listed and its uploads recorded by the admission
        # script itself: one round trip. A job spilled abroad binds them in its home region
        # first (uploads too, so no crash can leave them unnamed), and is listed there once
        # admitted (those keys live there).
        bind_in_script = target == home
        claimed: list[str] = []
        if not bind_in_script:
            for key in keys:
                earlier = home_store.claim_idempotency_key(key, new_id, target, fingerprint)
                if earlier is not None:
                    for done in claimed:
                        home_store.release_idempotency_key(done)
                    raise _Repeat(JobHandle(earlier[0], earlier[1], self, created=False))
                claimed.append(key)
            Erasure(home_store.redis).note_uploads(new_id, uploads)
        try:
            record = records.new_record(
                new_id,
                target,
                home,
                request,
                inputs,
                self.admission.default_start_deadline_s,
                choice,
            )
            slots = [JobStore.idempotency_slot(key) for key in keys] if bind_in_script else []
            entry = JobStore.idempotency_entry(new_id, target, fingerprint)
            try:
                answer = self._link(target).queue.admit(
                    record,
                    inputs.packed,
                    slots,
                    entry,
                    backlog=backlog,
                    tenant_cap=cap,
                    index=bind_in_script,
                    uploads=uploads if bind_in_script else (),
                )
            except redis.RedisError as error:
                raise EnqueueFailed(
                    f"region {target}: could not enqueue job {new_id}: {error}",
                    maybe_admitted=isinstance(error, OutcomeUnknown),
                ) from error
            if answer.outcome is AdmissionOutcome.REPEAT and answer.earlier is not None:
                key = keys[answer.matched - 1]
                job, region = JobStore.earlier_job(key, answer.earlier, fingerprint)
                raise _Repeat(JobHandle(job, region, self, created=False))
            if answer.outcome is AdmissionOutcome.EXISTS:
                raise EnqueueFailed(f"region {target}: job id {new_id} exists already")
            if answer.outcome is AdmissionOutcome.CAPPED:
                raise self._backlog_full(target, answer.cap, answer.live_workers)
        except BaseException as error:
            # Nothing was queued: the caller may retry with the same key. Unless the outcome
            # is unknown: a key released for a job that was admitted lets a retry make another.
            if not (isinstance(error, EnqueueFailed) and error.maybe_admitted):
                for key in claimed:
                    home_store.release_idempotency_key(key)
            raise
        if answer.outcome not in (AdmissionOutcome.ADMITTED, AdmissionOutcome.BACKLOGGED):
            for key in claimed:
                home_store.release_idempotency_key(key)
            log.debug("job.region_full", region=target, live=answer.live_workers, held=answer.held)
            return None
        if not bind_in_script:  # at home, the admission script listed it
            Listing(home_store.redis).add(record.tenant, record.id, record.created_at)
            Tenants(home_store.redis).track(record.tenant, record.id, record.created_at)
        waited = answer.outcome is AdmissionOutcome.BACKLOGGED
        log.info("job.submitted", job_id=new_id, region=target, home_region=home, backlog=waited)
        metrics.admitted(home, target, backlog=waited, version=choice.version)
        return JobHandle(id=new_id, region=target, client=self, record=record)

    def _backlog_full(self, region: str, cap: str, live: int) -> BacklogFull:
        """Retry-After: the time the region's GPUs take to free 1 % of the cap (1-300 s)."""
        limit = self.admission.backlog_tenant_cap if cap == "tenant" else None
        limit = self.admission.backlog_region_cap if cap == "region" else limit
        mean = self._link(region).store.mean_run_time(region) or 5.0
        seconds = mean * max(1.0, 0.01 * (limit or 0)) / max(live, 1)
        return BacklogFull(region, cap, limit, float(min(300, max(1, math.ceil(seconds)))))
