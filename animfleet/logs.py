"""structlog set-up shared by every process: one JSON object per line on stderr."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from pydantic import field_validator
from pydantic_settings import SettingsConfigDict

from animfleet.settings import EnvSettings, load

_SECRET_KEYS = ("password", "secret", "token", "authorization", "signature")
# Where lines about one job are copied besides stderr (:func:`tee_job_lines`), by name.
_JOB_TEES: dict[str, Callable[[str, dict[str, Any]], None]] = {}


def _drop_secrets(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """Never let a secret reach a log line, whatever a caller binds."""
    for key in list(event):
        if any(part in key.lower() for part in _SECRET_KEYS):
            event[key] = "***"
    return event


def tee_job_lines(name: str, sink: Callable[[str, dict[str, Any]], None] | None) -> None:
    """Copy every enabled line carrying ``job_id`` to ``sink(job_id, line)`` (secrets already
    masked), under ``name`` (a later sink of the same name replaces it; None removes it). A
    sink that raises never stops the line reaching stderr."""
    if sink is None:
        _JOB_TEES.pop(name, None)
    else:
        _JOB_TEES[name] = sink


def _tee_job_lines(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    job_id = event.get("job_id")
    if isinstance(job_id, str) and _JOB_TEES:
        for sink in list(_JOB_TEES.values()):
            with contextlib.suppress(Exception):  # a job's log is best effort; stderr is not
                sink(job_id, event)
    return event


class LogEnv(EnvSettings):
    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_LOG_")

    level: str = "INFO"

    @field_validator("level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        value = value.strip().upper()
        if value not in logging.getLevelNamesMapping():
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return value


def level_from_env(env: Mapping[str, str] | None = None) -> str:
    """``ANIMFLEET_LOG_LEVEL`` (any case; INFO when unset)."""
    return load(LogEnv, env).level


def configure(level: str | None = None) -> None:
    """Route structlog and stdlib logging (Celery's own lines included) to JSON on stderr."""
    level_name = (level or level_from_env()).upper()
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _drop_secrets,
        _tee_job_lines,
    ]
    structlog.configure(
        # Drop disabled levels first, so a filtered-out line costs next to nothing.
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level_name)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
