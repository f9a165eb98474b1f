"""How the ``animfleet`` command reports a failure its user can act on: one line and an exit
code, instead of a traceback (a bug still keeps its traceback)."""

from __future__ import annotations

import math

EX_USAGE = 2  # argparse's own code for a bad command line; also bad input
EX_TEMPFAIL = 75  # sysexits.h: try again later (the fleet is at capacity)
EX_CONFIG = 78  # sysexits.h: a configuration error (a bad ANIMFLEET_* variable)


class CliError(Exception):
    """A failure the user can act on: printed as one ``animfleet: error:`` line, no traceback."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def one_line(error: BaseException) -> str:
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


def problem(error: ValueError) -> str:
    """pydantic's first error as ``field: message``, else the message on one line."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        return f"{field}: {first['msg']}" if field else str(first["msg"])
    return one_line(error)


def user_error(error: BaseException) -> tuple[str, int] | None:
    """The one-line message and exit code of a failure the user can act on; None for anything
    else, which keeps its traceback (a bug should not look like bad input)."""
    if isinstance(error, CliError):
        return str(error), error.code
    if isinstance(error, ModuleNotFoundError) and error.name:  # the base install is the SDK
        return (
            f"this command needs the fleet's libraries ({error.name} is not installed): "
            "pip install 'animfleet[fleet]', or the extra of the process it runs",
            EX_CONFIG,
        )
    package = type(error).__module__.partition(".")[0]
    if package == "redis":
        from redis.exceptions import ConnectionError as RedisConnectionError

        if isinstance(error, RedisConnectionError):
            return f"cannot reach a region's Redis: {one_line(error)}", 1
        return None
    if package in ("storage", "workers"):
        from storage.registry import ModelIntegrityError, ModelNotFound
        from workers.served_versions import VersionUnavailable

        if isinstance(error, ModelIntegrityError | ModelNotFound | VersionUnavailable):
            return f"model version refused: {one_line(error)}", EX_CONFIG
        return None
    if package not in ("animfleet", "dispatcher"):
        return None
    # Only now: these modules load celery and redis, too slow for every command's start.
    from animfleet.region.jobstore import JobNotFound
    from animfleet.settings import SettingsError
    from dispatcher.admission import AtCapacity, BacklogFull
    from dispatcher.client import EnqueueFailed
    from dispatcher.inputs import InvalidInput
    from dispatcher.lookup import WaitTimeout

    if isinstance(error, SettingsError):  # names each bad variable and its value
        return " ".join(line.strip() for line in str(error).splitlines()), EX_CONFIG
    if isinstance(error, AtCapacity):
        retry_after = max(1, math.ceil(error.retry_after_s))  # what HTTP sends as Retry-After
        return (
            f"at capacity: no GPU free for jobs from region {error.source!r}; "
            f"retry after {retry_after} s",
            EX_TEMPFAIL,
        )
    if isinstance(error, BacklogFull):
        return f"backlog full: {one_line(error)}", EX_TEMPFAIL
    if isinstance(error, InvalidInput):
        return f"invalid input: {error.field}: {error.message}", EX_USAGE
    if isinstance(error, JobNotFound):
        return f"job not found: {error.args[0] if error.args else '?'}", 1
    if isinstance(error, WaitTimeout | EnqueueFailed):
        return one_line(error), 1
    return None
