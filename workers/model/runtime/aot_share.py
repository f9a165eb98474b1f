"""AOT packages shared through the region's bucket, like measured profile entries.

Packages are valid for one artifact key (device kind, ISA, torch, weights, precision: see
:func:`workers.model.runtime.aot.artifact_key`), so they are not shipped with the model: a
machine of the kind builds them once (``animfleet model compile --publish``) and puts them
under ``aot-packages/<key>/``; a worker of that kind whose model directory lacks them fetches
them at boot before loading. The manifest is written last and read first, so a half-published
set is never loaded; the warm-up check still compares every bucket with the eager model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog
from pydantic import ValidationError

from storage import ObjectStore, StorageError
from workers.model.runtime.aot import AOT_DIR, MANIFEST, Manifest, artifact_key

log = structlog.stdlib.get_logger("animfleet.worker.aot")

SHARED_PREFIX = "aot-packages"


@dataclass
class SharedPackages:
    """The AOT packages of each artifact key in the region's bucket."""

    objects: ObjectStore

    def publish(self, model_dir: Path, precision: str, device: str = "cpu") -> list[str]:
        """Upload this machine's packages of ``model_dir`` for ``precision``; the keys."""
        key, _ = artifact_key(model_dir, precision, device)
        directory = model_dir / AOT_DIR / key
        manifest = Manifest.model_validate_json((directory / MANIFEST).read_text())
        files = [*manifest.packages.values(), *([manifest.dynamic] if manifest.dynamic else [])]
        written = []
        for name in [*files, MANIFEST]:  # the manifest last: it says the set is complete
            target = f"{SHARED_PREFIX}/{key}/{name}"
            self.objects.put(target, (directory / name).read_bytes(), "application/octet-stream")
            written.append(target)
        return written

    def fetch(self, model_dir: Path, precision: str, device: str = "cpu") -> str:
        """Download the packages for this machine's key into ``model_dir`` unless present;
        what happened, in words (logged)."""
        key, _ = artifact_key(model_dir, precision, device)
        directory = model_dir / AOT_DIR / key
        if (directory / MANIFEST).is_file():
            return "present"
        prefix = f"{SHARED_PREFIX}/{key}"
        try:
            if self.objects.head(f"{prefix}/{MANIFEST}") is None:
                return f"none in the bucket under {prefix}/"
            data = self.objects.get(f"{prefix}/{MANIFEST}")
            manifest = Manifest.model_validate_json(data)
            names = [*manifest.packages.values(), *([manifest.dynamic] if manifest.dynamic else [])]
            directory.mkdir(parents=True, exist_ok=True)
            for name in names:
                (directory / name).write_bytes(self.objects.get(f"{prefix}/{name}"))
        except (StorageError, ValidationError, OSError) as error:
            log.warning("model.aot_shared_unreadable", key=prefix, error=str(error))
            return f"unreadable: {error}"
        (directory / MANIFEST).write_bytes(data)  # last: the set is complete
        log.info("model.aot_fetched", key=prefix, packages=len(names))
        return f"fetched {len(names)} packages from {prefix}/"
