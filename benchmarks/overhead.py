"""Per-job overhead outside the model, on a real local fleet (``make bench-overhead``).

Submits jobs one at a time to an idle worker and reports, per job, the queue wait (submit to
running), encode and upload times and everything else outside inference, as medians and p90.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from animfleet import logs
from dispatcher import Client
from launcher.local_fleet import LocalFleet
from tools import EXAMPLE_IMAGE


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--storage", choices=["local", "s3"], default="s3")
    args = parser.parse_args()
    logs.configure("WARNING")
    image = EXAMPLE_IMAGE.read_bytes()
    rows: dict[str, list[float]] = {
        k: [] for k in ("queue wait", "inference", "encode", "upload", "overhead", "total")
    }
    with (
        tempfile.TemporaryDirectory() as root,
        LocalFleet(Path(root), regions=("bench",), storage=args.storage) as fleet,
    ):
        client = Client(fleet.topology)
        for _ in tqdm(range(args.jobs), desc="jobs", unit="job"):
            record = client.submit(image, "pan left", home_region="bench", steps=2).wait(60)
            assert record.status.value == "succeeded", record.error
            m = record.metrics
            assert m.queue_time is not None and m.inference_time is not None
            assert m.encode_time is not None and m.upload_time is not None and m.total_time
            rows["queue wait"].append(m.queue_time)
            rows["inference"].append(m.inference_time)
            rows["encode"].append(m.encode_time)
            rows["upload"].append(m.upload_time)
            rows["overhead"].append(m.total_time - m.inference_time)
            rows["total"].append(m.total_time)
            time.sleep(0.05)  # the worker is idle again before the next submit
    print(f"\nper-job times over {args.jobs} jobs, 64x64x8 frames, {args.storage} storage (ms)")
    print(f"{'phase':<12}{'median':>10}{'p90':>10}")
    for name, values in rows.items():
        med, p90 = statistics.median(values) * 1000, percentile(values, 0.9) * 1000
        print(f"{name:<12}{med:>10.1f}{p90:>10.1f}")
    print("overhead = total - inference: queue wait + record updates + encode + upload")


if __name__ == "__main__":
    main()
