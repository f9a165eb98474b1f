"""How the dispatcher admits, retries and spreads jobs, and the environment that sets it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from animfleet.settings import EnvSettings, load


@dataclass(frozen=True)
class AdmissionSettings:
    """How the dispatcher admits, retries and spreads jobs.

    Args:
        allowance: jobs a region may hold beyond one per live GPU, as a fraction of its live
            GPUs (rounded down), so 0.05 lets a 100-GPU region queue 5 extra jobs. It covers
            the completions the in-flight view has not seen yet (heartbeat lag), which would
            otherwise idle GPUs and push jobs abroad; 0 enforces the strict one-per-GPU rule.
        retry_budget_s: no retry starts later than this after the first attempt
            (tenacity ``stop_before_delay``); then the job fails with :class:`AtCapacity`.
        max_attempts: attempts per job at most, first included.
        backoff_initial_s: the jitter window of the first retry; it doubles per retry
            (tenacity ``wait_random_exponential``: sleep = U(0, min(max, initial * 2**n))).
        backoff_max_s: the widest jitter window.
        hot_utilization: a source's targets are hot when their share-weighted utilization
            (in-flight / live GPUs) reaches this.
        execution_delay_share: the share of new jobs delayed while their targets are hot.
        execution_delay_max_s: the delay is drawn uniformly from [0, this].
        backlog: a job no region can take now waits in its home region's backlog; off, the
            dispatcher retries and finally raises :class:`AtCapacity` (the earlier policy).
        backlog_tenant_cap: jobs one tenant may have waiting in a region's backlog (``None``:
            no cap); past it a submit raises :class:`BacklogFull`.
        backlog_region_cap: jobs a region's backlog may hold in all (``None``: no cap).
        affinity: a job that can start now goes to an idle worker already holding its image's
            template or its add-ons, when there is one (:mod:`animfleet.region.affinity`).
    """

    allowance: float = 0.05
    retry_budget_s: float = 10.0
    max_attempts: int = 12
    backoff_initial_s: float = 0.25
    backoff_max_s: float = 4.0
    hot_utilization: float = 0.9
    execution_delay_share: float = 0.25
    execution_delay_max_s: float = 1.0
    backlog: bool = True
    backlog_tenant_cap: int | None = None
    backlog_region_cap: int | None = 100_000
    # A job submitted without a start deadline gets this one: no job waits forever.
    default_start_deadline_s: float = 3600.0
    affinity: bool = True

    def __post_init__(self) -> None:
        checks = {
            "allowance": 0 <= self.allowance <= 1,
            "retry_budget_s": self.retry_budget_s >= 0,
            "max_attempts": self.max_attempts >= 1,
            "backoff_initial_s": self.backoff_initial_s > 0,
            "backoff_max_s": self.backoff_max_s >= self.backoff_initial_s,
            "hot_utilization": self.hot_utilization > 0,
            "execution_delay_share": 0 <= self.execution_delay_share <= 1,
            "execution_delay_max_s": self.execution_delay_max_s >= 0,
            "backlog_tenant_cap": self.backlog_tenant_cap is None or self.backlog_tenant_cap >= 0,
            "backlog_region_cap": self.backlog_region_cap is None or self.backlog_region_cap >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"`{name}` is out of range: {getattr(self, name)}")


class AdmissionEnv(EnvSettings):
    """``ANIMFLEET_ADMISSION_<FIELD>`` for each :class:`AdmissionSettings` field (documented
    there), checked here so that a bad value names its variable."""

    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_ADMISSION_")

    allowance: float = Field(default=AdmissionSettings.allowance, ge=0, le=1)
    retry_budget_s: float = Field(default=AdmissionSettings.retry_budget_s, ge=0)
    max_attempts: int = Field(default=AdmissionSettings.max_attempts, ge=1)
    backoff_initial_s: float = Field(default=AdmissionSettings.backoff_initial_s, gt=0)
    backoff_max_s: float = Field(default=AdmissionSettings.backoff_max_s, gt=0)
    hot_utilization: float = Field(default=AdmissionSettings.hot_utilization, gt=0)
    execution_delay_share: float = Field(
        default=AdmissionSettings.execution_delay_share, ge=0, le=1
    )
    execution_delay_max_s: float = Field(default=AdmissionSettings.execution_delay_max_s, ge=0)
    backlog: bool = AdmissionSettings.backlog
    backlog_tenant_cap: int | None = Field(default=AdmissionSettings.backlog_tenant_cap, ge=0)
    backlog_region_cap: int | None = Field(default=AdmissionSettings.backlog_region_cap, ge=0)
    default_start_deadline_s: float = Field(
        default=AdmissionSettings.default_start_deadline_s, gt=0
    )
    affinity: bool = AdmissionSettings.affinity

    @model_validator(mode="after")
    def _window_grows(self) -> AdmissionEnv:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(
                f"{self.env_name('backoff_max_s')}={self.backoff_max_s:g} must be at least "
                f"{self.env_name('backoff_initial_s')}={self.backoff_initial_s:g}"
            )
        return self


def admission_settings_from_env(env: Mapping[str, str] | None = None) -> AdmissionSettings:
    """``ANIMFLEET_ADMISSION_<FIELD>`` overrides, e.g. ``ANIMFLEET_ADMISSION_RETRY_BUDGET_S``.

    Raises :class:`animfleet.settings.SettingsError`."""
    return AdmissionSettings(**load(AdmissionEnv, env).model_dump())
