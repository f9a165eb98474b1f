"""A tiny LTX-Video checkpoint shared by the serving-profile tests of one module."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.workers.model.families.profile_tiny import build_tiny_ltx


@pytest.fixture(scope="module")
def ltx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)  # tiny layers: more threads only contend on a loaded host
    return build_tiny_ltx(tmp_path_factory.mktemp("models") / "ltx")
