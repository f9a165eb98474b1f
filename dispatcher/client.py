"""The Python client web backends use: submit a job, read its record, wait for it."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from animfleet.errors import TransientError
from animfleet.jobs import (
    WEBHOOK_EVENTS,
    IllegalTransition,
    JobParams,
    JobRecord,
    JobState,
    new_job_id,
    region_of,
)
from animfleet.jobview import estimate_start
from animfleet.netguard import BlockedURL, NetGuard
from animfleet.region.jobstore import (
    ADMITTED,
    EXISTS,
    REPEAT,
    JobNotFound,
    JobStore,
    expire_if_overdue,
)
from animfleet.region.outbox import WebhookDelivery, replay_last
from animfleet.region.status import RegionStatus, read_region_status
from animfleet.topology import Region, Topology
from dispatcher import metrics
from dispatcher.admission import AdmissionSettings, AtCapacity
from dispatcher.enqueue import RegionQueue
from dispatcher.errors import DispatcherError
from dispatcher.inputs import AnimationRequest, InvalidInput, check_image, parse_request
from dispatcher.placement import Placement, RoutingCache, admission_settings_from_env

# Client-chosen ids never contain a dot, so they cannot collide with ``<region>.<token>`` ids.
CLIENT_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_KEY_CHARS = 255  # Idempotency-Key

log = structlog.stdlib.get_logger("animfleet.dispatcher")


class EnqueueFailed(DispatcherError, TransientError, RuntimeError):
    """The job could not be put on a queue; its record says ``failed`` (code ``enqueue_failed``)."""


class WaitTimeout(DispatcherError, TransientError, TimeoutError):
    """The job was not terminal within the time given to :meth:`Client.wait`."""


@dataclass(frozen=True)
class JobHandle:
    """What :meth:`Client.submit` returns: the job's id, where it runs, and shortcuts."""

    id: str
    region: str
    client: Client
    created: bool = True  # False: an idempotent repeat returned the job created earlier

    def get(self) -> JobRecord:
        return self.client.get(self.id)

    def wait(self, timeout: float = 300.0) -> JobRecord:
        return self.client.wait(self.id, timeout)


class _RegionLink:
    """A dispatcher's connections to one region: its job store and its atomic enqueue."""

    def __init__(self, region: Region, allowance: float) -> None:
        self.region = region
        # A caller waits on this: a short retry rides out a blip, then the caller hears of it.
        self.store = JobStore.from_url(region.broker_url, retry_s=2.0)
        self.queue = RegionQueue(region, self.store, allowance)


class _Repeat(Exception):
    """An idempotency key or client-chosen id named a job created before."""

    def __init__(self, handle: JobHandle) -> None:
        super().__init__(handle.id)
        self.handle = handle


class Client:
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
        self._links: dict[str, _RegionLink] = {}
        source = routing_region or self.topology.names[0]
        self.routing = RoutingCache(self._link(source).store.redis, self.topology.names)
        self.routing.start()
        self.placement = Placement(self.topology.names, self.routing, self.admission)

    def _link(self, region: str) -> _RegionLink:
        if region not in self._links:
            link = _RegionLink(self.topology.region(region), self.admission.allowance)
            self._links[region] = link
        return self._links[region]

    def close(self) -> None:
        """Stop the background refresh of routing tables."""
        self.routing.stop()

    def submit(
        self,
        image: bytes,
        prompt: str,
        *,
        home_region: str | None = None,
        webhook_url: str | None = None,
        idempotency_key: str | None = None,
        job_id: str | None = None,
        **options: Any,
    ) -> JobHandle:
        """Validate, record and enqueue one job; returns at once with its handle.

        ``options`` are the optional fields of :class:`dispatcher.inputs.AnimationRequest`
        (frames, fps, width, height, seed, steps, variant, webhook_events_filter,
        start_deadline and deadline in seconds from now, metadata).
        ``idempotency_key``: the same key with the same request returns the job created first
        (``handle.created`` is False); with a different request it raises
        :class:`animfleet.region.jobstore.IdempotencyConflict`. ``job_id``: a client-chosen id
        (letters, digits, ``_``, ``-``; at most 64), idempotent in the same way.
        Raises :class:`dispatcher.inputs.InvalidInput` (naming the field) before anything is
        stored or published, and :class:`EnqueueFailed` if the broker cannot take the job.
        """
        request = parse_request(prompt=prompt, webhook_url=webhook_url, **options)
        check_image(image)
        if request.webhook_url is not None:
            try:
                self.netguard.check_url(request.webhook_url)
            except BlockedURL as error:
                raise InvalidInput("webhook", str(error)) from None
        if job_id is not None and not CLIENT_JOB_ID.match(job_id):
            raise InvalidInput(
                "id", f"must be 1-64 letters, digits, '_' or '-' (got {job_id[:80]!r})"
            )
        if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_KEY_CHARS:
            raise InvalidInput("Idempotency-Key", f"must be 1-{MAX_KEY_CHARS} characters")
        home = home_region or self.topology.names[0]
        self.topology.region(home)
        fingerprint = _fingerprint(image, request, home)
        outcome: list[JobHandle] = []
        waiting: list[str] = []  # this job's entry in its home's waiting set, once it waits

        def try_admit(target: str) -> bool:
            handle = self._admit(target, home, request, image, job_id, idempotency_key, fingerprint)
            if handle is not None:
                outcome.append(handle)
            return handle is not None

        def on_full() -> None:
            # A job waiting for room is demand the router must see to spill traffic. The entry
            # expires by itself should this dispatcher die while the job waits.
            metrics.ADMISSION_WAITS.labels(home).inc()
            if not waiting:
                waiting.append(secrets.token_hex(8))
                lapse = time.time() + self.admission.retry_budget_s + 30
                self._link(home).store.hold_waiting(home, waiting[0], lapse)

        try:
            self.placement.place(home, try_admit, on_full)
        except _Repeat as repeat:
            return repeat.handle
        except AtCapacity:
            metrics.REJECTED.labels(home).inc()
            raise
        finally:
            if waiting:
                self._link(home).store.release_waiting(home, waiting[0])
        return outcome[0]

    def _admit(
        self,
        target: str,
        home: str,
        request: AnimationRequest,
        image: bytes,
        job_id: str | None,
        idempotency_key: str | None,
        fingerprint: str,
    ) -> JobHandle | None:
        """Bind the idempotency keys, then try to take the job into ``target`` atomically.

        Returns ``None`` (keys released) when ``target`` is full; raises :class:`_Repeat`
        when a key names a job created before.
        """
        new_id = job_id or new_job_id(target)
        keys = [f"id:{job_id}"] if job_id else []
        keys += [f"key:{idempotency_key}"] if idempotency_key else []
        home_store = self._link(home).store
        # At home the keys are bound by the admission script itself: one round trip. A job
        # spilled abroad binds them in its home region first (the keys live there).
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
        try:
            record = self._record(new_id, target, home, request)
            slots = [JobStore.idempotency_slot(key) for key in keys] if bind_in_script else []
            entry = JobStore.idempotency_entry(new_id, target, fingerprint)
            try:
                answer = self._link(target).queue.admit(record, bytes(image), slots, entry)
            except redis.RedisError as error:
                raise EnqueueFailed(
                    f"region {target}: could not enqueue job {new_id}: {error}"
                ) from error
            if answer.outcome == REPEAT and answer.earlier is not None:
                key = keys[answer.matched - 1]
                job, region = JobStore.earlier_job(key, answer.earlier, fingerprint)
                raise _Repeat(JobHandle(job, region, self, created=False))
            if answer.outcome == EXISTS:
                raise EnqueueFailed(f"region {target}: job id {new_id} exists already")
        except BaseException:
            for key in claimed:  # nothing was queued: the caller may retry with the same key
                home_store.release_idempotency_key(key)
            raise
        if answer.outcome != ADMITTED:
            for key in claimed:
                home_store.release_idempotency_key(key)
            log.debug("job.region_full", region=target, live=answer.live_workers, held=answer.held)
            return None
        log.info("job.submitted", job_id=new_id, region=target, home_region=home)
        metrics.admitted(home, target)
        return JobHandle(id=new_id, region=target, client=self)

    @staticmethod
    def _record(job_id: str, target: str, home: str, request: AnimationRequest) -> JobRecord:
        now = time.time()
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
            ),
            webhook_url=request.webhook_url,
            webhook_events=list(request.webhook_events_filter or WEBHOOK_EVENTS),
            start_deadline=now + request.start_deadline if request.start_deadline else None,
            deadline=now + request.deadline if request.deadline else None,
            metadata=request.metadata,
        )

    def locate(self, job_id: str) -> str:
        """The region holding ``job_id``'s record; raises :class:`JobNotFound`."""
        if "." in job_id:
            try:
                region = region_of(job_id)
            except ValueError:
                raise JobNotFound(job_id) from None
            if region not in self.topology.regions:
                raise JobNotFound(job_id)
            return region
        if not CLIENT_JOB_ID.match(job_id):
            raise JobNotFound(job_id)
        for region in self.topology.names:  # a client-chosen id: its home region knows
            found = self._link(region).store.idempotent_job(f"id:{job_id}")
            if found is not None:
                return found[1]
        raise JobNotFound(job_id)

    def store(self, region: str) -> JobStore:
        """The job store of ``region`` (records, queue positions, recent run times)."""
        return self._link(region).store

    def get(self, job_id: str) -> JobRecord:
        """The current record of ``job_id``; raises :class:`animfleet.region.jobstore.JobNotFound`.

        A queued job found past its start deadline is expired on the spot, so readers never
        see it queued even if no maintenance process ran yet.
        """
        store = self._link(self.locate(job_id)).store
        record = store.get(job_id)
        now = time.time()
        if record.start_overdue(now):
            try:
                record = store.update(job_id, lambda current: expire_if_overdue(current, now))
            except IllegalTransition:
                record = store.get(job_id)
        return record

    def cancel(self, job_id: str) -> JobRecord:
        """Cancel ``job_id``: a queued job never starts, a running one stops at its next step.

        Returns the resulting record; a job that is terminal already is returned unchanged.
        """
        store = self._link(self.locate(job_id)).store

        def change(record: JobRecord) -> None:
            if not record.status.terminal:
                record.end(JobState.CANCELED, "canceled", "canceled by request")

        record = store.update(job_id, change)
        log.info("job.cancel", job_id=job_id, status=record.status.value)
        return record

    def queue_estimate(self, record: JobRecord) -> tuple[int | None, float | None]:
        """(queue position, estimated start) of a queued job; ``(None, None)`` otherwise."""
        store = self._link(record.region).store
        position = store.queue_position(record)
        if position is None:
            return None, None
        live = self.region_status(record.region).load.live_workers
        mean = store.mean_run_time(record.region)
        return position, estimate_start(position, mean, live, time.time())

    def region_status(self, region: str) -> RegionStatus:
        """Live and busy GPUs, queue depth and the oldest wait of ``region``, read now."""
        link = self._link(region)
        return read_region_status(link.store.redis, link.region)

    def regions(self) -> dict[str, RegionStatus]:
        """:meth:`region_status` of every region of the topology."""
        return {name: self.region_status(name) for name in self.topology.names}

    def replay_webhook(self, job_id: str) -> WebhookDelivery | None:
        """Send ``job_id``'s most recent webhook event again, now, with the same ``webhook-id``;
        ``None`` if the job never produced one. Raises :class:`JobNotFound`."""
        region = self.locate(job_id)
        self.get(job_id)
        return replay_last(self._link(region).store.redis, job_id)

    def wait(self, job_id: str, timeout: float = 300.0) -> JobRecord:
        """Block until ``job_id`` is terminal; raises :class:`WaitTimeout` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            record = self.get(job_id)
            if record.status.terminal:
                return record
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"job {job_id} still {record.status.value} after {timeout}s")
            time.sleep(min(pause, remaining))
            pause = min(pause * 1.5, 0.5)


def _fingerprint(image: bytes, request: AnimationRequest, home: str) -> str:
    """What makes two submissions "the same request" for idempotency."""
    digest = hashlib.sha256(bytes(image))
    digest.update(request.model_dump_json().encode())
    digest.update(home.encode())
    return digest.hexdigest()
