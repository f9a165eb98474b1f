"""In a base install (the HTTP SDK alone) a fleet command says which extra it needs, in one
line, instead of a traceback."""

from __future__ import annotations

from tools.cli_errors import EX_CONFIG, user_error


def test_a_missing_fleet_library_names_the_extra() -> None:
    try:
        import redis_that_is_not_installed  # type: ignore[import-not-found]  # noqa: F401
    except ModuleNotFoundError as error:
        found = user_error(error)
    assert found is not None
    message, code = found
    assert code == EX_CONFIG and "animfleet[fleet]" in message
    assert "redis_that_is_not_installed" in message
