"""Finding and following a job after submit: the region holding it (client-chosen ids, moves
to other regions, records archived to the bucket), its record, cancel, wait, its place in the
queue, the regions' status and webhook replay. :class:`dispatcher.client.Client` is one."""

from __future__ import annotations

import re
import time

import structlog

from animfleet.errors import TransientError
from animfleet.jobs import IllegalTransition, JobRecord, JobState, region_of
from animfleet.region.admission import BacklogCaps
from animfleet.region.archive import RecordArchive
from animfleet.region.backlog import Backlog
from animfleet.region.eta import queue_eta
from animfleet.region.jobstore import JobNotFound, JobStore, expire_if_overdue
from animfleet.region.outbox import WebhookDelivery, replay_last
from animfleet.region.status import RegionStatus, combine_status, read_region_status
from animfleet.topology import Region, Topology
from dispatcher.admission import AdmissionSettings, RegionQueue
from dispatcher.errors import DispatcherError

# Client-chosen ids never contain a dot, so they cannot collide with ``<region>.<token>`` ids.
CLIENT_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# As stored: alone, or scoped to the tenant that chose it (:func:`animfleet.jobs.scoped_job_id`).
STORED_CLIENT_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}(?:~[0-9a-f]{20})?$")

log = structlog.stdlib.get_logger("animfleet.dispatcher")


class WaitTimeout(DispatcherError, TransientError, TimeoutError):
    """The job was not terminal within the time given to :meth:`Client.wait`."""


class RegionLink:
    """A dispatcher's connections to one region: its job store and its atomic enqueue."""

    def __init__(self, region: Region, admission: AdmissionSettings) -> None:
        self.region = region
        # A caller waits on this: a short retry rides out a blip, then the caller hears of it.
        self.store = JobStore.from_url(region.store, retry_s=2.0)
        caps = BacklogCaps(admission.backlog_tenant_cap, admission.backlog_region_cap)
        self.queue = RegionQueue(
            region, self.store, admission.allowance, caps, affinity=admission.affinity
        )


class _Moved(Exception):
    """The record was moved to another region between reading and changing it."""

    def __init__(self, region: str) -> None:
        super().__init__(region)
        self.region = region


class JobLookup:
    """Reads and follows jobs across the regions of ``topology``, one connection per region."""

    topology: Topology
    admission: AdmissionSettings
    _links: dict[str, RegionLink]

    def _link(self, region: str) -> RegionLink:
        if region not in self._links:
            link = RegionLink(self.topology.region(region), self.admission)
            self._links[region] = link
        return self._links[region]

    def store(self, region: str) -> JobStore:
        """The job store of ``region`` (records, queue positions, recent run times)."""
        return self._link(region).store

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
        if not STORED_CLIENT_JOB_ID.match(job_id):
            raise JobNotFound(job_id)
        for region in self.topology.names:  # a client-chosen id: its home region knows
            found = self._link(region).store.idempotent_job(f"id:{job_id}")
            if found is not None:
                return found[1]
        raise JobNotFound(job_id)

    def _current(self, job_id: str) -> tuple[JobStore, JobRecord]:
        """The store holding ``job_id`` now and its record there. A job the scheduler moved
        from its home backlog to another region leaves a pointer (its ``region``) behind."""
        region = self.locate(job_id)
        store = self._link(region).store
        record = store.get(job_id)
        if record.region != region and record.region in self.topology.regions:
            store = self._link(record.region).store
            record = store.get(job_id)
        return store, record

    def _archived(self, job_id: str) -> JobRecord | None:
        """A finished record the sweeper moved from Redis to its region's bucket, if any."""
        try:
            from storage import open_store  # the web extra: a base install reads Redis only
        except ImportError:
            return None
        region = self.locate(job_id)
        for _ in range(2):  # the home region's copy may point at the region that ran it
            storage = self.topology.region(region).storage
            record = RecordArchive(open_store(storage), storage.prefix).get(job_id)
            if record is None or record.region == region:
                return record
            region = record.region
        return record

    def get(self, job_id: str, tenant: str | None = None) -> JobRecord:
        """The current record of ``job_id``; raises :class:`animfleet.region.jobstore.JobNotFound`.

        With ``tenant``, another tenant's job is not found either, and costs what a missing id
        costs (its store read, then the archive read a miss falls through to): how long a 404
        takes cannot tell whether the id exists.
        A queued job found past its start deadline is expired on the spot, so readers never
        see it queued even if no maintenance process ran yet.
        """
        try:
            store, record = self._current(job_id)
        except JobNotFound:
            archived = self._archived(job_id)
            if archived is None or tenant not in (None, archived.tenant):
                raise JobNotFound(job_id) from None
            return archived
        if tenant not in (None, record.tenant):
            self._archived(job_id)
            raise JobNotFound(job_id)
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
        store, record = self._current(job_id)
        holder = record.region

        def change(record: JobRecord) -> None:
            if record.region != holder:  # moved to another region meanwhile
                raise _Moved(record.region)
            if not record.status.terminal:
                record.end(JobState.CANCELED, "canceled", "canceled by request")

        try:
            record = store.update(job_id, change)
        except _Moved as moved:
            holder = moved.region
            record = self._link(holder).store.update(job_id, change)
        if record.status is JobState.CANCELED:  # out of the backlog now, not when popped
            Backlog(self._link(holder).store.redis, holder).remove(job_id, record.tenant)
        log.info("job.cancel", job_id=job_id, status=record.status.value)
        return record

    def queue_estimate(self, record: JobRecord) -> tuple[int | None, float | None]:
        """(queue position, estimated start) of a queued job; ``(None, None)`` otherwise."""
        if record.status is not JobState.QUEUED:
            return None, None
        live = self.region_status(record.region).load.live_workers
        return queue_eta(self._link(record.region).store, record, live)

    def region_status(self, region: str) -> RegionStatus:
        """Live and busy GPUs, queue depth and the oldest wait of ``region``, read now; of a
        region split into cells, its cells' summed (:func:`combine_status`)."""
        cells = self.topology.cells_of(region)
        if cells != [region]:
            return combine_status(region, (self.region_status(cell) for cell in cells))
        link = self._link(region)
        return read_region_status(link.store.redis, link.region)

    def regions(self) -> dict[str, RegionStatus]:
        """:meth:`region_status` of every unit of the topology (each cell on its own)."""
        return {name: self.region_status(name) for name in self.topology.names}

    def replay_webhook(self, job_id: str) -> WebhookDelivery | None:
        """Send ``job_id``'s most recent webhook event again, now, with the same ``webhook-id``;
        ``None`` if the job never produced one. Raises :class:`JobNotFound`."""
        record = self.get(job_id)
        return replay_last(self._link(record.region).store.redis, job_id)

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
