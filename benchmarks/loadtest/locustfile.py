"""The load generator: locust users submitting jobs through the regions' HTTP gateways.

Run by ``benchmarks/loadtest/run.py`` (``make loadtest``), which passes, in the environment:
``LOADTEST_GATEWAYS`` (``region=url,...``), ``LOADTEST_JOBS`` (stop after this many accepted),
``LOADTEST_BASE_RATE`` (jobs/s before and after the spike), ``LOADTEST_SPIKE`` (the multiplier),
``LOADTEST_DEADLINE_S`` (each job's deadline) and ``LOADTEST_OUT`` (accepted job ids are
appended there, one ``id home submitted_at`` line each).

Arrivals are open-loop in effect: each user submits at a fixed rate whatever the answers, and
the shape sets the number of users. The spike triples the total rate and lands mostly on the
first region, as a regional spike does, so the router has a reason to spill. A 429/503 is
answered like a real client would: wait ``Retry-After`` and submit the same job again; a lost
answer (connection error, timeout, 5xx) is retried with the same ``Idempotency-Key``, so a job
the gateway took is never submitted twice nor lost to the client.
"""

from __future__ import annotations

import base64
import io
import os
import random
import threading
import time
import uuid

import gevent
from locust import HttpUser, LoadTestShape, constant_throughput, task
from PIL import Image

GATEWAYS = dict(part.split("=", 1) for part in os.environ["LOADTEST_GATEWAYS"].split(","))
REGIONS = sorted(GATEWAYS)
JOBS = int(os.environ["LOADTEST_JOBS"])
BASE_RATE = float(os.environ["LOADTEST_BASE_RATE"])
SPIKE = float(os.environ.get("LOADTEST_SPIKE", "3"))
DEADLINE_S = float(os.environ.get("LOADTEST_DEADLINE_S", "600"))
OUT = os.environ["LOADTEST_OUT"]
PER_USER_RATE = 0.5  # submits per second per user

# Phases by share of the jobs: base 30 %, spike 30 %, base 40 %.
BASE_1_S = 0.3 * JOBS / BASE_RATE
SPIKE_S = 0.3 * JOBS / (BASE_RATE * SPIKE)


def _image() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 120, 40)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


IMAGE = _image()
claimed = 0  # jobs a user has started submitting; at most JOBS
accepted = 0  # of those, answered 202
refused = 0  # answered with another 4xx: invalid, never a job (should stay 0)
# Jobs whose user was stopped (the shape ramps down after the spike) before its answer: another
# user submits each again with the same Idempotency-Key, so a job the gateway took is counted.
pending: list[tuple[str, str, float]] = []
lock = threading.Lock()
started = time.time()


def spiking() -> bool:
    return BASE_1_S <= time.time() - started < BASE_1_S + SPIKE_S


def pick_home() -> str:
    if spiking():  # the extra load is the first region's
        extra = (SPIKE - 1) / SPIKE
        return REGIONS[0] if random.random() < extra else random.choice(REGIONS)
    return random.choice(REGIONS)


class Submitter(HttpUser):
    wait_time = constant_throughput(PER_USER_RATE)
    host = GATEWAYS[REGIONS[0]]
    current: tuple[str, str, float] | None = None

    def on_stop(self) -> None:
        if self.current is not None:
            with lock:
                pending.append(self.current)

    @task
    def submit(self) -> None:
        global accepted, claimed, refused
        with lock:  # claim a job first: the run ends when every claimed job has its answer
            if pending:
                self.current = pending.pop()
            elif claimed < JOBS:
                claimed += 1
                self.current = (uuid.uuid4().hex, pick_home(), time.time())
            else:
                return
        key, home, submitted_at = self.current
        body = {"image": IMAGE, "prompt": "pan left", "deadline": DEADLINE_S}
        headers = {"Idempotency-Key": key}
        while True:
            with self.client.post(
                GATEWAYS[home] + "/v1/jobs",
                json=body,
                headers=headers,
                name="POST /v1/jobs",
                catch_response=True,
                timeout=60,
            ) as response:
                if response.status_code in (200, 202):  # 200: a replay found it finished
                    response.success()
                    with lock:
                        accepted += 1
                        self.current = None
                        with open(OUT, "a") as out:
                            out.write(f"{response.json()['id']} {home} {submitted_at}\n")
                    return
                if response.status_code in (429, 503):
                    response.success()  # an answer the protocol expects, not an error
                    gevent.sleep(float(response.headers.get("retry-after", "1")))
                    continue
                response.failure(f"{response.status_code}: {response.text[:200]}")
                if response.status_code == 0 or response.status_code >= 500:
                    gevent.sleep(1.0)  # no answer: the same key again finds the job if it exists
                    continue
                with lock:
                    refused += 1
                    self.current = None
                return


class Spike(LoadTestShape):
    """Users (at PER_USER_RATE each) for the base rate, times SPIKE during the spike."""

    def tick(self) -> tuple[int, float] | None:
        if accepted + refused >= JOBS:  # every claimed job answered: none cut off in flight
            return None
        rate = BASE_RATE * (SPIKE if spiking() else 1.0)
        users = max(1, round(rate / PER_USER_RATE))
        return users, float(users)
