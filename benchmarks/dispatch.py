"""Dispatcher submit against raw Celery ``apply_async`` to one Redis (``make bench-dispatch``).

Both sides publish one job per call (the shipped example image and a prompt) from one thread to
a private Redis, in alternating rounds so machine noise hits both alike. The raw side carries the
image in the task arguments, as a plain Celery app would. The dispatcher side does everything a
real submit does: validation (including decoding the image), routing-table lookup, idempotency
key, atomic admission, job record and input, and the Celery message.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis
from celery import Celery
from tqdm import tqdm

from animfleet import logs
from animfleet.cli import EXAMPLE_IMAGE
from animfleet.localfleet import LocalFleet
from dispatcher import Client
from workers.heartbeat import Heartbeat


def timed(call: Callable[[], object], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=300)
    args = parser.parse_args()
    logs.configure("WARNING")
    image = EXAMPLE_IMAGE.read_bytes()
    encoded = base64.b64encode(image).decode()
    with tempfile.TemporaryDirectory() as root, LocalFleet(
        Path(root), regions=("bench",), storage="local", workers_per_region=0
    ) as fleet:
        region = fleet.topology.region("bench")
        broker = redis.Redis.from_url(region.broker_url)
        total = args.rounds * args.per_round
        # Capacity that never binds, so both sides measure publishing, not admission refusals.
        for index in range(total + 1):
            Heartbeat(broker, "bench", f"gpu{index}", "bench", ttl_s=3600).beat()

        raw = Celery("raw", broker=region.broker_url)
        raw.conf.update(task_serializer="json", accept_content=["json"], task_ignore_result=True)

        @raw.task(name="animfleet.animate")  # type: ignore[untyped-decorator]
        def animate(image_b64: str, prompt: str) -> None: ...

        client = Client(fleet.topology)
        raw_calls = lambda: animate.apply_async(  # noqa: E731
            args=[encoded, "pan left"], queue=region.queue
        )
        ours = lambda: client.submit(  # noqa: E731
            image, "pan left", home_region="bench", idempotency_key=uuid.uuid4().hex
        )
        raw_calls(), ours()  # connections and scripts warm
        results: dict[str, list[float]] = {"raw apply_async": [], "dispatcher submit": []}
        for _ in tqdm(range(args.rounds), desc="rounds", unit="round"):
            results["raw apply_async"] += timed(raw_calls, args.per_round)
            results["dispatcher submit"] += timed(ours, args.per_round)
        client.close()

    base = 1 / statistics.mean(results["raw apply_async"])
    print(f"\n{total} calls per side ({len(image)}-byte PNG), one thread, private Redis")
    print(f"{'path':<20}{'calls/s':>10}{'ratio':>8}{'p50 ms':>9}{'p99 ms':>9}")
    for name, samples in results.items():
        rate = 1 / statistics.mean(samples)
        print(
            f"{name:<20}{rate:>10.0f}{rate / base:>8.2f}"
            f"{pct(samples, 0.5) * 1e3:>9.3f}{pct(samples, 0.99) * 1e3:>9.3f}"
        )


if __name__ == "__main__":
    main()
