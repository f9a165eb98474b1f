"""What each worker holds warm, and its own queue: so a job can go to a worker that needs no load.

A worker's add-ons (and, with a template cache, the images it has prepared) sit in its memory;
a job that finds them there skips their loading. Each worker republishes what it holds with
every heartbeat, as *things*: ``addon:<name>``, ``template:<sha256 of the input image>``. Each
thing has a sorted set of the workers holding it, scored by when the claim lapses, so a worker
that evicts a thing or dies stops claiming it within a heartbeat TTL.

Every GPU worker also consumes a direct queue of its own, ``<region queue>.w.<worker>``, before
the region's shared one. Admission (:mod:`.backlog`) pushes a new job onto a holder's direct
queue when that worker is live, idle and has nothing queued there yet, else onto the shared
queue; the choice is made inside the admission script, so two dispatchers cannot both hand a
second job to the same idle worker. A worker that leaves (its heartbeat lapses, it drains)
leaves messages in its direct queue: :meth:`DirectQueues.rescue` moves them to the shared queue.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import redis

from animfleet.addons import AddonUse
from animfleet.region.keys import DIRECT_QUEUES, HELD_BY, PREFETCH_CHANNEL
from animfleet.topology import Region


class QueueMover(Protocol):
    """What a rescue needs of a broker apart from the store."""

    def move_all(self, source: str, target: str) -> int: ...

    def depth(self, queue: str) -> int: ...


# Holders a dispatcher offers the admission script, best first.
MAX_CANDIDATES = 4


def addon_thing(name: str) -> str:
    return f"addon:{name}"


def image_digest(image: bytes) -> str:
    """What a worker's template cache keys an input image by: the SHA-256 of its bytes."""
    return hashlib.sha256(image).hexdigest()


def template_thing(digest: str) -> str:
    """The thing a worker holds once it has prepared the image whose digest is ``digest``."""
    return f"template:{digest}"


def things_of(image_sha256: str | None, addons: Sequence[AddonUse] = ()) -> list[str]:
    """What a job would find warm on a worker: its image's template (by the digest on its
    record; none for a record from before digests were kept) and its add-ons."""
    template = [template_thing(image_sha256)] if image_sha256 is not None else []
    return [*template, *(addon_thing(use.name) for use in addons)]


def direct_queue(region: Region, worker: str) -> str:
    """The Celery queue only ``worker`` consumes."""
    return direct_queue_of(region.queue, worker)


def direct_queue_of(shared_queue: str, worker: str) -> str:
    """The direct queue of ``worker`` in the region whose shared queue is ``shared_queue``."""
    return f"{shared_queue}.w.{worker}"


class Holdings:
    """``held-by:<region>:<thing>``: worker -> when its claim to hold the thing lapses."""

    def __init__(self, client: redis.Redis, region: str) -> None:
        self.redis, self.region = client, region

    def key(self, thing: str) -> str:
        return f"{HELD_BY}{self.region}:{thing}"

    def publish(self, worker: str, things: Iterable[str], ttl_s: float) -> None:
        """Claim ``things`` for ``worker`` until ``ttl_s`` from now (one round trip)."""
        lapse = time.time() + ttl_s
        ms = int(ttl_s * 1000) + 1000
        with self.redis.pipeline(transaction=False) as pipe:
            for thing in things:
                pipe.zadd(self.key(thing), {worker: lapse})
                pipe.pexpire(self.key(thing), ms)  # a thing nobody holds any more goes away
            pipe.execute()

    def withdraw(self, worker: str, things: Iterable[str]) -> None:
        """Drop ``worker``'s claims at once (it evicted them, or it is leaving)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for thing in things:
                pipe.zrem(self.key(thing), worker)
            pipe.execute()

    def holders(self, things: Sequence[str], now: float | None = None) -> Counter[str]:
        """How many of ``things`` each worker holds now (one round trip)."""
        stamp = time.time() if now is None else now
        with self.redis.pipeline(transaction=False) as pipe:
            for thing in things:
                pipe.zrangebyscore(self.key(thing), stamp, "+inf")
            answers = pipe.execute()
        counts: Counter[str] = Counter()
        for members in answers:
            counts.update(m.decode() if isinstance(m, bytes) else str(m) for m in members)
        return counts

    def candidates(self, things: Sequence[str], limit: int = MAX_CANDIDATES) -> list[str]:
        """Workers holding most of ``things``, best first (ties by name, so dispatchers agree):
        the order in which the admission script (:mod:`.admission`) offers a job to them."""
        counts = self.holders(things)
        return sorted(counts, key=lambda worker: (-counts[worker], worker))[:limit]


class DirectQueues:
    """``direct-queues:<region>``: the workers that consume a direct queue of their own."""

    def __init__(self, client: redis.Redis, region: Region) -> None:
        self.redis, self.region = client, region
        self.key = DIRECT_QUEUES + region.name

    def queue(self, worker: str) -> str:
        return direct_queue(self.region, worker)

    def register(self, worker: str) -> str:
        """Record that ``worker`` consumes its direct queue; returns the queue's name."""
        self.redis.sadd(self.key, worker)
        return direct_queue(self.region, worker)

    def rescue(self, consuming: Callable[[str], bool]) -> list[str]:
        """Move the messages of every direct queue whose worker is no longer ``consuming`` to
        the shared queue, oldest first, and forget those workers; returns the moved messages.

        Each move is one atomic ``LMOVE``, so a worker popping at the same moment gets a
        message or misses it, never both.
        """
        moved: list[str] = []
        for worker, queue in self._gone(consuming):
            # Messages go in on the left and are popped from the right: the right is oldest.
            while (
                message := self.redis.lmove(queue, self.region.queue, "RIGHT", "LEFT")
            ) is not None:
                moved.append(message.decode() if isinstance(message, bytes) else str(message))
            self._forget(worker, pushed_since=self.redis.llen(queue))
        return moved

    def rescue_on(self, broker: QueueMover, consuming: Callable[[str], bool]) -> int:
        """:meth:`rescue` for a broker apart from the store
        (:class:`animfleet.region.broker.BrokerLink`); returns how many messages moved."""
        moved = 0
        for worker, queue in self._gone(consuming):
            moved += broker.move_all(queue, self.region.queue)
            self._forget(worker, pushed_since=broker.depth(queue))
        return moved

    def _gone(self, consuming: Callable[[str], bool]) -> list[tuple[str, str]]:
        """(worker, its direct queue) of each registered worker no longer ``consuming``."""
        workers = [
            raw.decode() if isinstance(raw, bytes) else str(raw)
            for raw in self.redis.smembers(self.key)
        ]
        return [(w, direct_queue(self.region, w)) for w in workers if not consuming(w)]

    def _forget(self, worker: str, pushed_since: int) -> None:
        self.redis.srem(self.key, worker)
        if pushed_since:  # pushed between the last move and the SREM: look again next time
            self.redis.sadd(self.key, worker)


def prefetch_channel(region: str) -> str:
    return PREFETCH_CHANNEL + region


def announce_prefetch(
    client: redis.Redis, region: str, addons: Sequence[str], worker: str | None
) -> None:
    """Ask ``worker`` (``None``: every idle worker of the region) to start loading ``addons``
    now, while the job that needs them waits in a queue. Best effort: a lost notice only means
    the load happens when the job starts."""
    notice = {"addons": list(addons), "worker": worker}
    client.publish(prefetch_channel(region), json.dumps(notice))


def parse_prefetch(data: bytes | str) -> tuple[list[str], str | None]:
    """(add-on names, worker or ``None``) of a notice; raises ValueError on a malformed one."""
    notice = json.loads(data)
    addons, worker = notice.get("addons"), notice.get("worker")
    if not isinstance(addons, list) or not all(isinstance(a, str) for a in addons):
        raise ValueError(f"prefetch notice without a list of add-on names: {notice!r}")
    if worker is not None and not isinstance(worker, str):
        raise ValueError(f"prefetch notice with a bad worker: {notice!r}")
    return addons, worker
