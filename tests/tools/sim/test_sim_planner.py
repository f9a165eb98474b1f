"""Trace files and the capacity planner."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tools.sim.planner import allowed_blocking, erlang_b, plan, servers_for
from tools.sim.service import ServiceTime
from tools.sim.traffic import TraceEvents, TraceRates, load_trace, per_minute


def test_erlang_b_known_values() -> None:
    assert erlang_b(1, 1.0) == pytest.approx(0.5)
    assert erlang_b(10, 5.0) == pytest.approx(0.018385, abs=1e-5)
    assert servers_for(5.0, 0.02) == 10


def test_event_and_rate_traces_load(tmp_path: Path) -> None:
    events = tmp_path / "events.csv"
    events.write_text("t_seconds,region\n5,eu-west\n61,us-east\n62,eu-west\n1.5,eu-west\n")
    model = load_trace(events)
    assert isinstance(model, TraceEvents)
    assert list(model.times) == [1.5, 5, 61, 62]
    assert per_minute(model).counts.tolist() == [[2, 0], [1, 1]]
    rates = tmp_path / "rates.csv"
    rates.write_text("minute,region,jobs\n0,us-east,60\n1,us-east,120\n1,eu-west,30\n")
    loaded = load_trace(rates)
    assert isinstance(loaded, TraceRates)
    assert loaded.rates(np.array([30.0, 90.0])).tolist() == [[1.0, 0.0], [2.0, 0.5]]
    bad = tmp_path / "bad.csv"
    bad.write_text("when,where\n1,x\n")
    with pytest.raises(ValueError, match="header"):
        load_trace(bad)


def test_plan_meets_the_blocking_it_derives() -> None:
    service = ServiceTime(4.0, 6.0)
    trace = TraceRates(["us-east", "eu-west"], np.array([[600.0, 60.0], [1200.0, 30.0]]))
    plans = {p.region: p for p in plan(trace, service, p99_s=9.0, success_rate=0.999)}
    limit = allowed_blocking(service, 9.0, 0.999)
    for p in plans.values():
        assert p.blocking <= limit
        assert erlang_b(p.gpus - 1, p.offered_gpus) > limit
    assert plans["us-east"].peak_jobs_per_s == pytest.approx(20.0)
    assert plans["us-east"].gpus > plans["us-east"].offered_gpus


def test_plan_refuses_a_p99_below_the_model() -> None:
    with pytest.raises(ValueError, match="p99_s"):
        allowed_blocking(ServiceTime(4.0, 6.0), 5.0, 0.999)
