"""Object keys: one output object per job, so a redelivered job overwrites rather than adds."""

from __future__ import annotations


def output_key(prefix: str, job_id: str) -> str:
    return f"{prefix}outputs/{job_id}.mp4"
