"""A batch worker's job slots: one job runner per slot, all denoising in one engine.

Celery's thread pool runs up to N tasks at once; each takes a free slot for its job, so the
job's record names the slot (``<worker>/<slot>``) and the slot's heartbeat entry is busy with
it while it runs. The runner does the job's I/O (input, record updates, encode, upload) in the
task's thread; only the denoising goes through the shared :class:`BatchEngine`.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from animfleet.region.workers import slot_names
from workers.batching.engine import BatchEngine
from workers.runner import JobRunner


class Slots:
    """``count`` runners made from ``base``, one per slot, sharing one engine."""

    def __init__(self, base: JobRunner, count: int) -> None:
        self.engine = BatchEngine(count)
        self.runners = [
            replace(base, worker_name=name, slot=index, batch=self.engine)
            for index, name in enumerate(slot_names(base.worker_name, count))
        ]
        self._free: queue.Queue[JobRunner] = queue.Queue()
        for runner in self.runners:
            self._free.put(runner)

    @contextmanager
    def take(self) -> Iterator[JobRunner]:
        """A free slot's runner for one job; waits if all are taken (the pool never runs more
        tasks than slots, so it does not)."""
        runner = self._free.get()
        try:
            yield runner
        finally:
            self._free.put(runner)

    def close(self) -> None:
        self.engine.close()
