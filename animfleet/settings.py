"""Settings from environment variables: pydantic-settings over a chosen mapping, clear errors.

Each process kind has one :class:`EnvSettings` subclass with its own ``env_prefix`` (e.g.
``ANIMFLEET_WORKER_``); a field ``soft_time_limit_s`` reads ``ANIMFLEET_WORKER_SOFT_TIME_LIMIT_S``.
:func:`load` builds one from ``os.environ`` or from an explicit mapping (tests pass one) and turns
a validation failure into a :class:`SettingsError` with one line per bad variable, naming the
variable and its value. Values of secret fields (``SecretStr``) never appear in such a message.

Values are read as plain strings: list-valued settings are comma-separated and split by the model
(no JSON), and an empty variable counts as unset.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, get_args

from pydantic import AliasChoices, SecretBytes, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from animfleet.errors import PermanentError

S = TypeVar("S", bound="EnvSettings")

MASK = "***"


@dataclass(frozen=True)
class _Source:
    env: Mapping[str, str] | None  # None: os.environ at that moment
    env_prefix: str | None  # None: the class's own


# What :func:`load` asks the next settings object to be built from (sources are chosen by a
# classmethod, so the per-call mapping travels beside the call rather than through it).
_SOURCE: ContextVar[_Source | None] = ContextVar("animfleet_settings_source", default=None)


class SettingsError(PermanentError, ValueError):
    """Settings could not be read: one line per problem, each naming the variable and value.
    Permanent: the process must not start until its environment is fixed."""


class MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over ``env`` instead of ``os.environ``."""

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        env: Mapping[str, str],
        env_prefix: str | None = None,
    ) -> None:
        self._env = env  # read by _load_env_vars, which the parent's __init__ calls
        super().__init__(settings_cls, env_prefix=env_prefix)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {
            (name if self.case_sensitive else name.lower()): value
            for name, value in self._env.items()
            if not (self.env_ignore_empty and value == "")
        }

    def prepare_field_value(
        self, field_name: str, field: FieldInfo, value: Any, value_is_complex: bool
    ) -> Any:
        # Raw strings only: the models split their comma-separated lists themselves.
        return value


class EnvSettings(BaseSettings):
    """Base of every process kind's settings: read from the environment (or :func:`load`'s
    mapping) only, no ``.env`` file or secrets directory; frozen once read."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", env_ignore_empty=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        wanted = _SOURCE.get() or _Source(None, None)
        env = os.environ if wanted.env is None else wanted.env
        return init_settings, MappingEnvSource(settings_cls, env, wanted.env_prefix)

    @classmethod
    def env_name(cls, field: str) -> str:
        """The environment variable that sets ``field`` (its first alias, if it has any)."""
        return _env_names(cls, field, str(cls.model_config.get("env_prefix") or ""))[0]


def load(
    cls: type[S],
    env: Mapping[str, str] | None = None,
    *,
    env_prefix: str | None = None,
    **values: Any,
) -> S:
    """Build ``cls`` from ``env`` (``os.environ`` when ``None``) and the explicit ``values``,
    which win over the environment. Raises :class:`SettingsError`."""
    token = _SOURCE.set(_Source(env, env_prefix))
    try:
        return cls(**values)
    except ValidationError as error:
        prefix = str(cls.model_config.get("env_prefix") or "") if env_prefix is None else env_prefix
        mapping = os.environ if env is None else env
        # ``from None``: the pydantic error would show secrets as ``input_value``.
        raise settings_error(error, cls, mapping, prefix, given=values) from None
    finally:
        _SOURCE.reset(token)


def settings_error(
    error: ValidationError,
    cls: type[BaseSettings],
    env: Mapping[str, str],
    prefix: str,
    given: Mapping[str, Any] | None = None,
) -> SettingsError:
    """One line per failed check: ``NAME='value': message``; a model-wide rule's message (which
    names its variables itself) stands alone. ``given``: the values passed in explicitly, named
    as fields. Secret fields' values are masked."""
    given = given or {}
    upper_env = {name.upper(): value for name, value in env.items()}
    secrets = [
        value
        for name, field in cls.model_fields.items()
        if _is_secret(field.annotation)
        for env_name in _env_names(cls, name, prefix)
        if (value := upper_env.get(env_name.upper()))
    ]
    secrets += [
        _plain(item)
        for name, value in given.items()
        if name in cls.model_fields and _is_secret(cls.model_fields[name].annotation)
        for item in (value if isinstance(value, list | tuple) else [value])
    ]
    lines = []
    for detail in error.errors(include_url=False):
        # pydantic tags a validator's own message "Value error, "; the message reads better bare.
        message = _redact(str(detail["msg"]).removeprefix("Value error, "), secrets)
        if not detail["loc"]:
            lines.append(message)
            continue
        field = _field_of(cls, detail["loc"][0])
        if field is None:  # an unknown explicit value
            lines.append(f"{detail['loc'][0]}: {message}")
            continue
        if field in given:
            label, raw = field, detail.get("input")
        else:
            names = _env_names(cls, field, prefix)
            label = next((n for n in names if n.upper() in upper_env), names[0])
            raw = upper_env.get(label.upper(), detail.get("input"))
        shown = MASK if _is_secret(cls.model_fields[field].annotation) else repr(raw)
        if detail["type"] == "missing" and len(detail["loc"]) == 1:
            lines.append(f"{label} is required but not set")
        else:
            lines.append(f"{label}={shown}: {message}")
    header = f"invalid {cls.__name__}:"
    return SettingsError("\n  ".join([header, *dict.fromkeys(lines)]))


def _env_names(cls: type[BaseSettings], field: str, prefix: str) -> list[str]:
    """Every variable that may set ``field``, in the order pydantic-settings looks them up."""
    info = cls.model_fields[field]
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        names = [choice for choice in alias.choices if isinstance(choice, str)]
        if names:
            return [name.upper() for name in names]
    if isinstance(alias, str):
        return [alias.upper()]
    return [(prefix + field).upper()]


def _field_of(cls: type[BaseSettings], key: int | str) -> str | None:
    """The field an error location's first part refers to (a field name or one of its aliases)."""
    if key in cls.model_fields:
        return str(key)
    for name, info in cls.model_fields.items():
        alias = info.validation_alias
        choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
        if key in choices:
            return name
    return None


def _is_secret(annotation: Any) -> bool:
    if annotation in (SecretStr, SecretBytes):
        return True
    return any(_is_secret(arg) for arg in get_args(annotation))


def _plain(value: object) -> str:
    if isinstance(value, SecretStr | SecretBytes):
        secret = value.get_secret_value()
        return secret.decode(errors="replace") if isinstance(secret, bytes) else secret
    return str(value)


def _redact(text: str, secrets: list[str]) -> str:
    """``text`` with every secret value, and each of its comma-separated parts, masked."""
    for value in secrets:
        for part in sorted(_secret_parts(value), key=len, reverse=True):
            text = text.replace(part, MASK)
    return text


def _secret_parts(value: str) -> Iterator[str]:
    yield value
    for part in value.split(","):
        part = part.strip()
        for piece in (part, part.partition("_")[2]):  # the latter: the key without ``whsec_``
            if len(piece) >= 4:  # shorter pieces would mask ordinary words, and reveal little
                yield piece
