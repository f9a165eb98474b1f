"""The sync SDK is generated from the async one: the committed ``_sync_client.py`` is exactly
what ``python -m tools.generate_sync_sdk`` writes, and both clients offer the same calls."""

from __future__ import annotations

import inspect

from animfleet_sdk import Animfleet, AsyncAnimfleet
from tools.generate_sync_sdk import SOURCE, TARGET, generate


def test_the_committed_sync_client_is_what_the_async_one_generates() -> None:
    assert TARGET.read_text() == generate(SOURCE.read_text()), (
        "animfleet_sdk/_sync_client.py drifted from _async_client.py: edit the async one, then "
        "run python -m tools.generate_sync_sdk (make generate-sdk-sync)"
    )


def test_the_generator_rewrites_async_constructs() -> None:
    source = (
        '"""Async."""\n\nimport asyncio\nimport time\n\n\nclass AsyncAnimfleet:\n'
        "    async def run(self) -> None:\n        async with self.http.stream() as r:\n"
        "            async for line in r.aiter_lines():\n"
        "                await asyncio.sleep(len(line))\n"
    )
    generated = generate(source)
    assert "class Animfleet:" in generated and "    def run(self) -> None:" in generated
    assert "with self.http.stream() as r:" in generated
    assert "for line in r.iter_lines():" in generated and "time.sleep(len(line))" in generated
    assert "async" not in generated.replace("_async_client", "") and "asyncio" not in generated


def test_both_clients_have_the_same_calls_and_signatures() -> None:
    def calls(kind: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(kind).items()
            if callable(member) and not name.startswith("__")
        }

    sync, aio = calls(Animfleet), calls(AsyncAnimfleet)
    assert sync.keys() == aio.keys()
    for name, signature in sync.items():
        assert list(signature.parameters) == list(aio[name].parameters), name
