"""Redis bytes each finished job leaves behind, measured on a real local fleet.

Runs ``--jobs`` jobs (a stand-in model, a webhook to a local receiver for every event) through a
one-region fleet, waits until every job is terminal and every webhook delivery has settled, then
sums ``MEMORY USAGE`` over every key that names a job (record, input, deliveries, their list,
idempotency). Prints bytes per finished job and the memory a region needs per million jobs a day
while records stay in Redis (``--days``: how long they stay before the sweeper archives them).

    python -m benchmarks.record_bytes --jobs 40
"""

from __future__ import annotations

import argparse
import http.server
import io
import tempfile
import threading
import time
from dataclasses import fields
from pathlib import Path

import numpy as np
import redis
from PIL import Image

from animfleet.netguard import NetGuard
from dispatcher import Client

try:  # the layout before tools/ existed, to measure an older commit the same way
    from animfleet.localfleet import LocalFleet
except ImportError:
    from tools.localfleet import LocalFleet

STANDIN = "tests.fixtures.standin:StandinAnimator"


class _Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def _png(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _wait(check: object, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def measure(jobs: int, root: Path) -> tuple[float, int]:
    """(bytes per finished job, keys per job) on a fresh one-region fleet."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    options: dict[str, object] = {
        "regions": ("rb",),
        "workers_per_region": 2,
        "model_dir": Path("standin:0.3:0"),
        "webhooks": True,
        "service_env": {"ANIMFLEET_NETGUARD_ALLOW_LOOPBACK": "1"},
    }
    if "animator" in {spec.name for spec in fields(LocalFleet)}:
        options["animator"] = STANDIN
    with LocalFleet(root, **options) as fleet:
        client = Client(fleet.topology, netguard=NetGuard(allow_loopback=True))
        ids = [
            client.submit(_png(i), "pan left", home_region="rb", webhook_url=url).id
            for i in range(jobs)
        ]
        _wait(lambda: all(client.get(i).status.terminal for i in ids), "jobs terminal", 300)
        store = redis.Redis.from_url(fleet.redis_url("rb"))
        _wait(lambda: store.zcard("animfleet:webhook-due:rb") == 0, "webhooks settled", 120)
        time.sleep(1.0)  # a settled delivery's last write lands just after its due entry goes
        total, keys = 0, 0
        for key in store.scan_iter("animfleet:*"):
            name = key.decode()
            if any(job_id in name for job_id in ids) or name.startswith("animfleet:webhook:"):
                total += int(store.memory_usage(key) or 0)
                keys += 1
        client.close()
    server.shutdown()
    return total / jobs, round(keys / jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--days", type=float, default=1.0, help="days records stay in Redis")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        per_job, keys = measure(args.jobs, Path(root) / "fleet")
    per_million = per_job * 1_000_000 * args.days / 2**30
    print(f"jobs: {args.jobs}  keys per finished job: {keys}")
    print(f"Redis bytes per finished job: {per_job:,.0f}")
    print(
        f"memory per million jobs a day, records kept {args.days:g} day(s): {per_million:.1f} GiB"
    )


if __name__ == "__main__":
    main()
