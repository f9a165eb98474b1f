"""A Lua script on the hot path, called in one round trip with as little client work as it can.

redis-py's ``Script`` call goes through the client's command machinery: a pooled connection
checked for stray data with a ``poll`` each time, retry wrappers and metrics hooks, about twice
the client CPU of the round trip itself for a submit's admission. :class:`HotScript` keeps a few
connections of its own (one per thread calling at once) and writes ``EVALSHA``, packed by
hiredis, straight to one.
Whatever goes wrong (an unknown script, a broken connection) is handed to redis-py's ``Script``
with the client's retries, so the outcome is the one the plain call would have had. A cluster
client (:mod:`animfleet.region.store_client`) routes by slot: it gets the plain call.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import redis
from hiredis import pack_command
from redis.exceptions import NoScriptError


class HotScript:
    """``script(keys=..., args=...)`` for one script registered with ``client``."""

    def __init__(self, client: redis.Redis, source: str) -> None:
        self.script = client.register_script(source)
        # One server behind one pool: a cluster client (typed as Redis) has neither.
        self._pool = client.connection_pool if isinstance(client, redis.Redis) else None
        # redis-py's connections (untyped); list.pop/append are atomic: thread-safe.
        self._idle: list[Any] = []
        self._pid = os.getpid()

    def __call__(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        if self._pool is None:
            return self.script(keys=keys, args=args)
        if self._pid != os.getpid():  # a forked child never shares its parent's sockets
            self._idle, self._pid = [], os.getpid()
        connection: Any
        try:
            connection = self._idle.pop()
        except IndexError:
            connection = self._pool.connection_class(**self._pool.connection_kwargs)
        try:
            command = pack_command(("EVALSHA", self.script.sha, len(keys), *keys, *args))
            connection.send_packed_command([command])  # pings first if idle long
            answer = connection.read_response()
        except NoScriptError:  # the reply was read whole: the connection stays usable
            self._idle.append(connection)
            return self.script(keys=keys, args=args)  # loads the script, then runs it
        except redis.ResponseError:
            self._idle.append(connection)
            raise
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            connection.disconnect()
            return self.script(keys=keys, args=args)  # with the client's retries
        except BaseException:
            connection.disconnect()  # a reply may be left unread: never reuse it
            raise
        self._idle.append(connection)
        return answer
