"""Run by tests/e2e/test_sdk_base_install.py in a venv holding only ``pip install ./sdk-python``:
submit jobs with the async SDK's ``submit_many``, wait on all, download every MP4.

``python base_client.py URL KEY IMAGE COUNT OUT_DIR``; exits non-zero on any failure. It also
fails if importing the SDK pulled in torch, redis or a broker library.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path


async def main(url: str, key: str, image: Path, count: int, out: Path) -> None:
    from animfleet_sdk import AsyncAnimfleet

    heavy = sorted({"torch", "redis", "celery", "kombu"} & set(sys.modules))
    assert not heavy, f"importing the SDK imported {heavy}"
    data = image.read_bytes()
    async with AsyncAnimfleet(url, api_key=key, max_retries=100) as api:
        items = [{"image": data, "prompt": "pan", "frames": 4, "size": 64} for _ in range(count)]
        results = await api.submit_many(items)
        ids = []
        for result in results:
            assert result.job is not None, result.error
            ids.append(result.job.id)
        jobs = await asyncio.gather(*(api.wait(job_id, timeout=600) for job_id in ids))
        assert all(job.status == "succeeded" for job in jobs), [j.status for j in jobs]
        videos = await asyncio.gather(*(api.download(job) for job in jobs))
    out.mkdir(parents=True, exist_ok=True)
    for job, video in zip(jobs, videos, strict=True):
        (out / f"{job.id}.mp4").write_bytes(video)
    print(f"{len(videos)} videos")


if __name__ == "__main__":
    url, key, image, count, out = sys.argv[1:6]
    asyncio.run(main(url, key, Path(image), int(count), Path(out)))
