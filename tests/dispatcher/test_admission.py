"""Admission: the per-GPU limit and its allowance, backoff under the budget, AtCapacity."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from animfleet.region.admission import admission_limit
from dispatcher.admission import (
    AdmissionSettings,
    AtCapacity,
    RegionsFull,
    RetrySchedule,
    admit,
    choose_region,
    execution_delay_s,
)
from dispatcher.routing import RoutingTable


@given(
    live=st.integers(0, 500),
    allowance=st.floats(0, 0.2),
    admissions=st.integers(0, 1000),
    seed=st.integers(0, 1000),
)
def test_admission_never_exceeds_the_allowance(
    live: int, allowance: float, admissions: int, seed: int
) -> None:
    settings = AdmissionSettings(allowance=allowance)
    table = RoutingTable({"eu": {"eu": 0.5, "us": 0.5}})
    in_flight = {"eu": 0, "us": 0}
    workers = {"eu": live, "us": live // 2}
    rng = random.Random(seed)
    for _ in range(admissions):
        region = choose_region(table, "eu", in_flight, workers, rng, settings)
        if region is None:
            break
        in_flight[region] += 1
    for region, count in in_flight.items():
        assert count <= workers[region] * (1 + allowance)
        assert count <= admission_limit(workers[region], allowance)


def test_strict_limit_is_one_job_per_gpu() -> None:
    assert admission_limit(10, allowance=0) == 10
    assert admission_limit(100, allowance=0.05) == 105
    assert admission_limit(0, allowance=0.05) == 0


def test_backoff_stops_before_the_budget_and_raises_at_capacity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = AdmissionSettings(retry_budget_s=5.0, max_attempts=100)
    schedule = RetrySchedule.backoff(settings)
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    random.seed(3)
    with pytest.raises(AtCapacity) as caught:
        admit("eu", lambda: None, schedule, sleep=sleep)
    assert sum(slept) < 5.0
    assert len(slept) > 3
    assert caught.value.attempts == len(slept) + 1
    assert caught.value.retry_after_s >= 1 and caught.value.retry_after_s == int(
        caught.value.retry_after_s
    )
    assert all(0 <= s <= settings.backoff_max_s for s in slept)


def test_admit_returns_the_first_region_found() -> None:
    answers = iter([None, None, "us"])
    schedule = RetrySchedule.backoff(AdmissionSettings())
    assert admit("eu", lambda: next(answers), schedule, sleep=lambda s: None) == "us"


def test_a_first_attempt_with_room_does_not_enter_tenacity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unused(*args: object, **kwargs: object) -> None:
        raise AssertionError("Retrying built for an admitted first attempt")

    schedule = RetrySchedule.backoff(AdmissionSettings())
    monkeypatch.setattr(schedule, "retrying", unused)
    assert admit("eu", lambda: "eu", schedule) == "eu"


@pytest.mark.parametrize("first_attempt_s", [0.0, 3.0])
def test_retries_match_one_plain_retrying_call_around_every_attempt(
    monkeypatch: pytest.MonkeyPatch, first_attempt_s: float
) -> None:
    """Sleeps, attempt count and budget (which counts the first attempt's own time) are those
    of tenacity driving every attempt, as before the first attempt got its fast path."""
    settings = AdmissionSettings(retry_budget_s=5.0, max_attempts=100)
    schedule = RetrySchedule.backoff(settings)
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])

    def run(use_admit: bool) -> tuple[list[float], int]:
        clock[0] = 1000.0
        slept: list[float] = []
        calls = [0]

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            clock[0] += seconds

        def choose() -> str | None:
            calls[0] += 1
            if calls[0] == 1:
                clock[0] += first_attempt_s
            return None

        random.seed(11)
        if use_admit:
            with pytest.raises(AtCapacity) as caught:
                admit("eu", choose, schedule, sleep=sleep)
            assert caught.value.attempts == calls[0]
        else:

            def attempt() -> str:
                region = choose()
                if region is None:
                    raise RegionsFull("eu")
                return region

            with pytest.raises(RegionsFull):
                schedule.retrying(sleep)(attempt)
        return slept, calls[0]

    assert run(use_admit=True) == run(use_admit=False)
    slept, _ = run(use_admit=True)
    assert first_attempt_s + sum(slept) < 5.0


def test_simulated_schedule_matches_tenacity_windows() -> None:
    settings = AdmissionSettings(backoff_initial_s=0.5, backoff_max_s=2.0, retry_budget_s=60)
    schedule = RetrySchedule.backoff(settings)
    random.seed(0)
    for attempt in range(1, 8):
        sleeps = [schedule.next_sleep(attempt, 0.0) for _ in range(200)]
        window = min(2.0, 0.5 * 2 ** (attempt - 1))
        assert all(s is not None and 0 <= s <= window for s in sleeps)
        assert max(s for s in sleeps if s is not None) > 0.8 * window
    assert schedule.next_sleep(2, 59.9) is None  # past the budget


def test_naive_schedule_retries_at_once_until_the_attempt_cap() -> None:
    schedule = RetrySchedule.immediate(0.05, 3)
    assert schedule.next_sleep(1, 0.0) == 0.05
    assert schedule.next_sleep(3, 0.1) is None


def test_execution_delay_only_while_hot_and_for_a_share() -> None:
    settings = AdmissionSettings(execution_delay_share=0.25, execution_delay_max_s=1.0)
    rng = random.Random(5)
    assert all(execution_delay_s(0.5, rng, settings) == 0 for _ in range(1000))
    delays = [execution_delay_s(0.95, rng, settings) for _ in range(4000)]
    delayed = [d for d in delays if d > 0]
    assert len(delayed) / len(delays) == pytest.approx(0.25, abs=0.03)
    assert max(delayed) <= 1.0


def test_settings_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="backoff_max_s"):
        AdmissionSettings(backoff_initial_s=2, backoff_max_s=1)
