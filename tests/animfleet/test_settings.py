"""Settings from the environment: explicit mappings, errors naming variable and value, secrets."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from animfleet.errors import PermanentError
from animfleet.logs import level_from_env
from animfleet.metrics import port_from_env
from animfleet.netguard import NetGuard
from animfleet.settings import EnvSettings, SettingsError, load
from dispatcher.admission import admission_settings_from_env
from dispatcher.gateway.settings import GatewaySettings
from dispatcher.router import routing_settings_from_env


class Demo(EnvSettings):
    model_config = SettingsConfigDict(env_prefix="DEMO_")

    count: int = Field(default=1, ge=1)
    names: tuple[str, ...] = ()
    token: SecretStr | None = None
    low: int = 0
    high: int = 10

    @field_validator("names", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return tuple(value.split(",")) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _ordered(self) -> Demo:
        if not self.low < self.high:
            raise ValueError(f"{self.env_name('low')}={self.low} must be below {self.high}")
        return self


def test_an_explicit_mapping_is_read_and_the_process_environment_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEMO_COUNT", "7")
    assert load(Demo).count == 7 and Demo().count == 7
    demo = load(Demo, {"DEMO_NAMES": "a,b", "DEMO_LOW": "3"})
    assert demo.count == 1 and demo.names == ("a", "b") and demo.low == 3
    assert load(Demo, {"DEMO_COUNT": ""}).count == 1  # empty counts as unset
    assert load(Demo, {"DEMO_COUNT": "2"}, count=5).count == 5  # explicit values win


def test_a_bad_value_names_the_variable_and_the_value() -> None:
    with pytest.raises(SettingsError) as caught:
        load(Demo, {"DEMO_COUNT": "zero", "DEMO_LOW": "-", "DEMO_HIGH": "5"})
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, PermanentError)
    not_an_int = "Input should be a valid integer, unable to parse string as an integer"
    assert str(caught.value).splitlines() == [
        "invalid Demo:",
        f"  DEMO_COUNT='zero': {not_an_int}",
        f"  DEMO_LOW='-': {not_an_int}",
    ]


def test_a_cross_field_rule_names_its_variables() -> None:
    with pytest.raises(SettingsError, match="DEMO_LOW=10 must be below 5"):
        load(Demo, {"DEMO_LOW": "10", "DEMO_HIGH": "5"})


def test_a_secret_never_appears_in_an_error() -> None:
    class WithSecret(EnvSettings):
        model_config = SettingsConfigDict(env_prefix="DEMO_")

        token: SecretStr

        @field_validator("token")
        @classmethod
        def _long(cls, value: SecretStr) -> SecretStr:
            raw = value.get_secret_value()
            if len(raw) < 32:
                raise ValueError(f"token {raw!r} is too short")  # a careless message
            return value

    with pytest.raises(SettingsError) as caught:
        load(WithSecret, {"DEMO_TOKEN": "hunter2-hunter2"})
    message = str(caught.value)
    assert "DEMO_TOKEN=***" in message and "hunter2" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    with pytest.raises(SettingsError, match="DEMO_TOKEN is required but not set"):
        load(WithSecret, {})
    with pytest.raises(SettingsError) as caught:
        load(WithSecret, {}, token="hunter2-hunter2")  # given explicitly: named as the field
    assert "token=***" in str(caught.value) and "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("read", "name", "value"),
    [
        (admission_settings_from_env, "ANIMFLEET_ADMISSION_ALLOWANCE", "2"),
        (admission_settings_from_env, "ANIMFLEET_ADMISSION_MAX_ATTEMPTS", "x"),
        (routing_settings_from_env, "ANIMFLEET_ROUTING_SPILL_TARGET", "1.5"),
        (routing_settings_from_env, "ANIMFLEET_ROUTING_RINGS", "150:0,60:1"),
        (routing_settings_from_env, "ANIMFLEET_ROUTING_RINGS", "60"),
        (lambda env: GatewaySettings.from_env("eu", env), "ANIMFLEET_GATEWAY_THREADS", "0"),
        (lambda env: GatewaySettings.from_env("eu", env), "ANIMFLEET_GATEWAY_MAX_WAIT_S", "61"),
        (NetGuard.from_env, "ANIMFLEET_NETGUARD_ALLOW_LOOPBACK", "perhaps"),
        (level_from_env, "ANIMFLEET_LOG_LEVEL", "chatty"),
    ],
)
def test_every_entry_point_names_a_bad_variable(
    read: Callable[[dict[str, str]], object], name: str, value: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        read({name: value})
    assert f"{name}={value!r}" in str(caught.value)


def test_admission_and_routing_read_their_variables() -> None:
    admission = admission_settings_from_env(
        {"ANIMFLEET_ADMISSION_ALLOWANCE": "1", "ANIMFLEET_ADMISSION_MAX_ATTEMPTS": "4"}
    )
    assert admission.allowance == 1.0 and admission.max_attempts == 4
    assert admission.retry_budget_s == 10.0  # the dataclass default
    with pytest.raises(SettingsError, match=r"ANIMFLEET_ADMISSION_BACKOFF_MAX_S=0\.1 must be"):
        admission_settings_from_env({"ANIMFLEET_ADMISSION_BACKOFF_MAX_S": "0.1"})
    routing = routing_settings_from_env(
        {"ANIMFLEET_ROUTING_SPILL_TARGET": "1.0", "ANIMFLEET_ROUTING_RINGS": "60:0, inf:1.6"}
    )
    assert routing.spill_target == 1.0 and routing.home_target == 1.0
    assert [(r.max_latency_ms, r.min_pressure) for r in routing.rings] == [(60, 0), (math.inf, 1.6)]
    assert routing_settings_from_env({"ANIMFLEET_ROUTING_RINGS": ""}) == routing_settings_from_env(
        {}
    )


def test_gateway_netguard_and_log_level() -> None:
    gateway = GatewaySettings.from_env("eu", {"ANIMFLEET_GATEWAY_THREADS": "64"})
    assert (gateway.region, gateway.threads, gateway.max_wait_s) == ("eu", 64, 60.0)
    for flag, allowed in [("1", True), ("yes", True), ("true", True), ("0", False), ("", False)]:
        assert NetGuard.from_env({"ANIMFLEET_NETGUARD_ALLOW_LOOPBACK": flag}).allow_loopback is (
            allowed
        )
    assert level_from_env({"ANIMFLEET_LOG_LEVEL": "info"}) == "INFO"
    assert level_from_env({}) == "INFO"


def test_metrics_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANIMFLEET_ROUTER_METRICS_PORT", "9101")
    monkeypatch.setenv("ANIMFLEET_WEBHOOK_METRICS_PORT", "0")
    monkeypatch.delenv("ANIMFLEET_WORKER_METRICS_PORT", raising=False)
    assert port_from_env("ANIMFLEET_ROUTER_METRICS_PORT") == 9101
    assert port_from_env("ANIMFLEET_WEBHOOK_METRICS_PORT") is None  # 0: off
    assert port_from_env("ANIMFLEET_WORKER_METRICS_PORT") is None
    monkeypatch.setenv("ANIMFLEET_ROUTER_METRICS_PORT", "70000")
    with pytest.raises(SettingsError, match="ANIMFLEET_ROUTER_METRICS_PORT='70000'"):
        port_from_env("ANIMFLEET_ROUTER_METRICS_PORT")
