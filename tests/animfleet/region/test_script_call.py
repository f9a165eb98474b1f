"""The lean script call answers as redis-py's ``Script`` does, on a real Redis, and recovers
from what breaks a connection or the script cache."""

from __future__ import annotations

import threading

import pytest
import redis

from animfleet.region.script_call import HotScript
from animfleet.region.store_client import store_client
from launcher.local_cluster import LocalCluster


@pytest.fixture
def store_kind() -> str:
    """The lean call is for one Redis: a cluster client takes redis-py's own ``Script``."""
    return "single"


SOURCE = """
redis.call('SET', KEYS[1], ARGV[1])
return {redis.call('INCR', KEYS[2]), ARGV[2], 7}
"""


def test_answers_as_redis_py_does(redis_client: redis.Redis) -> None:
    hot = HotScript(redis_client, SOURCE)
    plain = redis_client.register_script(SOURCE)
    assert hot(keys=["a", "n"], args=["x", 2.5]) == [1, b"2.5", 7]
    assert plain(keys=["a", "n"], args=["y", 2.5]) == [2, b"2.5", 7]
    assert hot(keys=["a", "n"], args=[b"z", 3]) == [3, b"3", 7]
    assert redis_client.get("a") == b"z"  # the client's own database (db 15 here)


def test_loads_the_script_when_the_server_forgot_it(redis_client: redis.Redis) -> None:
    hot = HotScript(redis_client, SOURCE)
    assert hot(keys=["a", "n"], args=["x", 1])[0] == 1
    redis_client.script_flush()
    assert hot(keys=["a", "n"], args=["x", 1])[0] == 2
    assert hot(keys=["a", "n"], args=["x", 1])[0] == 3


def test_a_killed_connection_is_replaced(redis_client: redis.Redis) -> None:
    hot = HotScript(redis_client, SOURCE)
    hot(keys=["a", "n"], args=["x", 1])
    (connection,) = hot._idle
    connection.send_command("CLIENT", "ID")
    redis_client.client_kill_filter(_id=connection.read_response())
    assert hot(keys=["a", "n"], args=["x", 1])[0] == 2
    assert hot(keys=["a", "n"], args=["x", 1])[0] == 3
    assert connection not in hot._idle


def test_a_script_error_is_raised_and_the_next_call_works(redis_client: redis.Redis) -> None:
    hot = HotScript(redis_client, SOURCE)
    redis_client.set("n", "not a number")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        hot(keys=["a", "n"], args=["x", 1])
    redis_client.delete("n")
    assert hot(keys=["a", "n"], args=["x", 1]) == [1, b"1", 7]


def test_threads_calling_at_once_each_get_their_own_answer(redis_client: redis.Redis) -> None:
    hot = HotScript(redis_client, SOURCE)
    answers: list[int] = []

    def calls() -> None:
        for _ in range(200):
            answers.append(hot(keys=["a", "n"], args=["x", 1])[0])

    threads = [threading.Thread(target=calls) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == list(range(1, 801))  # every INCR's own value, none lost or mixed
    assert 1 <= len(hot._idle) <= 4


def test_a_cluster_client_takes_redis_pys_call(cluster: LocalCluster) -> None:
    client = store_client(cluster.url)
    keys = ["{animfleet}:a", "{animfleet}:n"]  # one slot, as every store key is
    try:
        hot = HotScript(client, SOURCE)
        assert hot(keys=keys, args=["x", 1]) == [1, b"1", 7]
        assert hot(keys=keys, args=["x", 1])[0] == 2
    finally:
        client.delete(*keys)
        client.close()
