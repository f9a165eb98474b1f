"""Loading a queued job's add-ons before it starts, and what a worker tells placement it holds.

A dispatcher that admits a job with add-ons publishes a notice (:func:`animfleet.region.
affinity.announce_prefetch`) naming the worker whose direct queue took it, or none when it went
to the shared queue. The named worker, or else every idle one (one of them takes the job next),
starts loading the add-ons it lacks in the background, so the load overlaps the time the job
spends queued instead of following it.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import redis
import structlog

from animfleet.region.affinity import (
    addon_thing,
    parse_prefetch,
    prefetch_channel,
    template_thing,
)

log = structlog.stdlib.get_logger("animfleet.worker.prefetch")


class Prefetcher(Protocol):
    def prefetch(self, names: list[str]) -> Any: ...


class Busy(Protocol):
    job_id: str | None


def held_things(animator: Any) -> list[str]:
    """What ``animator`` holds warm, as placement's things: its add-ons in memory and, with a
    template cache, the images it has prepared (``template:<sha256>``)."""
    things: list[str] = []
    addons = getattr(animator, "addons", None)
    if addons is not None:
        things += [addon_thing(name) for name in addons.held()]
    templates = getattr(animator, "templates", None)
    if templates is not None:
        things += [template_thing(digest) for digest in templates.held()]
    return things


class PrefetchListener:
    """A daemon thread acting on the region's prefetch notices for one worker."""

    def __init__(
        self, client: redis.Redis, region: str, worker: str, addons: Prefetcher, state: Busy
    ) -> None:
        self.client, self.region, self.worker = client, region, worker
        self.addons, self.state = addons, state
        self.loaded = 0  # notices acted on, for tests and logs
        self.subscribed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="addon-prefetch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and wait for the thread (at most one ``get_message`` timeout), so
        nothing reads the client's connection once its owner closes it."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def handle(self, data: bytes | str) -> bool:
        """Act on one notice; True when it asked this worker to load."""
        try:
            names, worker = parse_prefetch(data)
        except ValueError as error:
            log.warning("prefetch.bad_notice", error=str(error))
            return False
        if worker != self.worker and (worker is not None or self.state.job_id is not None):
            return False
        self.addons.prefetch(names)
        self.loaded += 1
        return True

    def _handle_logged(self, data: bytes | str) -> None:
        """:meth:`handle`, whatever it raises: one notice that fails to load (a bad add-on, a
        storage error) must not end the listening for every later one."""
        try:
            self.handle(data)
        except Exception:
            log.exception("prefetch.failed", worker=self.worker)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                pubsub = self.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
                with pubsub:
                    pubsub.subscribe(prefetch_channel(self.region))
                    self.subscribed.set()
                    while not self._stop.is_set():
                        message = pubsub.get_message(timeout=1.0)
                        if message is not None:
                            self._handle_logged(message["data"])
            except redis.RedisError as error:  # the broker is away: notices are best effort
                self.subscribed.clear()
                log.warning("prefetch.unsubscribed", error=str(error))
                self._stop.wait(1.0)
