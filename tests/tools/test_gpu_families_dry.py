"""The GPU families benchmark's logic, dry-run on a tiny checkpoint on this CPU: the stock
call timed, and each option the pipeline refuses reported with why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_times_the_stock_call_and_reports_each_option() -> None:
    command = [sys.executable, "-m", "benchmarks.gpu_families", "--device", "cpu", "--tiny"]
    command += ["--families", "ltx", "--steps", "2"]
    command += ["--options", "attention _native_flash,cache first_block"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("ltx ")]
    assert len(rows) == 3, done.stdout
    stock, flash, cache = rows
    assert "stock call (fp32)" in stock and stock.rstrip().endswith("inf  ok")
    assert "attn_mask" in flash  # LTX passes a mask the flash kernel refuses
    assert "fewer than two repeated blocks" in cache  # the tiny checkpoint has one block
