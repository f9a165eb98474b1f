"""Each job's own log: lines about a job, from a process configured as every fleet process is,
land in that job's capped list in the region's Redis, secrets and query strings left out."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import redis

from animfleet.region.joblogs import MAX_LINES, JobLogs
from animfleet.region.keys import JOB_LOG_KEY, RECORD_TTL_S
from launcher.local_fleet import LocalFleet

PROCESS = """
import sys
from animfleet import logs
from animfleet.region.joblogs import keep_job_logs
from animfleet.region.store_client import store_client
logs.configure("INFO")
keep_job_logs({"jl": store_client(sys.argv[1])})
log = logs.get_logger("test")
log.info("job.submitted", job_id="jl.one", region="jl", webhook_url="https://h.example/x?token=s")
log.info("job.transition", job_id="jl.one", status="running", api_secret="hunter2")
log.debug("job.noise", job_id="jl.one")
log.info("fleet.unrelated")
for step in range(int(sys.argv[2])):
    log.info("job.step", job_id="jl.many", step=step)
"""


def _run(url: str, many: int = 0) -> str:
    """Run the process above; its stderr."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROCESS), url, str(many)],
        check=True,
        env={**os.environ, "ANIMFLEET_LOG_LEVEL": "INFO"},
        capture_output=True,
        text=True,
    ).stderr


def test_a_processes_lines_about_a_job_are_kept_for_it(
    store_url: str, redis_client: redis.Redis
) -> None:
    _run(store_url)
    lines = JobLogs(redis_client).read("jl.one")
    assert [kept.line["event"] for kept in lines] == ["job.submitted", "job.transition"]
    assert [kept.seq for kept in lines] == [1, 2]
    first, second = (kept.line for kept in lines)
    assert first["webhook_url"] == "https://h.example/x" and "job_id" not in first
    assert first["level"] == "info" and first["timestamp"].endswith("Z")
    assert second["api_secret"] == "***"
    assert JobLogs(redis_client).read("jl.one", after=1)[0].line["event"] == "job.transition"
    assert 0 < redis_client.ttl(JOB_LOG_KEY + "jl.one") <= RECORD_TTL_S


def test_a_jobs_log_keeps_its_last_lines(store_url: str, redis_client: redis.Redis) -> None:
    _run(store_url, many=MAX_LINES + 5)
    lines = JobLogs(redis_client).read("jl.many")
    assert len(lines) == MAX_LINES
    assert lines[0].line["step"] == 5 and lines[-1].seq == MAX_LINES + 5
    JobLogs(redis_client).delete("jl.many")
    assert JobLogs(redis_client).read("jl.many") == []


def test_a_redis_outage_never_stops_the_line(servers: LocalFleet) -> None:
    stderr = _run("redis://127.0.0.1:9/0")  # nothing listens: the process exits 0
    assert '"event": "job.transition"' in stderr and '"event": "fleet.unrelated"' in stderr
