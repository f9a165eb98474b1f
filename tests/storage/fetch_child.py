"""A process that fetches one version from a SeaweedFS bucket, for the resume and lock tests.

``python -m tests.storage.fetch_child ENDPOINT BUCKET REF CACHE PART_BYTES STALL_AFTER``: with
``STALL_AFTER`` > 0 the store stops answering after that many ranged reads (the process then
waits to be killed mid-fetch); it prints the fetch's statistics as JSON when it completes.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from launcher.local_servers import S3_ACCESS_KEY, S3_SECRET_KEY
from storage.registry import ModelRegistry
from storage.s3 import S3Store


class StallingStore(S3Store):
    """The real S3 store, except that reads after the first ``stall_after`` never return."""

    def __init__(self, stall_after: int, bucket: str, endpoint_url: str) -> None:
        super().__init__(
            bucket,
            endpoint_url,
            access_key_id=S3_ACCESS_KEY,
            secret_access_key=S3_SECRET_KEY,
        )
        self.stall_after, self.reads = stall_after, 0
        self.lock, self.never = threading.Lock(), threading.Event()

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        with self.lock:
            self.reads += 1
            stall = 0 < self.stall_after < self.reads
        if stall:
            self.never.wait()
        return super().read_range(key, offset, length)


def main(argv: list[str]) -> None:
    endpoint, bucket, ref, cache, part_bytes, stall_after = argv
    store = StallingStore(int(stall_after), bucket, endpoint)
    registry = ModelRegistry(store, part_bytes=int(part_bytes), threads=1)
    path = registry.fetch(ref, Path(cache))
    stats = registry.last_fetch
    print(
        json.dumps(
            {
                "path": str(path),
                "downloaded": stats.downloaded if stats else 0,
                "reused": stats.reused if stats else 0,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
