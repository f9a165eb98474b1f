"""The model registry in a region's bucket: ``name@version`` -> a ``from_pretrained`` directory.

Layout under the region's prefix::

    models/blobs/<sha256>                  one object per distinct file, named by its content
    models/versions/<name>/<version>.json  the manifest: each file's path, sha256 and size

Blobs are content-addressed, so versions that share files (a retrained U-Net beside the same
VAE and text encoder) store them once. A push uploads the blobs first and writes the manifest
last: a version exists only once all its files do. Versions are immutable; a fetch verifies
every file against the manifest and refuses one that does not match.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field, ValidationError, field_validator

from animfleet.errors import PermanentError
from animfleet.versions import split_ref
from storage.base import ObjectStore, StorageError
from storage.blob_fetch import (
    PART_BYTES,
    THREADS,
    BlobFetcher,
    BlobMismatch,
    BlobMissing,
    FetchStats,
    discard,
    locked_staging,
)

log = logging.getLogger(__name__)

SHA256 = r"^[0-9a-f]{64}$"
_CHUNK = 1 << 20


class ModelNotFound(StorageError, PermanentError):
    """No manifest for this ``name@version`` in the registry."""


class ModelIntegrityError(StorageError, PermanentError):
    """A version's files (or its manifest) do not match the hash they were published under."""


class ModelFile(BaseModel):
    """One file of a version: its path relative to the model directory, sha256 and size."""

    path: str
    sha256: str = Field(pattern=SHA256)
    bytes: int = Field(ge=0)

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        # A manifest comes from the bucket: a path must not escape the directory it is fetched to.
        parts = PurePosixPath(value).parts
        if not parts or value.startswith("/") or any(p in ("..", ".") for p in parts):
            raise ValueError(f"file path {value!r} is not relative to the model directory")
        if "\\" in value or any(part.startswith(".") for part in parts):
            raise ValueError(f"file path {value!r} is not a plain, visible relative path")
        return value


class Manifest(BaseModel):
    """A published version: its files and the content hash over them."""

    ref: str
    name: str
    version: str
    hash: str = Field(pattern=SHA256)
    files: list[ModelFile]
    bytes: int
    pushed_at: float


def file_sha256(path: Path) -> str:
    """The sha256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def directory_files(model_dir: Path) -> list[ModelFile]:
    """Every regular file under ``model_dir`` with its sha256 and size, sorted by relative posix
    path; hidden files and directories (``.git``, ``.cache``, editor files) are left out."""
    files = []
    for path in model_dir.rglob("*"):
        relative = path.relative_to(model_dir)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        files.append(
            ModelFile(path=relative.as_posix(), sha256=file_sha256(path), bytes=path.stat().st_size)
        )
    return sorted(files, key=lambda file: file.path)


def content_hash(files: Sequence[ModelFile]) -> str:
    """The version's hash: sha256 over the canonical JSON of ``[path, sha256, bytes]`` sorted by
    path. Equal directories give equal hashes wherever and whenever they are pushed."""
    rows = sorted([file.path, file.sha256, file.bytes] for file in files)
    canonical = json.dumps(rows, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


class ModelRegistry:
    """Push, list and fetch model versions in one bucket (under a region's key prefix)."""

    def __init__(
        self,
        store: ObjectStore,
        prefix: str = "",
        part_bytes: int = PART_BYTES,
        threads: int = THREADS,
    ) -> None:
        self.store, self.prefix = store, prefix
        self.part_bytes, self.threads = part_bytes, threads
        self.last_fetch: FetchStats | None = None  # what the latest download read and reused

    def blob_key(self, sha256: str) -> str:
        return f"{self.prefix}models/blobs/{sha256}"

    def manifest_key(self, ref: str) -> str:
        """Raises ``BadVersionRef`` when ``ref`` is not ``name@version``."""
        name, version = split_ref(ref)
        return f"{self.prefix}models/versions/{name}/{version}.json"

    def push(self, model_dir: Path, ref: str) -> Manifest:
        """Upload ``model_dir`` as version ``ref``; returns its manifest.

        Blobs already in the bucket (same sha256 and size) are not uploaded again. Pushing a ref
        that exists with the same content is a no-op. Raises ``BadVersionRef``,
        ``NotADirectoryError`` (no such directory), ``ValueError`` (an empty directory, or the
        ref exists with other content: versions are immutable) and ``StorageError``.
        """
        name, version = split_ref(ref)
        if not model_dir.is_dir():
            raise NotADirectoryError(f"{model_dir} is not a directory")
        files = directory_files(model_dir)
        if not files:
            raise ValueError(f"{model_dir} holds no files to push")
        digest = content_hash(files)
        try:
            existing = self.manifest(ref)
        except ModelNotFound:
            existing = None
        if existing is not None:
            if existing.hash == digest:
                return existing
            raise ValueError(
                f"{ref} already exists with hash {existing.hash[:12]}, this directory hashes to "
                f"{digest[:12]}; versions are immutable: push it as a new version"
            )
        for file in files:
            key = self.blob_key(file.sha256)
            found = self.store.head(key)
            if found is not None and found.size == file.bytes:
                continue  # content-addressed: another version (or an earlier push) has it
            data = (model_dir / file.path).read_bytes()
            if hashlib.sha256(data).hexdigest() != file.sha256:  # changed while pushing
                raise ValueError(f"{model_dir / file.path} changed while being pushed")
            self.store.put(key, data, "application/octet-stream")
        manifest = Manifest(
            ref=ref,
            name=name,
            version=version,
            hash=digest,
            files=files,
            bytes=sum(file.bytes for file in files),
            pushed_at=time.time(),
        )
        # Last: publishing the manifest is what makes the version exist.
        self.store.put(
            self.manifest_key(ref), manifest.model_dump_json(indent=2).encode(), "application/json"
        )
        return manifest

    def manifest(self, ref: str) -> Manifest:
        """The manifest of ``ref``. Raises ``BadVersionRef``, :class:`ModelNotFound`,
        :class:`ModelIntegrityError` (a malformed manifest) and ``StorageError``."""
        key = self.manifest_key(ref)
        if self.store.head(key) is None:
            raise ModelNotFound(f"no model version {ref} in the registry ({key})")
        try:
            manifest = Manifest.model_validate_json(self.store.get(key))
        except ValidationError as error:
            raise ModelIntegrityError(f"the manifest of {ref} is malformed: {error}") from None
        if manifest.ref != ref:
            raise ModelIntegrityError(f"the manifest at {key} is for {manifest.ref}, not {ref}")
        return manifest

    def list(self) -> list[Manifest]:
        """Every version in the registry, sorted by ref."""
        keys = self.store.list_keys(f"{self.prefix}models/versions/")
        manifests = []
        for key in keys:
            relative = key.removeprefix(f"{self.prefix}models/versions/")
            name, _, version = relative.partition("/")
            if version.endswith(".json") and "/" not in version:
                manifests.append(self.manifest(f"{name}@{version.removesuffix('.json')}"))
        return sorted(manifests, key=lambda manifest: manifest.ref)

    def fetch(self, ref: str, cache_root: Path, expected_hash: str | None = None) -> Path:
        """The verified directory of ``ref``: ``cache_root / <manifest hash>``.

        A cached copy is re-hashed and used if every file matches the manifest; otherwise (or
        when absent) the blobs are read with concurrent ranged reads into a staging directory
        beside it (``.partial-<hash>``, resumed where an interrupted fetch left it, locked
        against other processes on this host), each file hashed as it lands, and the staging
        directory then replaces the cached one. ``last_fetch`` says what was downloaded and
        what reused (``None`` when the cached copy served). Raises :class:`ModelNotFound`,
        :class:`ModelIntegrityError` (``expected_hash`` differs from the manifest's, or a blob
        in the bucket does not match its manifest: the version is refused, not served),
        ``BadVersionRef`` and ``StorageError``.
        """
        self.last_fetch = None
        manifest = self.manifest(ref)
        if expected_hash is not None and manifest.hash != expected_hash:
            raise ModelIntegrityError(
                f"{ref}: the registry's manifest has hash {manifest.hash}, expected "
                f"{expected_hash}; refusing to serve it"
            )
        if content_hash(manifest.files) != manifest.hash:
            raise ModelIntegrityError(
                f"{ref}: its manifest's files hash to {content_hash(manifest.files)}, "
                f"the manifest says {manifest.hash}; refusing to serve it"
            )
        target = cache_root / manifest.hash
        if target.is_dir():
            if _matches(target, manifest):
                return target
            log.warning("cached files of %s at %s do not match its manifest; fetching", ref, target)
        _check_paths(manifest)
        cache_root.mkdir(parents=True, exist_ok=True)
        with locked_staging(cache_root, manifest.hash) as staging:
            if target.is_dir() and _matches(target, manifest):
                return target  # another process on this host installed it while we waited
            try:
                self.last_fetch = self.fetcher().fetch(list(manifest.files), staging)
            except BlobMismatch as bad:
                discard(staging)
                raise ModelIntegrityError(
                    f"{ref}: {bad.file.path} has sha256 {bad.actual} ({bad.size} bytes), its "
                    f"manifest says {bad.file.sha256} ({bad.file.bytes} bytes); refusing to "
                    "serve it"
                ) from None
            except BlobMissing as missing:
                discard(staging)
                raise ModelIntegrityError(
                    f"{ref}: the blob of {missing.file.path} ({missing.key}) is missing from "
                    "the bucket"
                ) from None
            # Each file was hashed as it landed: here only the listing is compared.
            if _listing(staging) != {file.path: file.bytes for file in manifest.files}:
                discard(staging)
                raise ModelIntegrityError(f"{ref}: fetched files do not match its manifest")
            _install(staging, target, manifest)
        return target

    def fetcher(self) -> BlobFetcher:
        """The ranged, resumable fetch this registry's versions are read with."""
        return BlobFetcher(self.store, self.blob_key, self.part_bytes, self.threads)


def _matches(directory: Path, manifest: Manifest) -> bool:
    """Whether ``directory`` holds exactly the manifest's files, each with its hash and size."""
    expected = sorted(manifest.files, key=lambda file: file.path)
    return directory_files(directory) == expected


def _check_paths(manifest: Manifest) -> None:
    """Refuse a manifest two of whose entries would write one path (or a file and a directory
    of the same name): its files could not all be installed as listed."""
    paths = {file.path for file in manifest.files}
    parents = {str(parent) for path in paths for parent in PurePosixPath(path).parents}
    if len(paths) < len(manifest.files) or paths & parents:
        raise ModelIntegrityError(f"{manifest.ref}: its manifest lists a path twice")


def _listing(directory: Path) -> dict[str, int]:
    """Every visible regular file under ``directory``: its relative posix path and size."""
    return {
        path.relative_to(directory).as_posix(): path.stat().st_size
        for path in directory.rglob("*")
        if path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(directory).parts)
    }


def _install(staging: Path, target: Path, manifest: Manifest) -> None:
    """Move the verified ``staging`` directory to ``target``, replacing a stale copy."""
    if target.exists():
        # Renamed aside first so that ``target`` is never half-deleted under its own name.
        stale = Path(tempfile.mkdtemp(dir=target.parent, prefix=".stale-"))
        os.replace(target, stale / "old")
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.replace(staging, target)
    except OSError:
        # Another process on this host installed it between our check and the rename.
        if not (target.is_dir() and _matches(target, manifest)):
            raise
