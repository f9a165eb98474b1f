"""A model version's blobs to local disk: concurrent ranged reads, hashed as they land, resumable.

Each file is read in parts of ``part_bytes`` with up to ``threads`` ranged reads in flight; a
part is written straight to its offset in the staging copy of its file and hashed in file order
as parts arrive, so no blob is ever held whole in memory (at most ``threads + 2`` parts are).

The staging directory sits beside the cache, named by the manifest's hash, and records every
part it has written in a journal: a fetch interrupted (the process killed, storage gone) leaves
it behind, and the next fetch of the same version reads only the parts it lacks. Every file is
checked against its sha256: a file that used earlier parts and does not match (a partial
damaged on disk) is fetched again whole; a freshly fetched one that does not match refuses the
version. A lock on the staging directory lets one process on a host fetch a version while
others wait for it and then find it installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from animfleet.errors import PermanentError
from storage.base import ObjectStore, StorageError, StorageRejected

PART_BYTES = 16 * 2**20
THREADS = 8
_JOURNAL = ".parts.jsonl"  # hidden: never part of the installed directory's listing


class BlobFile(Protocol):
    """What the fetch needs of one manifest entry."""

    path: str
    sha256: str
    bytes: int


class BlobMismatch(StorageError, PermanentError):
    """A freshly fetched file does not match its manifest entry (the registry words the error)."""

    def __init__(self, file: BlobFile, actual: str, size: int) -> None:
        super().__init__(file.path)
        self.file, self.actual, self.size = file, actual, size


class BlobMissing(StorageError, PermanentError):
    """The bucket has no blob for a file (the registry words the error)."""

    def __init__(self, file: BlobFile, key: str) -> None:
        super().__init__(key)
        self.file, self.key = file, key


@dataclass(frozen=True)
class _Part:
    file: BlobFile
    offset: int
    length: int

    @property
    def mark(self) -> tuple[str, int, int]:
        return (self.file.path, self.offset, self.length)


@dataclass
class FetchStats:
    """What one fetch did: bytes read from the store, and bytes reused from an earlier one."""

    downloaded: int = 0
    reused: int = 0
    refetched: list[str] = field(default_factory=list)


class BlobFetcher:
    """Fetches a version's files into a staging directory with ranged reads on a thread pool."""

    def __init__(
        self,
        store: ObjectStore,
        blob_key: Callable[[str], str],
        part_bytes: int = PART_BYTES,
        threads: int = THREADS,
    ) -> None:
        if part_bytes < 1 or threads < 1:
            raise ValueError(f"part_bytes and threads must be positive: {part_bytes}, {threads}")
        self.store, self.blob_key = store, blob_key
        self.part_bytes, self.threads = part_bytes, threads

    def fetch(self, files: list[BlobFile], staging: Path) -> FetchStats:
        """Every file of ``files`` into ``staging``, verified; resumes what a journal there
        records. Raises :class:`BlobMismatch`, :class:`BlobMissing`, ``StorageError`` and
        ``OSError``."""
        stats = FetchStats()
        journal = _Journal(staging / _JOURNAL)
        stale = self._pass(files, staging, journal, stats)
        if stale:  # a resumed file did not match: its earlier parts were bad, not the blob
            journal.forget({file.path for file in stale})
            stats.refetched = [file.path for file in stale]
            for file in stale:
                (staging / file.path).unlink(missing_ok=True)
            self._pass(stale, staging, journal, stats)
        journal.path.unlink(missing_ok=True)
        return stats

    def _pass(
        self, files: list[BlobFile], staging: Path, journal: _Journal, stats: FetchStats
    ) -> list[BlobFile]:
        """One ordered pass over ``files``; returns the resumed ones that did not match."""
        done = journal.read()
        stale: list[BlobFile] = []
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="blob-fetch")
        with _OpenFiles(staging) as handles:
            try:
                window: deque[tuple[_Part, bool, Future[bytes]]] = deque()
                hashers: dict[str, _FileHash] = {}
                for part in self._parts(files):
                    fd = handles.open(part.file)
                    resumed = part.mark in done
                    task = _read_back if resumed else self._download
                    window.append((part, resumed, pool.submit(task, part, fd)))
                    while len(window) > self.threads + 1:
                        self._land(window.popleft(), hashers, journal, stats, stale)
                while window:
                    self._land(window.popleft(), hashers, journal, stats, stale)
            finally:
                # On an error, parts not started are dropped; those in flight finish before
                # their files close (they are simply not journalled, so read again next time).
                pool.shutdown(wait=True, cancel_futures=True)
        return stale

    def _parts(self, files: list[BlobFile]) -> Iterator[_Part]:
        for file in files:
            if file.bytes == 0:
                yield _Part(file, 0, 0)
            for offset in range(0, file.bytes, self.part_bytes):
                yield _Part(file, offset, min(self.part_bytes, file.bytes - offset))

    def _download(self, part: _Part, fd: int) -> bytes:
        key = self.blob_key(part.file.sha256)
        if part.length == 0:
            if self.store.head(key) is None:
                raise BlobMissing(part.file, key)
            return b""
        try:
            data = self.store.read_range(key, part.offset, part.length)
        except StorageRejected:
            if self.store.head(key) is None:
                raise BlobMissing(part.file, key) from None
            raise
        # Shorter than asked: the blob is smaller than its manifest says; its hash check fails.
        os.pwrite(fd, data, part.offset)
        return data

    def _land(
        self,
        entry: tuple[_Part, bool, Future[bytes]],
        hashers: dict[str, _FileHash],
        journal: _Journal,
        stats: FetchStats,
        stale: list[BlobFile],
    ) -> None:
        part, resumed, future = entry
        data = future.result()
        hasher = hashers.setdefault(part.file.path, _FileHash())
        hasher.add(data, resumed)
        if resumed:
            stats.reused += len(data)
        else:
            stats.downloaded += len(data)
            journal.add(part.mark)
        if part.offset + part.length < part.file.bytes:
            return
        actual = hasher.digest.hexdigest()
        if actual == part.file.sha256 and hasher.size == part.file.bytes:
            return
        if hasher.resumed:
            stale.append(part.file)
        else:
            raise BlobMismatch(part.file, actual, hasher.size)


def _read_back(part: _Part, fd: int) -> bytes:
    """A part an earlier fetch wrote, read back from the staging file to be hashed."""
    return os.pread(fd, part.length, part.offset)


class _FileHash:
    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.size, self.resumed = 0, False

    def add(self, data: bytes, resumed: bool) -> None:
        self.digest.update(data)  # releases the GIL: downloads go on meanwhile
        self.size += len(data)
        self.resumed = self.resumed or resumed


class _OpenFiles:
    """The staging copies being written, each opened once and sized to its manifest entry."""

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.fds: dict[str, int] = {}

    def open(self, file: BlobFile) -> int:
        if file.path not in self.fds:
            path = self.staging / file.path
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            self.fds[file.path] = fd
            if os.fstat(fd).st_size != file.bytes:
                os.ftruncate(fd, file.bytes)
        return self.fds[file.path]

    def __enter__(self) -> _OpenFiles:
        return self

    def __exit__(self, *_: object) -> None:
        for fd in self.fds.values():
            os.close(fd)


class _Journal:
    """The parts written so far, one JSON line each: ``[path, offset, length]``.

    Appended after a part's bytes are written, so a line never names a part that was not; a
    line cut short by a kill is ignored. A part damaged on disk anyway (a crash of the host
    before the page cache was flushed) fails its file's hash check and is fetched again.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> set[tuple[str, int, int]]:
        marks: set[tuple[str, int, int]] = set()
        with contextlib.suppress(FileNotFoundError):
            for line in self.path.read_text().splitlines():
                with contextlib.suppress(ValueError, TypeError):
                    path, offset, length = json.loads(line)
                    marks.add((str(path), int(offset), int(length)))
        return marks

    def add(self, mark: tuple[str, int, int]) -> None:
        line = (json.dumps(list(mark)) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)  # one small O_APPEND write: whole or, if killed, cut short
        finally:
            os.close(fd)

    def forget(self, paths: set[str]) -> None:
        kept = [mark for mark in self.read() if mark[0] not in paths]
        self.path.write_text("".join(json.dumps(list(mark)) + "\n" for mark in kept))


@contextlib.contextmanager
def locked_staging(cache_root: Path, name: str) -> Iterator[Path]:
    """``cache_root/.partial-<name>``, created if absent and held under an exclusive lock.

    Another process fetching the same version waits here; when its turn comes the directory
    may have been installed (renamed) or discarded by the holder, so it takes the lock on a
    fresh one instead.
    """
    staging = cache_root / f".partial-{name}"
    while True:
        staging.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:  # installed or discarded between the two calls
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(staging).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                yield staging
                return
        finally:
            os.close(fd)  # closing releases the lock


def discard(staging: Path) -> None:
    """Remove a staging directory whose content must not be resumed."""
    shutil.rmtree(staging, ignore_errors=True)


__all__ = [
    "PART_BYTES",
    "THREADS",
    "BlobFetcher",
    "BlobMismatch",
    "BlobMissing",
    "FetchStats",
    "discard",
    "locked_staging",
]
