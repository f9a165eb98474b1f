"""The targets for the spike scenario, checked on the runs of ``animfleet simulate spike``.

The production router with backoff must hold the spike: success >= 99.9%, cross-region share at
most the excess over home capacity + 5 points, p99 at most 1.5x the unloaded p99 (all for the
spiking region's jobs submitted during the spike). The seeds' failure must show: with the seeds'
router (no fallback), naive retries cascade (attempts per job >= 3x the unloaded ones, success
drops) while the table still confines the spike's jobs to home, its first router period; backoff
plus the execution delay must remove it: fewer than 3x attempts and success >= 99% in that
period (it holds ~170 jobs, too few to resolve 99.9%), and >= 99.9% over the whole spike. A
check whose runs were not simulated is left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tools.sim.engine import SimResult
from tools.sim.scenarios import Scenario
from tools.sim.scores import Summary, excess_share, summarize

MIN_SUCCESS = 0.999
MIN_ONSET_SUCCESS = 0.99
CROSS_MARGIN = 0.05
P99_FACTOR = 1.5
CASCADE_FACTOR = 3.0
PRODUCTION = "ring-router + backoff"
CASCADE = "seeds-router + naive"
FIX = "seeds-router + backoff"


@dataclass(frozen=True)
class Check:
    """One line of the bar: what was measured against what, and whether it holds."""

    ok: bool
    text: str

    @property
    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.text}"


def spike_checks(scenario: Scenario, results: Sequence[SimResult]) -> list[Check]:
    """The bar's checks for the runs present in ``results``."""
    focus, window, onset = scenario.focus, scenario.window, scenario.onset
    if focus is None or onset is None:
        return []
    runs = {result.config.label: result for result in results}
    quiet_window = (0.0, window[0])
    checks: list[Check] = []
    if PRODUCTION in runs:
        run = runs[PRODUCTION]
        row = summarize(run, window, focus)
        excess = excess_share(run, window, focus)
        quiet = summarize(run, quiet_window, focus)
        checks += [
            _at_least(f"{PRODUCTION}: success", row.success_rate, MIN_SUCCESS),
            Check(
                row.cross_region_share <= excess + CROSS_MARGIN,
                f"{PRODUCTION}: cross-region {_pct(row.cross_region_share)} <= excess "
                f"{_pct(excess)} + {100 * CROSS_MARGIN:.0f} pts",
            ),
            Check(
                row.p99_s <= P99_FACTOR * quiet.p99_s,
                f"{PRODUCTION}: p99 {row.p99_s:.2f} s <= {P99_FACTOR:g} x its p99 before the spike "
                f"{quiet.p99_s:.2f} s = {P99_FACTOR * quiet.p99_s:.2f} s",
            ),
        ]
    where = f"first router period of the spike ({onset[0]:g}-{onset[1]:g} s)"
    for label, cascades in ((CASCADE, True), (FIX, False)):
        if label not in runs:
            continue
        first = summarize(runs[label], onset, focus)
        factor = first.amplification / summarize(runs[label], quiet_window, focus).amplification
        text = f"{label}: {factor:.2f}x attempts/job of unloaded, {where}"
        if cascades:
            checks.append(
                Check(factor >= CASCADE_FACTOR, f"{text}; cascade >= {CASCADE_FACTOR:g}x")
            )
            checks.append(
                Check(
                    first.success_rate < MIN_SUCCESS,
                    f"{label}: success {_pct(first.success_rate, 2)} < {_pct(MIN_SUCCESS, 1)}, "
                    f"{where}",
                )
            )
        else:
            checks.append(
                Check(factor < CASCADE_FACTOR, f"{text}; no cascade < {CASCADE_FACTOR:g}x")
            )
            checks.append(
                _at_least(f"{label}: success, {where}", first.success_rate, MIN_ONSET_SUCCESS)
            )
            whole = summarize(runs[label], window, focus)
            checks.append(
                _at_least(f"{label}: success, whole spike", whole.success_rate, MIN_SUCCESS)
            )
    return checks


def whole_spike_notes(scenario: Scenario, results: Sequence[SimResult]) -> list[str]:
    """Attempts per job over the whole spike for the naive runs (the cascade's reach)."""
    if scenario.focus is None:
        return []
    rows: list[Summary] = [
        summarize(r, scenario.window, scenario.focus)
        for r in results
        if r.config.retry.name == "naive"
    ]
    return [
        f"note  {row.label}: {row.amplification:.2f} attempts/job, success "
        f"{_pct(row.success_rate, 2)} over the whole spike"
        for row in rows
    ]


def _at_least(what: str, value: float, floor: float) -> Check:
    return Check(value >= floor, f"{what} {_pct(value)} >= {_pct(floor, 1)}")


def _pct(value: float, digits: int = 3) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.{digits}f}%"
