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
import math
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
    from launcher.local_fleet import LocalFleet
except ImportError:
    from launcher.local_fleet import LocalFleet

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


def measure(jobs: int, root: Path) -> tuple[tuple[float, float], tuple[float, float]]:
    """(bytes, keys) per finished job once its webhooks settled, and after archiving."""
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
        _wait(lambda: store.zcard("{animfleet}:webhook-due:rb") == 0, "webhooks settled", 120)
        time.sleep(1.0)  # a settled delivery's last write lands just after its due entry goes
        settled = _job_bytes(store, ids)
        archived = _archive_all(fleet, store, ids)
        client.close()
    server.shutdown()
    return settled, archived


def _job_bytes(store: redis.Redis, ids: list[str]) -> tuple[float, float]:
    """(bytes, keys) per job over every key that names a job or holds a webhook delivery."""
    total, keys = 0, 0
    for key in store.scan_iter("{animfleet}:*"):
        name = key.decode()
        if any(job_id in name for job_id in ids) or name.startswith("{animfleet}:webhook:"):
            total += int(store.memory_usage(key) or 0)
            keys += 1
    return total / len(ids), keys / len(ids)


def _archive_all(fleet: LocalFleet, store: redis.Redis, ids: list[str]) -> tuple[float, float]:
    """The same after the sweeper's archive pass moved every record to the bucket; NaN on a
    commit that has no archive."""
    try:
        from animfleet.region.archive import RecordArchive
        from animfleet.region.jobstore import JobStore
        from storage import open_store
    except ImportError:
        return math.nan, math.nan
    storage = fleet.topology.region("rb").storage
    archive = RecordArchive(open_store(storage), storage.prefix)
    jobs = JobStore(store)
    moved = sum(jobs.archive(job_id, "rb", archive) for job_id in ids)
    assert moved == len(ids), f"archived {moved} of {len(ids)}"
    return _job_bytes(store, ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--days", type=float, default=1.0, help="days records stay in Redis")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        (settled, settled_keys), (archived, archived_keys) = measure(args.jobs, Path(root) / "f")
    print(f"jobs: {args.jobs}")
    print(f"{'':<34}{'bytes/job':>10}{'keys/job':>10}")
    print(f"{'finished, webhooks settled':<34}{settled:>10,.0f}{settled_keys:>10.1f}")
    if not math.isnan(archived):
        print(f"{'after the archive pass':<34}{archived:>10,.0f}{archived_keys:>10.1f}")
    per_million = settled * 1_000_000 * args.days / 2**30
    kept = f"records kept {args.days:g} day(s) before archiving"
    print(f"Redis per million jobs a day, {kept}: {per_million:.1f} GiB")


if __name__ == "__main__":
    main()
