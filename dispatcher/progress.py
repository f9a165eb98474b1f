"""A job's live progress as an ordered series of events, derived from its record.

Each event has an id that places it in the job's life: ``queued-<position>`` while it waits,
``started``, ``step-<n>`` while it runs, ``end`` at its terminal state. Ids order the events
(queue positions only ever count down; a position that grew is not announced), so a client that
reconnects with ``Last-Event-ID`` gets exactly the events after that one. A record read less
often than the job moves still yields every event in between: a job seen first at step 5 or
already finished yields ``started`` and each step it passed, in order, from what the record
says happened.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from animfleet.jobs import JobRecord, JobState, public_job_id

_ID = re.compile(r"^(?:queued-(\d{1,9})|queued|started|step-(\d{1,6})|end)$")

QUEUED, STARTED, RUNNING, ENDED = 0, 1, 1, 2


@dataclass(frozen=True, order=True)
class Mark:
    """Where in a job's life an event stands: (stage, ordinal within the stage)."""

    stage: int
    ordinal: float

    @classmethod
    def parse(cls, event_id: str | None) -> Mark | None:
        """The mark of a ``Last-Event-ID``; ``None`` for none or one this API never sent."""
        match = _ID.match(event_id.strip()) if event_id else None
        if match is None or event_id is None:
            return None
        text = event_id.strip()
        if text == "queued":
            return cls(QUEUED, -math.inf)
        if match.group(1) is not None:
            return cls(QUEUED, -int(match.group(1)))  # lower positions come later
        if text == "started":
            return cls(STARTED, 0)
        if match.group(2) is not None:
            return cls(RUNNING, int(match.group(2)))
        return cls(ENDED, 0)


@dataclass(frozen=True)
class Event:
    id: str
    event: str  # queued | started | progress | succeeded | failed | canceled | expired
    data: dict[str, Any]
    mark: Mark

    @property
    def terminal(self) -> bool:
        return self.mark.stage == ENDED

    def json(self) -> str:
        return json.dumps(self.data, separators=(",", ":"), default=str)


class Progress:
    """Turns successive reads of one job's record into the events not yet sent."""

    def __init__(self, last_event_id: str | None = None) -> None:
        self.last = Mark.parse(last_event_id)

    def events(
        self,
        record: JobRecord,
        queue_position: int | None = None,
        estimated_start_at: float | None = None,
        terminal_data: dict[str, Any] | None = None,
    ) -> list[Event]:
        """The events ``record`` shows that come after the last one sent, in order.
        ``terminal_data``: the job as the terminal event carries it (with its output URL)."""
        found = [
            event
            for event in _all(record, queue_position, estimated_start_at, terminal_data)
            if self.last is None or event.mark > self.last
        ]
        if found:
            self.last = found[-1].mark
        return found


def _all(
    record: JobRecord,
    position: int | None,
    estimate: float | None,
    terminal_data: dict[str, Any] | None,
) -> Iterator[Event]:
    if record.status is JobState.QUEUED:
        data = {"status": "queued", "queue_position": position, "estimated_start_at": estimate}
        if position is None:
            yield Event("queued", "queued", data, Mark(QUEUED, -math.inf))
        else:
            yield Event(f"queued-{position}", "queued", data, Mark(QUEUED, -position))
        return
    # Already past the queue when first read: the same keys, nothing left to estimate.
    done = {"status": "queued", "queue_position": None, "estimated_start_at": None}
    yield Event("queued", "queued", done, Mark(QUEUED, -math.inf))
    if record.started_at is not None:
        yield Event(
            "started",
            "started",
            {"status": "running", "started_at": record.started_at, "attempt": record.attempts},
            Mark(STARTED, 0),
        )
        total = record.progress.total
        reached = record.progress.step
        if record.status is JobState.SUCCEEDED and total:
            reached = total  # every step ran, whether or not the last one was recorded
        for step in range(1, reached + 1):
            yield Event(
                f"step-{step}",
                "progress",
                {"status": "running", "step": step, "total": total},
                Mark(RUNNING, step),
            )
    if record.status.terminal:
        data = terminal_data or {
            "status": record.status.value,
            "id": public_job_id(record.id, record.tenant),
        }
        yield Event("end", record.status.value, data, Mark(ENDED, 0))
