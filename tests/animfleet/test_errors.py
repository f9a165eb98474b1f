"""Every error we raise on purpose has its package's base, and says whether a retry can help."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from animfleet.errors import AnimfleetError, PermanentError, TransientError
from dispatcher.errors import DispatcherError
from storage import StorageError, StorageRejected, StorageUnavailable
from workers.errors import WorkerError

BASES = {
    "animfleet": AnimfleetError,
    "storage": StorageError,
    "dispatcher": DispatcherError,
    "workers": WorkerError,
}
# Loading torch for the model's errors is not worth it here; the rest is imported.
SKIP = ("workers.model", "workers.celery_app", "workers.memguard", "workers.webhooks.app")


def _exceptions(package: str) -> list[type[BaseException]]:
    root = importlib.import_module(package)
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if info.name.startswith(SKIP):
            continue
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, Exception) and value.__module__ == info.name:
                found.append(value)
    return found


@pytest.mark.parametrize("package", sorted(BASES))
def test_every_error_derives_its_package_base(package: str) -> None:
    ours = [error for error in _exceptions(package) if not error.__name__.startswith("_")]
    assert ours, f"no errors found in {package}"
    stray = [error.__qualname__ for error in ours if not issubclass(error, AnimfleetError)]
    assert not stray, f"{package}: not an AnimfleetError: {stray}"
    if package != "animfleet":
        base = BASES[package]
        stray = [error.__qualname__ for error in ours if not issubclass(error, base)]
        assert not stray, f"{package}: not a {base.__name__}: {stray}"


def test_retrying_storage_is_in_the_type() -> None:
    assert issubclass(StorageUnavailable, TransientError) and StorageUnavailable.retryable
    assert issubclass(StorageRejected, PermanentError) and not StorageRejected.retryable
    assert not issubclass(StorageUnavailable, PermanentError)
