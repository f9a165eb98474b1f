"""Two runs of one job racing through every interleaving of start, progress, upload and finish,
on a real Redis and a real object store, with the runner's own steps: exactly one run finishes,
the record names it, and exactly one output object remains (the one it points to)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import permutations
from pathlib import Path

import pytest
import redis
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from animfleet.jobs import JobOutput, JobParams, JobRecord, JobState, new_job_id
from animfleet.region.admission import seed
from animfleet.region.jobstore import JobStore
from animfleet.region.runs import LeaseHeld, Run, RunFenced, RunLeases
from animfleet.topology import Region
from storage import output_key
from storage.local import LocalStore
from workers.runner import JobRunner
from workers.settings import WorkerSettings

PARAMS = JobParams(prompt="sway", frames=4, fps=8, width=32, height=32, seed=1)
STEPS = ("start", "progress", "upload", "finish")
log = structlog.stdlib.get_logger("test")


@dataclass
class RacingRun:
    """One delivery of the job, run step by step with the runner's own methods."""

    runner: JobRunner
    job_id: str
    run: Run | None = None
    output: JobOutput | None = None
    stopped: bool = False  # not started, or fenced off
    finished: list[JobRecord] = field(default_factory=list)

    def step(self, name: str) -> None:
        if self.stopped:
            return
        getattr(self, name)()

    def start(self) -> None:
        runner, record = self.runner, self.runner.store.get(self.job_id)
        try:
            started = runner._start(log, record)
        except LeaseHeld:
            # The other run's lease is live: this delivery is deferred until it lapses. The
            # race wanted here is the other run stalling past its TTL meanwhile.
            runner.store.redis.delete(RunLeases.key(self.job_id))
            started = runner._start(log, runner.store.get(self.job_id))
        if started is None:
            self.stopped = True
            return
        self.run = started[1]

    def progress(self) -> None:
        assert self.run is not None

        def advance(record: JobRecord) -> None:
            record.progress.step += 1

        try:
            self.runner.runs.write(self.run, advance, self.runner.lease_ttl_s)
        except RunFenced as fenced:
            self.runner._fenced(log, fenced, None)
            self.stopped = True

    def upload(self) -> None:
        assert self.run is not None
        key = output_key("", self.job_id, self.run.token)
        info = self.runner._upload(key, f"video of {self.run.token}".encode())
        self.output = JobOutput(key=info.key, bytes=info.size, frames=4, fps=8, width=32, height=32)

    def finish(self) -> None:
        assert self.run is not None
        self.runner._finish(log, self.run, JobState.SUCCEEDED, output=self.output)
        record = self.runner.store.get(self.job_id)
        if record.status is JobState.SUCCEEDED and record.run == self.run.token:
            self.finished.append(record)


@pytest.fixture
def race(redis_client: redis.Redis, tmp_path: Path) -> Iterator[object]:
    store, objects = JobStore(redis_client), LocalStore(tmp_path / "objects")

    def runner(name: str) -> JobRunner:
        return JobRunner(
            region=Region(name="r1", broker_url="redis://unused"),
            settings=WorkerSettings(max_deliveries=3),
            store=store,
            objects=objects,
            animator=None,  # type: ignore[arg-type]  # the steps never reach the model
            worker_name=name,
        )

    first, second = runner("w-a"), runner("w-b")

    def play(order: Sequence[str]) -> None:
        job_id = new_job_id("r1")
        seed(store.redis, JobRecord(id=job_id, region="r1", home_region="r1", params=PARAMS), b"i")
        runs = {"a": RacingRun(first, job_id), "b": RacingRun(second, job_id)}
        taken = {"a": 0, "b": 0}
        for who in order:
            runs[who].step(STEPS[taken[who]])
            taken[who] += 1

        finishers = [run for run in runs.values() if run.finished]
        assert len(finishers) == 1, order
        (winner,) = finishers
        assert winner.run is not None
        record = store.get(job_id)
        assert record.status is JobState.SUCCEEDED
        assert record.run == winner.run.token and record.worker == winner.runner.worker_name
        assert record.output is not None and record.output.key == winner.output.key  # type: ignore[union-attr]
        assert [key for key in objects.list_keys("") if job_id in key] == [record.output.key]
        assert not redis_client.exists(RunLeases.key(job_id))  # the lease ends with the run

    yield play


ORDERS = sorted(set(permutations("aaaabbbb")))  # each run's steps in order: 70 interleavings


@pytest.mark.parametrize("order", ORDERS, ids="".join)
def test_every_interleaving_of_two_runs_finishes_once_with_one_output(
    race: object, order: tuple[str, ...]
) -> None:
    race(order)  # type: ignore[operator]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(order=st.permutations("aaaabbbb"))
def test_two_racing_runs_finish_once_property(race: object, order: list[str]) -> None:
    race(order)  # type: ignore[operator]
