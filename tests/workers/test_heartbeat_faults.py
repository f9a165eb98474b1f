"""The heartbeat thread through faults that are not store errors (real Redis): it beats on
through a passing one, and stops the process (``on_fatal``) when it can no longer vouch for
its runs: beats failing for a whole TTL, or a run held past the hard time limit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from animfleet.region.runs import Run
from animfleet.region.workers import WorkerRegistry
from workers.heartbeat import Heartbeat


class Fatal:
    """Records the reason the heartbeat asked the process to stop."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.called = threading.Event()

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)
        self.called.set()


class Failing:
    """Holdings whose reads after the first (the beat ``start`` runs in the caller's thread)
    raise ValueError ``times`` times (``inf``: every read)."""

    def __init__(self, times: float) -> None:
        self.times, self.reads, self.raised = times, 0, 0

    def __call__(self) -> list[str]:
        self.reads += 1
        if self.reads > 1 and self.raised < self.times:
            self.raised += 1
            raise ValueError("injected")
        return []


@pytest.fixture
def fatal() -> Fatal:
    return Fatal()


@pytest.fixture
def make_beat(redis_client: redis.Redis, fatal: Fatal) -> Iterator[Callable[..., Heartbeat]]:
    beats: list[Heartbeat] = []

    def make(**options: object) -> Heartbeat:
        beat = Heartbeat(redis_client, "hf", "gpu-f", "v1", on_fatal=fatal, **options)  # type: ignore[arg-type]
        beats.append(beat)
        return beat

    yield make
    for beat in beats:
        beat.stop()


def test_a_beat_that_raises_is_logged_and_the_next_beats_go_on(
    make_beat: Callable[..., Heartbeat], fatal: Fatal, redis_client: redis.Redis
) -> None:
    holdings = Failing(3)
    beat = make_beat(interval_s=0.05, ttl_s=2.0, holdings=holdings)
    beat.start()
    deadline = time.monotonic() + 10
    while holdings.reads < 1 + 3 + 2:  # the first beat, the three faults, two beats after
        assert time.monotonic() < deadline, f"the heartbeat stopped after {holdings.reads} reads"
        time.sleep(0.01)
    assert holdings.raised == 3 and beat.failures == 0
    assert not fatal.called.is_set()
    assert WorkerRegistry(redis_client, "hf").is_live("gpu-f")


def test_beats_failing_for_a_whole_ttl_stop_the_process(
    make_beat: Callable[..., Heartbeat], fatal: Fatal, redis_client: redis.Redis
) -> None:
    beat = make_beat(interval_s=0.05, ttl_s=0.5, holdings=Failing(float("inf")))
    beat.start()
    assert fatal.called.wait(10), "the heartbeat went on failing without stopping the process"
    assert "beats failed for 0.5s" in fatal.reasons[0] and "injected" in fatal.reasons[0]
    assert not WorkerRegistry(redis_client, "hf").live()  # out of the capacity count at once


def test_a_run_held_past_the_hard_limit_stops_the_process(
    make_beat: Callable[..., Heartbeat], fatal: Fatal
) -> None:
    beat = make_beat(interval_s=0.05, ttl_s=0.2, hard_limit_s=0.3, slots=2)
    beat.start()
    beat.busy("hf.hung", slot=1)
    beat.hold(Run("hf.hung", "gpu-f/1", "token"), slot=1)
    held = time.monotonic()
    assert fatal.called.wait(10), "a hung run kept its slot's heartbeat going"
    assert time.monotonic() - held >= 0.5  # the hard limit and one TTL
    assert "gpu-f/1 held job hf.hung past 0.3s" in fatal.reasons[0]
