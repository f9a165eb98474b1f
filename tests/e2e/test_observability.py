"""/metrics on every process of a real fleet, and Celery's own tools (inspect, Flower) work
against our workers."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from launcher.local_fleet import LocalFleet
from launcher.local_servers import free_port
from tests.fixtures.standin import ANIMATOR as STANDIN

pytestmark = pytest.mark.e2e

PORTS: dict[str, int] = {}  # chosen when the fleet starts, not when the module is collected


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    PORTS.update({name: free_port() for name in ("worker", "router", "webhooks", "flower")})
    with LocalFleet(
        tmp_path_factory.mktemp("observed"),
        regions=("ob",),
        model_dir=Path("standin:0.3:0"),
        animator=STANDIN,
        worker_env={"ANIMFLEET_WORKER_METRICS_PORT": str(PORTS["worker"])},
        gateway=True,
        webhooks=True,
        router_period_s=0.5,
        service_env={
            "ANIMFLEET_ROUTER_METRICS_PORT": str(PORTS["router"]),
            "ANIMFLEET_WEBHOOK_METRICS_PORT": str(PORTS["webhooks"]),
            "ANIMFLEET_NETGUARD_ALLOW_LOOPBACK": "1",
            "ANIMFLEET_WEBHOOK_SCHEDULE_S": "0,600",
        },
    ) as fleet:
        yield fleet


def scrape(url: str) -> dict[str, float]:
    """``name{labels}`` -> value of every sample."""
    text = httpx.get(url, timeout=5).text
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def value(samples: dict[str, float], pattern: str) -> float:
    """Sum of the samples whose ``name{labels}`` matches ``pattern``."""
    return sum(v for k, v in samples.items() if re.fullmatch(pattern, k))


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.2)


def test_every_process_serves_metrics_of_what_happened(
    observed: LocalFleet, make_image: Callable[..., bytes]
) -> None:
    image = "data:image/png;base64," + base64.b64encode(make_image()).decode()
    hook = f"http://127.0.0.1:{free_port()}/hook"  # nobody listens: the attempt is a retry
    with httpx.Client(base_url=observed.gateway_url(), timeout=60) as http:
        ids = [
            http.post("/v1/jobs", json={"image": image, "prompt": "pan", "webhook": hook})
            .raise_for_status()
            .json()["id"]
            for _ in range(2)
        ]
        for job_id in ids:
            wait_for(
                lambda j=job_id: http.get(f"/v1/jobs/{j}").json()["status"] == "succeeded",
                f"{job_id} succeeded",
            )
        gateway = scrape(observed.gateway_url() + "/metrics")
    assert value(gateway, r'animfleet_jobs_submitted_total\{home_region="ob",region="ob"\}') == 2
    assert value(gateway, r'animfleet_gateway_responses_total\{.*status="202"\}') == 2

    worker_url = f"http://127.0.0.1:{PORTS['worker']}/metrics"
    worker = scrape(worker_url)
    finished = r'animfleet_jobs_finished_total\{code="",region="ob",status="succeeded"\}'
    assert value(worker, finished) == 2
    assert value(worker, r'animfleet_job_queue_seconds_count\{region="ob"\}') == 2
    assert value(worker, r'animfleet_job_inference_seconds_count\{region="ob"\}') == 2
    assert r'animfleet_model_warmup_seconds{region="ob"}' in worker
    boot = {  # the stand-in has no boot versions to fetch: that stage took no time
        found.group(1): seconds
        for key, seconds in worker.items()
        if (found := re.fullmatch(r'animfleet_worker_boot_seconds\{.*stage="(\w+)".*\}', key))
    }
    assert set(boot) == {"fetch", "load", "warmup", "ready"}, boot
    assert boot["fetch"] == 0 and boot["ready"] > boot["load"] > 0, boot

    router_url = f"http://127.0.0.1:{PORTS['router']}/metrics"
    live = r'animfleet_region_live_workers\{region="ob"\}'
    wait_for(lambda: value(scrape(router_url), live) == 1, "the router saw the worker")
    router = scrape(router_url)
    assert value(router, r'animfleet_region_live_workers\{region="ob"\}') == 1
    assert value(router, r'animfleet_region_reachable\{region="ob"\}') == 1
    assert value(router, r"animfleet_routing_tables_total") >= 1

    webhooks_url = f"http://127.0.0.1:{PORTS['webhooks']}/metrics"
    pattern = r'animfleet_webhook_deliveries_total\{outcome="retry",region="ob"\}'
    wait_for(lambda: value(scrape(webhooks_url), pattern) >= 2, "webhook retries counted")


def test_celery_inspect_and_flower_see_our_worker(observed: LocalFleet) -> None:
    broker = observed.broker_url("ob")  # its Redis, or RabbitMQ
    celery = [sys.executable, "-m", "celery", "--broker", broker]
    ping = subprocess.run(
        [*celery, "inspect", "ping", "--timeout", "10"], capture_output=True, text=True, check=True
    )
    assert "worker-ob-0@localhost" in ping.stdout and "pong" in ping.stdout
    queues = subprocess.run(
        [*celery, "inspect", "active_queues", "--timeout", "10"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "animate.ob" in queues.stdout

    port = PORTS["flower"]
    env = {**os.environ, "FLOWER_UNAUTHENTICATED_API": "true"}
    flower = subprocess.Popen(
        [*celery, "flower", f"--port={port}", "--address=127.0.0.1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/api/workers?refresh=1"
        wait_for(
            lambda: "worker-ob-0@localhost" in httpx.get(url, timeout=15).json(),
            "Flower lists the worker",
        )
    finally:
        flower.terminate()
        flower.wait(10)
