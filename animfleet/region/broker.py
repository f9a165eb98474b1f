"""A region's broker as the region's own code uses it: a Redis, or RabbitMQ with quorum queues.

The region builds every Celery message as kombu's Redis transport would push it
(:mod:`.messages`): with the broker in the store, its scripts push that text themselves. With a
broker apart from the store, :class:`BrokerLink` publishes the same text: onto the list of that
name in a Redis broker, or, in RabbitMQ, as an AMQP message with the same body, headers and
properties, persistent and confirmed by the broker before :meth:`BrokerLink.publish` returns.

Queues on RabbitMQ (``amqp://``, ``amqps://``) are quorum queues (:func:`task_queue`):
replicated by Raft on every node of the cluster, and a message returned more than
:func:`delivery_limit` times is dead-lettered to the region's ``<queue>.dead``, a plain quorum
queue (no limit, no dead-letter target of its own), read by :mod:`.broker_outbox`'s relay.
Workers and publishers declare them with the same arguments, as RabbitMQ requires.

Every publish is mandatory and confirmed: a message the broker cannot route (its queue was
deleted) comes back and raises :class:`BrokerUnavailable` (the queue is declared again on the
next try) instead of being confirmed and dropped. A refusal that no retry cures (access refused,
a queue declared with other arguments) raises :class:`BrokerRefused`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import threading
from collections.abc import Callable
from typing import Any

import redis
from amqp import exceptions as amqp_errors
from kombu import Connection, Producer, Queue

from animfleet.errors import AnimfleetError, TransientError
from animfleet.topology import Region

AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")
# Past the workers' own max_deliveries (at most 20), which fails a job that kills its worker
# first; the limit catches what never reaches a worker's start (a crash in Celery itself).
# Every process of a region must declare the same (RabbitMQ refuses a queue re-declared with
# other arguments): ANIMFLEET_BROKER_DELIVERY_LIMIT changes it fleet-wide.
DELIVERY_LIMIT = 25
DELIVERY_LIMIT_ENV = "ANIMFLEET_BROKER_DELIVERY_LIMIT"
# What RabbitMQ answers to an operation that fails the same way however often it is retried.
REFUSALS: tuple[type[Exception], ...] = (
    amqp_errors.AccessRefused,
    amqp_errors.NotFound,
    amqp_errors.PreconditionFailed,
    amqp_errors.NotAllowed,
)
CONFIRM_TIMEOUT_S = 10.0  # a publish not confirmed by then stays in the outbox for the relay


class BrokerUnavailable(TransientError):
    """The broker could not be reached or did not take the message; nothing was lost."""


class BrokerRefused(AnimfleetError):
    """The broker refused the operation for good (access refused, a queue's arguments differ,
    not found): retrying the same operation cannot succeed."""

    retryable = False


def delivery_limit() -> int:
    """How often a quorum queue delivers a message before it dead-letters it."""
    raw = os.environ.get(DELIVERY_LIMIT_ENV, str(DELIVERY_LIMIT))
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ValueError(f"{DELIVERY_LIMIT_ENV} must be a whole number >= 1, got {raw!r}")
    return limit


def is_amqp(url: str) -> bool:
    return url.split("://", 1)[0] in AMQP_SCHEMES


def has_direct_queues(broker_url: str) -> bool:
    """Whether workers consume a direct queue of their own beside the shared one
    (:mod:`.affinity`). Not on RabbitMQ: quorum queues take prefetch per consumer (no global
    QoS), so a worker consuming two queues could hold a second message, a job waiting behind
    a busy GPU while another is idle. There every job takes the shared queue."""
    return not is_amqp(broker_url)


def dead_letter_queue(region: Region) -> str:
    """Where the region's quorum queues put a message returned too often."""
    return f"{region.queue}.dead"


def quorum_arguments(dead_letters: str | None) -> dict[str, Any]:
    """A quorum queue's arguments: with ``dead_letters``, a work queue whose messages go there
    past the delivery limit; without, a plain one (the dead-letter queue itself)."""
    arguments: dict[str, Any] = {"x-queue-type": "quorum"}
    if dead_letters is not None:
        # At least once: RabbitMQ keeps the message until the dead-letter queue confirms it.
        arguments |= {
            "x-delivery-limit": delivery_limit(),
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dead_letters,
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        }
    return arguments


def task_queue(broker_url: str, name: str, dead_letters: str | None = None) -> Queue:
    """The Celery queue ``name`` as every worker and publisher declares it on ``broker_url``."""
    if not is_amqp(broker_url):
        return Queue(name)
    return Queue(name, durable=True, queue_arguments=quorum_arguments(dead_letters))


def region_queue(region: Region, name: str) -> Queue:
    """A GPU queue of ``region`` (its shared one or a worker's direct one), or its dead-letter
    queue."""
    dead = dead_letter_queue(region)
    return task_queue(region.broker_url, name, None if name == dead else dead)


def celery_broker_config(broker_url: str, redis_options: dict[str, Any]) -> dict[str, Any]:
    """The Celery settings that depend on the broker: ``redis_options`` are the Redis
    transport's; RabbitMQ confirms every publish and, with quorum queues, takes prefetch per
    consumer (global QoS is not supported)."""
    if not is_amqp(broker_url):
        return {"broker_transport_options": redis_options}
    return {
        "broker_transport_options": {"confirm_publish": True},
        "worker_detect_quorum_queues": True,
        # Celery declares its delayed-delivery levels when it sees quorum queues; the region
        # never sends an ETA (deferrals wait in the store), so they stay cheap classic ones.
        "broker_native_delayed_delivery_queue_type": "classic",
    }


class BrokerLink:
    """Publishes and moves messages on a region's broker apart from its store (thread-safe)."""

    def __init__(self, region: Region) -> None:
        self.region = region
        self._lock = threading.Lock()
        self._redis: redis.Redis | None = None
        self._connection: Connection | None = None
        self._producer: Producer | None = None
        self._declared: set[str] = set()
        self._returns: list[str] = []  # messages the broker returned since the last publish
        if not is_amqp(region.broker_url):
            self._redis = redis.Redis.from_url(
                region.broker_url, socket_timeout=5, socket_connect_timeout=2
            )

    # -- the operations ------------------------------------------------------------------------
    def publish(self, queue: str, message: str) -> None:
        """Put ``message`` (kombu Redis-transport JSON) on ``queue``; returns once the broker
        holds it. Raises :class:`BrokerUnavailable`."""
        if self._redis is not None:
            self._on_redis(lambda client: client.lpush(queue, message))
            return
        envelope = json.loads(message)
        properties = envelope["properties"]
        body = envelope["body"]
        raw = base64.b64decode(body) if properties.get("body_encoding") == "base64" else body
        self._on_amqp(
            lambda: self._send(
                queue,
                raw,
                envelope.get("headers") or {},
                envelope["content-type"],
                envelope["content-encoding"],
                properties,
            )
        )

    def move_all(self, source: str, target: str) -> int:
        """Move every message of ``source`` to ``target``, oldest first; returns how many.
        Redis: one atomic ``LMOVE`` each; RabbitMQ: get, publish (confirmed), then ack, so a
        crash in between leaves a copy in each (a duplicate delivery, harmless)."""
        if self._redis is not None:

            def move(client: redis.Redis) -> int:
                moved = 0
                while client.lmove(source, target, "RIGHT", "LEFT") is not None:
                    moved += 1
                return moved

            return int(self._on_redis(move))

        def move_amqp() -> int:
            moved = 0
            channel = self._channel()
            while (message := self._queue(source).bind(channel).get(no_ack=False)) is not None:
                self._send(
                    target,
                    message.body,
                    message.headers,
                    message.content_type,
                    message.content_encoding,
                    message.properties,
                )
                message.ack()
                moved += 1
            return moved

        return int(self._on_amqp(move_amqp))

    def depth(self, queue: str) -> int:
        """Messages ready on ``queue`` (0 for a queue that does not exist)."""
        if self._redis is not None:
            return int(self._on_redis(lambda client: client.llen(queue)))

        def count() -> int:
            try:
                answer = self._queue(queue).bind(self._channel()).queue_declare(passive=True)
            except self._channel_errors():
                self._reset()  # a passive declare of a missing queue closes the channel
                return 0
            return int(answer.message_count)

        return int(self._on_amqp(count))

    def take_dead(self, handle: Callable[[str], None], most: int = 100) -> int:
        """Hand the job id of each dead-lettered message (RabbitMQ only) to ``handle``, then
        ack it; returns how many."""
        if self._redis is not None:
            return 0

        def take() -> int:
            taken = 0
            queue = self._queue(dead_letter_queue(self.region))
            channel = self._channel()
            self._declare(queue)
            while taken < most and (message := queue.bind(channel).get(no_ack=False)):
                handle(str((message.headers or {}).get("id", "")))
                message.ack()
                taken += 1
            return taken

        return int(self._on_amqp(take))

    def close(self) -> None:
        with self._lock:
            self._reset()
            if self._redis is not None:
                self._redis.close()

    # -- RabbitMQ -------------------------------------------------------------------------------
    def _queue(self, name: str) -> Queue:
        return region_queue(self.region, name)

    def _channel(self) -> Any:
        if self._connection is None:
            self._connection = Connection(
                self.region.broker_url,
                transport_options={"confirm_publish": True},
                connect_timeout=3,
                heartbeat=0,
            )
            self._connection.ensure_connection(max_retries=0)
            self._producer = Producer(self._connection.default_channel, on_return=self._returned)
            self._declared.clear()
        return self._connection.default_channel

    def _declare(self, queue: Queue) -> None:
        if queue.name in self._declared:
            return
        dead = dead_letter_queue(self.region)
        if queue.name != dead:
            self._declare(self._queue(dead))  # where its messages go when returned too often
        queue.bind(self._channel()).declare()
        self._declared.add(queue.name)

    def _send(
        self,
        queue: str,
        body: bytes | str,
        headers: dict[str, Any],
        content_type: str,
        content_encoding: str,
        properties: dict[str, Any],
    ) -> None:
        self._channel()
        self._declare(self._queue(queue))
        assert self._producer is not None
        self._returns.clear()
        self._producer.publish(
            body,
            routing_key=queue,
            exchange="",
            headers=headers,
            content_type=content_type,
            content_encoding=content_encoding,
            delivery_mode=2,
            correlation_id=properties.get("correlation_id"),
            reply_to=properties.get("reply_to"),
            retry=False,
            mandatory=True,  # unroutable: returned (before its confirm), not dropped
            confirm_timeout=CONFIRM_TIMEOUT_S,
        )
        if self._returns:  # the queue is gone: _on_amqp resets, the next try declares it
            raise BrokerUnavailable(f"{queue}: returned unroutable ({self._returns[0]})")

    def _returned(self, error: Exception, exchange: str, routing_key: str, message: Any) -> None:
        del exchange, routing_key, message
        self._returns.append(str(error))

    def _channel_errors(self) -> tuple[type[BaseException], ...]:
        assert self._connection is not None
        return tuple(self._connection.channel_errors)

    def _on_amqp(self, operation: Callable[[], Any]) -> Any:
        with self._lock:
            try:
                return operation()
            except REFUSALS as error:
                self._reset()  # the channel is closed; the connection may be
                raise BrokerRefused(f"{type(error).__name__}: {error}") from error
            except Exception as error:  # connection and channel errors of kombu and py-amqp
                self._reset()
                if isinstance(error, BrokerUnavailable):
                    raise
                raise BrokerUnavailable(f"{type(error).__name__}: {error}") from error

    def _reset(self) -> None:
        if self._connection is not None:
            # A dead connection may fail to close: it is dropped anyway.
            with contextlib.suppress(Exception):
                self._connection.release()
            with contextlib.suppress(Exception):
                self._connection.collect()  # whatever release left open (a refused channel's)
        self._connection, self._producer = None, None
        self._declared.clear()

    # -- Redis ---------------------------------------------------------------------------------
    def _on_redis(self, operation: Callable[[redis.Redis], Any]) -> Any:
        assert self._redis is not None
        try:
            return operation(self._redis)
        except redis.RedisError as error:
            raise BrokerUnavailable(str(error)) from error
