"""``make bench-gateway``: what the HTTP gateway adds per submit (request -> 202).

Starts a local fleet with one region, its gateway process and no GPU workers (the region's
capacity is faked with heartbeat entries, so admission accepts every job), then submits the same
small PNG ``--requests`` times, sequentially over one keep-alive connection, and the same
number of times through :meth:`dispatcher.Client.submit` in this process. The gateway's
overhead is the difference: HTTP, JSON, base64 and the thread pool hop.
"""

from __future__ import annotations

import argparse
import base64
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import redis
from PIL import Image

from animfleet import logs
from animfleet.region.workers import WorkerRegistry
from dispatcher.client import Client
from launcher.local_fleet import LocalFleet

REGION = "bench"


def _png() -> bytes:
    pixels = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _timed(call: Callable[[], object], count: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        call()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _summary(name: str, times: list[float]) -> str:
    ordered = sorted(times)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{name:<28} n={len(times):<5} p50={p50:7.2f} ms  p99={p99:7.2f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args(argv)
    logs.configure("WARNING")
    png = _png()
    body = {"image": "data:image/png;base64," + base64.b64encode(png).decode(), "prompt": "pan"}
    total = 2 * (args.requests + args.warmup)
    with tempfile.TemporaryDirectory() as root:
        fleet = LocalFleet(Path(root), regions=(REGION,), workers_per_region=0, gateway=True)
        with fleet:
            # Capacity for every job of the run: heartbeat entries of idle GPUs, valid an hour.
            registry = WorkerRegistry(redis.Redis.from_url(fleet.redis_url(REGION)), REGION)
            for i in range(total):
                registry.beat(f"bench-{i}", {"state": "idle"}, ttl_s=3600, busy=False)
            with httpx.Client(base_url=fleet.gateway_url(REGION), timeout=30) as http:

                def post() -> None:
                    response = http.post("/v1/jobs", json=body)
                    if response.status_code != 202:
                        raise RuntimeError(f"HTTP {response.status_code}: {response.text}")

                gateway = _timed(post, args.requests, args.warmup)
            client = Client(fleet.topology)
            try:
                direct = _timed(
                    lambda: client.submit(png, "pan", home_region=REGION),
                    args.requests,
                    args.warmup,
                )
            finally:
                client.close()
    print(_summary("POST /v1/jobs -> 202", gateway))
    print(_summary("Client.submit (in process)", direct))
    overhead_p50 = statistics.median(gateway) - statistics.median(direct)
    print(f"gateway overhead at p50: {overhead_p50:.2f} ms per request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
