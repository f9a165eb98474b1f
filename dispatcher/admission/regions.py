"""Region choice: which region takes a new job now, and what to do when none can.

A region admits a job while the jobs it holds (queued + running) stay below one per live GPU
plus a small ``allowance``. :func:`choose_region` draws the region from the routing table among
the admissible ones. When none is admissible the job waits in its home region's backlog
(``backlog``, the default; :class:`BacklogFull` only when a cap is reached). Without the
backlog (the earlier policy, kept for comparison) the dispatcher retries on a :class:`RetrySchedule`
(tenacity full-jitter exponential backoff, stopped before the retry budget runs out) and finally
raises :class:`AtCapacity` with a Retry-After hint. While the regions a source sends to are hot,
a share of new jobs waits a short random :func:`execution_delay_s` before admission so a burst
does not start (and finish, and retry) in lockstep.

The same functions drive production (``admit`` around the real submit) and the simulator
(which asks :meth:`RetrySchedule.next_sleep` for each simulated wait).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence

from tenacity import RetryCallState, Retrying, retry_if_exception_type
from tenacity.before import before_nothing
from tenacity.stop import stop_after_attempt, stop_base, stop_before_delay
from tenacity.wait import wait_base, wait_fixed, wait_random_exponential

from animfleet.errors import TransientError
from animfleet.region.admission import admission_limit
from dispatcher.admission.settings import AdmissionSettings
from dispatcher.errors import DispatcherError
from dispatcher.routing.table import RoutingTable


class RegionsFull(DispatcherError, TransientError):
    """No region the routing table allows for this source can take a job right now."""


class AtCapacity(DispatcherError, TransientError):
    """Every reachable region stayed full for the whole retry budget.

    ``retry_after_s`` (whole seconds, at least 1) is when trying again is worth it; the HTTP
    gateway sends it as ``Retry-After``.
    """

    def __init__(self, source: str, attempts: int, retry_after_s: float) -> None:
        super().__init__(
            f"no GPU free for jobs from region {source!r} after {attempts} attempts; "
            f"retry after {retry_after_s:g} s"
        )
        self.source = source
        self.attempts = attempts
        self.retry_after_s = retry_after_s


class BacklogFull(DispatcherError, TransientError):
    """A backlog cap was reached (``cap``: ``tenant`` or ``region``); nothing was stored.

    ``retry_after_s`` (whole seconds, at least 1) is when trying again is worth it; the HTTP
    gateway answers 429 ``backlog_full`` with it as ``Retry-After``.
    """

    def __init__(self, region: str, cap: str, limit: int | None, retry_after_s: float) -> None:
        super().__init__(
            f"the {cap} backlog cap ({limit} jobs) of region {region!r} is reached; "
            f"retry after {retry_after_s:g} s"
        )
        self.region, self.cap, self.limit = region, cap, limit
        self.retry_after_s = retry_after_s


def choose_region(
    table: RoutingTable,
    source: str,
    in_flight: Mapping[str, int],
    live_workers: Mapping[str, int],
    rng: random.Random,
    settings: AdmissionSettings,
    siblings: Sequence[str] = (),
) -> str | None:
    """The region for one new job from ``source``, or ``None`` when every allowed one is full.

    When ``source`` is a cell, a sibling cell (``siblings``) with room comes before any other
    region: the one with the most room, should the table's draw leave the region.

    Args:
        table: the routing table in force (possibly a few seconds old).
        source: the job's home region.
        in_flight: the dispatcher's view of jobs (queued + running) per region.
        live_workers: live GPU workers per region.
        rng: the random source for the weighted draw.
        settings: gives the admission limit.
        siblings: the other cells of ``source``'s region (none for a region not split).
    """

    def room(region: str) -> int:
        limit = admission_limit(live_workers.get(region, 0), settings.allowance)
        return limit - in_flight.get(region, 0)

    def admissible(region: str) -> bool:
        return room(region) > 0

    chosen = table.choose(source, rng, admissible)
    if chosen == source or chosen in siblings:
        return chosen
    # A move within the region costs no distance and keeps the job under its region's rules.
    open_siblings = [cell for cell in siblings if admissible(cell)]
    if open_siblings:
        return max(open_siblings, key=lambda cell: (room(cell), cell))
    return chosen


def source_utilization(
    table: RoutingTable, source: str, in_flight: Mapping[str, int], live_workers: Mapping[str, int]
) -> float:
    """Share-weighted utilization of the regions ``source`` sends to (infinite if none is live)."""
    total = 0.0
    for target, share in table.shares.get(source, {source: 1.0}).items():
        live = live_workers.get(target, 0)
        total += share * (in_flight.get(target, 0) / live if live else math.inf)
    return total


def execution_delay_s(utilization: float, rng: random.Random, settings: AdmissionSettings) -> float:
    """Seconds to hold a new job before admission: U(0, max) for a share of jobs while hot, else 0.

    Hold the job in the dispatcher, not with a Celery countdown: an ETA message is reserved by
    the worker that fetches it and would idle that GPU for the whole delay.
    """
    if utilization < settings.hot_utilization or rng.random() >= settings.execution_delay_share:
        return 0.0
    return rng.uniform(0.0, settings.execution_delay_max_s)


class RetrySchedule:
    """When to try a full admission again: one tenacity ``wait`` and ``stop`` pair.

    Production wraps its submit in :meth:`retrying` (or calls :func:`admit`); the simulator asks
    :meth:`next_sleep` for each simulated wait, so both run the same tenacity objects. Tenacity
    draws its jitter from Python's global ``random`` module.
    """

    def __init__(self, wait: wait_base, stop: stop_base, window_s: Callable[[int], float]):
        self.wait = wait
        self.stop = stop
        self._window_s = window_s
        self._owner = Retrying(wait=wait, stop=stop)

    @classmethod
    def backoff(cls, settings: AdmissionSettings) -> RetrySchedule:
        """Full-jitter exponential backoff under the retry budget (the production schedule)."""
        initial, cap = settings.backoff_initial_s, settings.backoff_max_s
        return cls(
            wait=wait_random_exponential(multiplier=initial, max=cap),
            stop=stop_before_delay(settings.retry_budget_s)
            | stop_after_attempt(settings.max_attempts),
            window_s=lambda attempt: min(cap, initial * 2.0 ** (attempt - 1)),
        )

    @classmethod
    def immediate(cls, interval_s: float, max_attempts: int) -> RetrySchedule:
        """Retry after a fixed probe round trip, no backoff: the naive baseline of the seeds."""
        return cls(
            wait=wait_fixed(interval_s),
            stop=stop_after_attempt(max_attempts),
            window_s=lambda attempt: interval_s,
        )

    def next_sleep(self, attempt_number: int, elapsed_s: float) -> float | None:
        """Seconds to wait after failed attempt ``attempt_number`` (1-based), ``elapsed_s`` after
        the first attempt started; ``None`` when the schedule gives up."""
        state = self._state(attempt_number, elapsed_s)
        state.upcoming_sleep = self.wait(state)
        return None if self.stop(state) else state.upcoming_sleep

    def gives_up(self, attempt_number: int, elapsed_s: float, sleep_s: float) -> bool:
        """Whether the schedule stops after attempt ``attempt_number`` given a planned sleep
        (the fluid simulator asks with the mean sleep of the jitter window)."""
        state = self._state(attempt_number, elapsed_s)
        state.upcoming_sleep = sleep_s
        return bool(self.stop(state))

    def window_s(self, attempt_number: int) -> float:
        """The widest sleep after failed attempt ``attempt_number`` (the jitter window)."""
        return self._window_s(attempt_number)

    def _state(self, attempt_number: int, elapsed_s: float) -> RetryCallState:
        state = RetryCallState(retry_object=self._owner, fn=None, args=(), kwargs={})
        state.attempt_number = attempt_number
        state.start_time = 0.0
        state.outcome_timestamp = elapsed_s
        return state

    def retry_after_s(self, attempt_number: int) -> float:
        """A Retry-After hint after ``attempt_number`` failed attempts: the jitter window the
        next retry would have used, rounded up to whole seconds, at least 1."""
        return float(max(1, math.ceil(self._window_s(attempt_number))))

    def retrying(
        self,
        sleep: Callable[[float], None] = time.sleep,
        before: Callable[[RetryCallState], None] | None = None,
    ) -> Retrying:
        """A tenacity ``Retrying`` that retries :class:`RegionsFull` on this schedule
        (``before`` runs before each attempt, as tenacity's own ``before``)."""
        return Retrying(
            wait=self.wait,
            stop=self.stop,
            retry=retry_if_exception_type(RegionsFull),
            sleep=sleep,
            before=before or before_nothing,
            reraise=True,
        )


def admit(
    source: str,
    choose: Callable[[], str | None],
    schedule: RetrySchedule,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Call ``choose`` until it names a region, waiting between attempts as ``schedule`` says.

    ``choose`` is typically ``lambda: choose_region(table, source, view(), live(), rng, s)``
    with a fresh view per attempt. Returns the region; raises :class:`AtCapacity` when the
    schedule gives up.
    """
    attempts = 0

    def attempt() -> str:
        nonlocal attempts
        attempts += 1
        region = choose()
        if region is None:
            raise RegionsFull(source)
        return region

    # Most jobs find room at once, so the first attempt runs without tenacity's machinery
    # (building and driving a Retrying costs ~10 us, a fifth of a submit's Python time). Only
    # a refused first attempt enters the Retrying loop, which replays that refusal as its
    # attempt 1 and dates its start back to it: attempt numbers, sleeps and the retry budget
    # are exactly those of one Retrying call around every attempt.
    started = time.monotonic()
    try:
        return attempt()
    except RegionsFull as refused:
        first: list[RegionsFull] = [refused]

    def again() -> str:
        if first:
            raise first.pop()
        return attempt()

    def backdate(state: RetryCallState) -> None:
        if state.attempt_number == 1:
            state.start_time = started

    try:
        return schedule.retrying(sleep, before=backdate)(again)
    except RegionsFull:
        raise AtCapacity(source, attempts, schedule.retry_after_s(attempts)) from None
