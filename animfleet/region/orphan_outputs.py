"""Outputs no record points to, and when one may be deleted.

An output is an orphan when its job's record was lost (a Redis failover, a restart without
persistence) or when its job was canceled while it uploaded. Deleting a video is final, so an
output is deleted only on definite answers: the job's record is not in Redis *and* the archive's
store answered "no such object" (or the record names another output or none), on two looks at
least ``min_age_s`` apart. A read that fails (a 503 throttle, a timeout) is no answer: that
output is skipped this pass, counted and logged, and its earlier sighting is forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from animfleet.errors import AnimfleetError
from animfleet.jobs import JobRecord
from animfleet.region.archive import Objects, RecordArchive
from animfleet.region.jobstore import JobNotFound, JobStore

log = structlog.stdlib.get_logger("animfleet.sweeper")


@dataclass
class Reconciled:
    """One look's outcome: object keys deleted, and those whose record could not be read."""

    deleted: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


class OrphanOutputs:
    """One region's outputs under ``prefix`` (``<prefix>outputs/``), against its records.

    Holds when each orphan was first seen: the sweeper process that looks keeps it (a restarted
    sweeper starts the count again, which only delays a deletion).
    """

    def __init__(
        self, store: JobStore, objects: Objects, archive: RecordArchive, prefix: str
    ) -> None:
        self.store, self.objects, self.archive = store, objects, archive
        self.outputs_prefix = prefix + "outputs/"
        self._seen: dict[str, float] = {}  # orphan key -> when first seen so

    def look(self, now: float, min_age_s: float) -> Reconciled:
        """Delete the outputs seen orphaned for at least ``min_age_s`` (0: at once)."""
        done = Reconciled()
        keys = self.objects.list_keys(self.outputs_prefix)
        for key in keys:
            # outputs/<job id>.mp4, or outputs/<job id>/<run token>.mp4 (one run's output)
            job_id = key.removeprefix(self.outputs_prefix).partition("/")[0].removesuffix(".mp4")
            try:
                orphan = self._orphan(job_id, key)
            except (AnimfleetError, OSError) as error:  # no answer: nothing is known
                self._seen.pop(key, None)
                done.unreadable.append(key)
                log.warning("output.reconcile_unreadable", key=key, job_id=job_id, error=str(error))
                continue
            if not orphan:
                self._seen.pop(key, None)
                continue
            first = self._seen.setdefault(key, now)
            if now - first < min_age_s:
                continue
            self.objects.delete(key)
            self._seen.pop(key, None)
            done.deleted.append(key)
            log.warning("output.orphan_deleted", key=key, job_id=job_id)
        listed = set(keys)
        self._seen = {key: at for key, at in self._seen.items() if key in listed}
        return done

    def _orphan(self, job_id: str, key: str) -> bool:
        """Whether no record points to ``key``: raises when a record cannot be read."""
        try:
            record: JobRecord | None = self.store.get(job_id)
        except JobNotFound:
            record = self.archive.get(job_id)  # None only on the store's "no such object"
        if record is not None and not record.status.terminal:
            return False  # still running: its upload may be under way
        return record is None or record.output is None or record.output.key != key
