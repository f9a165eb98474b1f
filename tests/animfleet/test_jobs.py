import pytest

from animfleet.jobs import (
    IllegalTransition,
    JobParams,
    JobRecord,
    JobState,
    new_job_id,
    region_of,
)

PARAMS = JobParams(prompt="pan left", frames=8, fps=8, width=64, height=64, seed=1)


def record() -> JobRecord:
    return JobRecord(
        id=new_job_id("eu-west"), region="eu-west", home_region="eu-west", params=PARAMS
    )


def test_job_ids_are_unguessable_and_name_their_region() -> None:
    ids = {new_job_id("eu-west") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(region_of(job_id) == "eu-west" for job_id in ids)
    assert len(next(iter(ids)).split(".")[1]) == 32  # 128 random bits


def test_region_of_rejects_malformed_ids() -> None:
    with pytest.raises(ValueError, match="not of the form"):
        region_of("no-dot-here")


def test_lifecycle_stamps_times_and_counts_attempts() -> None:
    job = record()
    job.transition(JobState.RUNNING)
    job.transition(JobState.RUNNING)  # redelivered after a worker died
    assert job.attempts == 2 and job.metrics.queue_time is not None
    job.transition(JobState.SUCCEEDED)
    assert job.completed_at is not None and job.metrics.total_time is not None


@pytest.mark.parametrize("terminal", [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED])
def test_terminal_states_are_final(terminal: JobState) -> None:
    job = record()
    job.transition(JobState.RUNNING)
    job.transition(terminal)
    for state in JobState:
        with pytest.raises(IllegalTransition):
            job.transition(state)


def test_queued_job_cannot_succeed_without_running() -> None:
    with pytest.raises(IllegalTransition, match="queued -> succeeded"):
        record().transition(JobState.SUCCEEDED)
