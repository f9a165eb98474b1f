"""A worker's prefetch listener and what it claims to hold, on a real Redis."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from animfleet.region.affinity import announce_prefetch, image_digest
from workers.prefetch import PrefetchListener, held_things


@dataclass
class Loads:
    """Records what the listener asked to load (the add-on store's own loading is tested in
    tests/workers/model)."""

    asked: list[list[str]] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)

    def prefetch(self, names: list[str]) -> Any:
        self.asked.append(list(names))
        self.arrived.set()


@dataclass
class State:
    job_id: str | None = None


def test_notices_for_this_worker_or_any_idle_one_start_loads(redis_client: redis.Redis) -> None:
    loads, state = Loads(), State()
    listener = PrefetchListener(redis_client, "pf", "me", loads, state)
    assert listener.handle(b'{"addons": ["shake"], "worker": "me"}')
    assert not listener.handle(b'{"addons": ["orbit"], "worker": "other"}')
    assert listener.handle(b'{"addons": ["pulse"], "worker": null}')
    state.job_id = "busy-with-this"
    assert not listener.handle(b'{"addons": ["pulse"], "worker": null}')  # another takes it
    assert listener.handle(b'{"addons": ["orbit"], "worker": "me"}')  # queued for me: load
    assert not listener.handle(b"not json")
    assert loads.asked == [["shake"], ["pulse"], ["orbit"]]


def test_the_listener_thread_acts_on_published_notices(redis_client: redis.Redis) -> None:
    loads = Loads()
    listen_until_loaded(redis_client, loads)
    assert loads.asked[0] == ["shake"]


def listen_until_loaded(client: redis.Redis, loads: Loads) -> None:
    """Run a listener for ``loads`` until a notice made it load."""
    listener = PrefetchListener(client, "pf", "me", loads, State())
    listener.start()
    try:
        assert listener.subscribed.wait(10)
        deadline = time.monotonic() + 10
        # The subscription reaches the server just after ``subscribed`` is set: republish until
        # a notice loads (each is idempotent: a held add-on is not loaded twice).
        while not loads.arrived.wait(0.2):
            assert time.monotonic() < deadline, "no notice loaded"
            announce_prefetch(client, "pf", ["shake"], "me")
    finally:
        listener.stop()


class FailingLoads(Loads):
    """Loads whose first ask raises, as an add-on that fails to load would."""

    def prefetch(self, names: list[str]) -> Any:
        if not self.asked:
            self.asked.append([])
            raise ValueError("injected load failure")
        return super().prefetch(names)


def test_a_notice_that_fails_to_load_does_not_end_the_listening(
    redis_client: redis.Redis,
) -> None:
    loads = FailingLoads()
    listen_until_loaded(redis_client, loads)  # the first notice to land raises; a later loads
    assert loads.asked[0] == [] and loads.asked[1] == ["shake"]


class _Held:
    def __init__(self, names: list[str]) -> None:
        self.names = names

    def held(self) -> list[str]:
        return self.names


def test_held_things_name_addons_and_templates() -> None:
    class Animator:
        addons = _Held(["shake"])
        templates = _Held([image_digest(b"img")])

    assert held_things(Animator()) == ["addon:shake", f"template:{image_digest(b'img')}"]
    assert held_things(object()) == []
