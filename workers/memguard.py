"""The worker's memory guard: a pool child whose RSS passes the limit is SIGKILLed.

On a GPU an oversized job dies with an out-of-memory error; on a host without a GPU it would
instead swap the machine to a halt or wake the kernel's OOM killer, which may pick any process.
The guard makes the outcome the same as a GPU OOM, and deterministic: the child running the job
dies, Celery (``task_reject_on_worker_lost``) puts the message back, the job's record counts the
delivery, and after ``max_deliveries`` the job is failed ``worker_lost`` while the worker, with
a fresh child, serves the next job.

It runs as a thread of the worker's *main* process, not of the child: the child may be stuck in
one long allocation or C call holding the GIL, and a process should not have to be healthy to be
stopped.
"""

from __future__ import annotations

import os
import signal
import threading

import psutil
import structlog

from workers.metrics import MEMORY_GUARD_KILLS

log = structlog.stdlib.get_logger("animfleet.worker")


class MemoryGuard:
    """Polls the RSS of this process's children every ``interval_s``; kills one past the limit."""

    def __init__(self, limit_mb: int, interval_s: float = 0.1, worker: str = "") -> None:
        self.limit_bytes = limit_mb * 2**20
        self.interval_s, self.worker = interval_s, worker
        self.kills = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-guard", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def check(self) -> list[int]:
        """One pass; returns the pids it killed."""
        killed: list[int] = []
        for child in psutil.Process(os.getpid()).children():
            try:
                rss = child.memory_info().rss
            except psutil.Error:  # exited between the listing and the read
                continue
            if rss > self.limit_bytes:
                os.kill(child.pid, signal.SIGKILL)
                self.kills += 1
                MEMORY_GUARD_KILLS.inc()
                killed.append(child.pid)
                log.error(
                    "worker.memory_guard_kill",
                    worker=self.worker,
                    pid=child.pid,
                    rss_mb=round(rss / 2**20),
                    limit_mb=self.limit_bytes // 2**20,
                )
        return killed

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except (psutil.Error, OSError):
                continue  # a child vanished mid-pass: the next pass sees the new one
