"""Worker settings, from ``ANIMFLEET_WORKER_*`` environment variables with production defaults."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from animfleet.settings import EnvSettings, load

DEFAULT_MODEL_DIR = Path("run/models/random")


class WorkerSettings(EnvSettings):
    # populate_by_name: code and tests pass ``model_dir=`` beside the aliased variables.
    model_config = SettingsConfigDict(env_prefix="ANIMFLEET_WORKER_", populate_by_name=True)

    # ANIMFLEET_MODEL_DIR is the older, shorter name; the prefixed one wins when both are set.
    model_dir: Path = Field(
        default=DEFAULT_MODEL_DIR,
        validation_alias=AliasChoices("ANIMFLEET_WORKER_MODEL_DIR", "ANIMFLEET_MODEL_DIR"),
    )
    # Model versions (name@version, comma-separated) fetched, verified and loaded before the
    # worker takes jobs; it runs any other version of its region's registry on first use.
    models: str = Field(default="", pattern=r"^[a-z0-9@._,\s-]*$")
    # Where fetched versions live on disk, one directory per content hash.
    model_cache: Path = Path("run/model-cache")
    # Registry versions held in memory at once (the least recently used is dropped).
    max_models: int = Field(default=4, ge=1, le=64)
    # This worker's Celery node name; None: the host name and process id.
    name: str | None = None
    # "module:Class", an Animator subclass to serve instead of the diffusers pipeline.
    animator: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    # A job past the soft limit fails with code "timeout"; past the hard limit its process dies.
    soft_time_limit_s: int = Field(default=540, ge=1)
    hard_time_limit_s: int = Field(default=600, ge=2)
    # Redis re-delivers an unacked message after this long: must exceed the hard limit, or a
    # slow job would run twice. It is also how long a job waits after its whole worker host died.
    visibility_timeout_s: int = Field(default=900, ge=3)
    # A job whose worker died this many times is failed instead of delivered again.
    max_deliveries: int = Field(default=3, ge=1, le=20)
    upload_retry_s: float = Field(default=60.0, ge=0)
    # How long a record read or write retries an unreachable job store before the delivery is
    # put back (rejected; on RabbitMQ published anew, see workers/redelivery.py).
    store_retry_s: float = Field(default=30.0, gt=0)
    # The pool child running a job is SIGKILLed once its RSS passes this (workers/memguard.py):
    # a job too large for the host dies like a GPU OOM instead of taking the host down.
    max_rss_mb: int | None = Field(default=None, ge=64)
    # The worker's main process serves Prometheus /metrics here (all its pool children summed).
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # How long a new worker process may take to load, compile and warm up its model.
    model_load_timeout_s: float = Field(default=600.0, gt=0)
    # How the model runs (see README "Model and optimizations"). Precision, compile, context
    # de-dup and attention left unset come from the model's serving profile for this device
    # (serving_profile.json, written by `animfleet model tune`), else the safe choice: fp32,
    # eager, de-dup, torch's attention kernel. A value set here overrides the profile.
    profile: bool = True
    # The device kind profiles are keyed by; None: detected (cpu:<ISA>[+bf16][+amx] or
    # cuda:<name>). Set it to group hosts by hand (or, in tests, to be a kind nobody profiled).
    device_kind: str | None = Field(default=None, pattern=r"^[\w:+. ()-]{1,80}$")
    # A kind with no profile entry is measured at boot for up to this long (seconds; 0: serve
    # the safe choice instead), unless a worker of its kind already stored its entry in the
    # region's bucket. Checked between loads and rounds: a compile in progress finishes.
    boot_tune_s: float = Field(default=180.0, ge=0)
    # Whether compiled candidates are measured at boot too (torch.compile: the slow part).
    boot_tune_compile: bool = True
    # Where the model runs: "cpu", or "cuda" / "cuda:N" on a GPU host.
    device: str = Field(default="cpu", pattern=r"^(cpu|cuda(:\d+)?)$")
    precision: Literal["bf16", "fp32"] | None = None
    scheduler: Literal["dpmsolver++", "ddim", "euler"] = "dpmsolver++"
    # None: the model's serving.json step count (8 for the distilled student), else 15.
    steps: int | None = Field(default=None, ge=1, le=200)
    context_dedup: bool | None = None
    attention: Literal["auto", "math", "flash", "efficient", "cudnn"] | None = None
    # Compile the U-Net at worker start and warm up each shape bucket ("FxHxW", comma
    # separated) before taking jobs: from the ahead-of-time packages beside the model when
    # their key matches (`animfleet model compile`, seconds). Without them a profile's compile
    # serves eagerly; COMPILE=1 set here compiles at boot with torch.compile (minutes).
    compile: bool | None = None
    aot: bool = True
    compile_decoder: bool = False
    shape_buckets: str = "8x64x64"
    # At warm-up a compiled model's frames are compared with the eager model's; below this
    # PSNR (dB) the worker serves eagerly instead.
    verify_psnr_db: float = Field(default=40.0, ge=0)
    # DeepCache-style block caching of a MotionUNet: the deep blocks run every Nth step (0: off).
    block_cache: int = Field(default=0, ge=0, le=16)
    # Continuous batching (workers/batching): up to this many jobs share one denoising loop,
    # each joining and leaving at a step boundary; the worker counts as this many slots.
    # 1: one job per GPU, the classic path.
    batch: int = Field(default=1, ge=1, le=64)
    # The template cache of masked jobs (fitted frames and image features per input image).
    template_cache_mb: int = Field(default=256, ge=0, le=65536)

    @model_validator(mode="after")
    def _limits_are_ordered(self) -> WorkerSettings:
        # Redis must not re-deliver a running job, the hard limit must leave the soft limit
        # time to fail the job cleanly, and the upload retries must fit inside the soft limit.
        chain = ("visibility_timeout_s", "hard_time_limit_s", "soft_time_limit_s", "upload_retry_s")
        broken = [
            f"{self.env_name(a)}={_shown(getattr(self, a))} must be greater than "
            f"{self.env_name(b)}={_shown(getattr(self, b))}"
            for a, b in pairwise(chain)
            if not getattr(self, a) > getattr(self, b)
        ]
        if broken:
            names = " > ".join(self.env_name(name) for name in chain)
            raise ValueError(f"need {names}: " + "; ".join(broken))
        return self

    @model_validator(mode="after")
    def _batch_mode_fits(self) -> WorkerSettings:
        # Block caching and compiled graphs keep per-call state shaped for one video; the
        # memory guard kills a pool child, and a batch worker runs its jobs in threads.
        if self.batch == 1:
            return self
        clashes = [
            f"{self.env_name(name)}={_shown(float(getattr(self, name)))}"
            for name in ("block_cache", "compile", "max_rss_mb")
            if getattr(self, name)
        ]
        if clashes:
            raise ValueError(
                f"{self.env_name('batch')}={self.batch} runs jobs in one batched loop, "
                f"which does not support " + ", ".join(clashes) + "; unset them or use batch 1"
            )
        return self

    @field_validator("shape_buckets")
    @classmethod
    def _buckets_parse(cls, value: str) -> str:
        for bucket in filter(None, value.split(",")):
            parts = bucket.strip().lower().split("x")
            if len(parts) != 3 or not all(part.isdigit() and int(part) > 0 for part in parts):
                raise ValueError(f"shape bucket must look like 8x64x64, got {bucket!r}")
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        """Read ``ANIMFLEET_WORKER_<FIELD>`` (and ``ANIMFLEET_MODEL_DIR``) from ``env`` or the
        process environment. Raises :class:`animfleet.settings.SettingsError`."""
        return load(cls, env)


def _shown(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)  # 60.0 as "60"
