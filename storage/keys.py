"""Object keys: one output object per run of a job, so a run that lost its job (fenced) removes
its own object and never overwrites the one the record points to."""

from __future__ import annotations


def output_key(prefix: str, job_id: str, run: str | None = None) -> str:
    """``outputs/<job id>.mp4``, or ``outputs/<job id>/<run token>.mp4`` for one run's output."""
    if run is None:
        return f"{prefix}outputs/{job_id}.mp4"
    return f"{prefix}outputs/{job_id}/{run}.mp4"
