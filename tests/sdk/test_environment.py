"""Both Python clients read ``ANIMFLEET_URL`` and ``ANIMFLEET_API_KEY`` when given no arguments
(what ``animfleet local up`` exports), arguments win over them, and no URL either way is a clear
error."""

from __future__ import annotations

import asyncio

import pytest

from animfleet_sdk import Animfleet, AsyncAnimfleet


def test_no_arguments_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANIMFLEET_URL", "http://127.0.0.1:8123")
    monkeypatch.setenv("ANIMFLEET_API_KEY", "af_0123456789abcdef_env")
    with Animfleet() as api:
        assert str(api.http.base_url) == "http://127.0.0.1:8123"
        assert api.http.headers["Authorization"] == "Bearer af_0123456789abcdef_env"
    with Animfleet("http://127.0.0.1:9000", api_key="af_0123456789abcdef_arg") as api:
        assert str(api.http.base_url) == "http://127.0.0.1:9000"
        assert api.http.headers["Authorization"] == "Bearer af_0123456789abcdef_arg"

    async def asynchronous() -> None:
        async with AsyncAnimfleet() as api:
            assert str(api.http.base_url) == "http://127.0.0.1:8123"
            assert api.http.headers["Authorization"] == "Bearer af_0123456789abcdef_env"

    asyncio.run(asynchronous())


def test_no_url_anywhere_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANIMFLEET_URL", raising=False)
    monkeypatch.delenv("ANIMFLEET_API_KEY", raising=False)
    with pytest.raises(ValueError, match="pass base_url or set ANIMFLEET_URL"):
        Animfleet()
    with Animfleet("http://127.0.0.1:8123") as api:  # a gateway without keys: no header
        assert "Authorization" not in api.http.headers
