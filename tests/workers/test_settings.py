from pathlib import Path

import pytest

from animfleet.settings import SettingsError
from animfleet.topology import Region
from workers.celery_app import celery_config
from workers.settings import WorkerSettings


def test_visibility_timeout_must_exceed_hard_limit() -> None:
    with pytest.raises(SettingsError) as caught:
        WorkerSettings.from_env({"ANIMFLEET_WORKER_HARD_TIME_LIMIT_S": "1000"})
    message = str(caught.value)
    assert "ANIMFLEET_WORKER_VISIBILITY_TIMEOUT_S=900 must be greater than" in message
    assert "ANIMFLEET_WORKER_HARD_TIME_LIMIT_S=1000" in message


def test_the_upload_retry_budget_must_fit_inside_the_soft_limit() -> None:
    with pytest.raises(SettingsError) as caught:
        WorkerSettings.from_env({"ANIMFLEET_WORKER_UPLOAD_RETRY_S": "600"})
    message = str(caught.value)
    assert "ANIMFLEET_WORKER_SOFT_TIME_LIMIT_S=540 must be greater than" in message
    assert "ANIMFLEET_WORKER_UPLOAD_RETRY_S=600" in message
    # Shortened limits need a shorter retry budget too (the default 60 s no longer fits).
    short = {
        "ANIMFLEET_WORKER_SOFT_TIME_LIMIT_S": "20",
        "ANIMFLEET_WORKER_HARD_TIME_LIMIT_S": "25",
        "ANIMFLEET_WORKER_VISIBILITY_TIMEOUT_S": "30",
    }
    with pytest.raises(SettingsError, match="ANIMFLEET_WORKER_UPLOAD_RETRY_S=60"):
        WorkerSettings.from_env(short)
    fits = WorkerSettings.from_env({**short, "ANIMFLEET_WORKER_UPLOAD_RETRY_S": "15"})
    assert fits.upload_retry_s == 15 and WorkerSettings.from_env({}).upload_retry_s == 60


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ANIMFLEET_WORKER_SOFT_TIME_LIMIT_S", "nine"),
        ("ANIMFLEET_WORKER_MAX_DELIVERIES", "0"),
        ("ANIMFLEET_WORKER_PRECISION", "fp16"),
        ("ANIMFLEET_WORKER_ANIMATOR", "not a class"),
        ("ANIMFLEET_WORKER_SHAPE_BUCKETS", "8x64"),
        ("ANIMFLEET_WORKER_COMPILE", "maybe"),
    ],
)
def test_a_bad_value_names_the_variable_and_the_value(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as caught:
        WorkerSettings.from_env({name: value})
    assert f"{name}={value!r}" in str(caught.value)


def test_the_environment_sets_every_field_and_model_dir_has_two_names() -> None:
    settings = WorkerSettings.from_env(
        {
            "ANIMFLEET_MODEL_DIR": "models/a",
            "ANIMFLEET_WORKER_NAME": "gpu-7",
            "ANIMFLEET_WORKER_STEPS": "8",
            "ANIMFLEET_WORKER_CONTEXT_DEDUP": "0",
            "ANIMFLEET_WORKER_METRICS_PORT": "",  # empty counts as unset
        }
    )
    assert settings.model_dir == Path("models/a") and settings.name == "gpu-7"
    assert settings.steps == 8 and not settings.context_dedup and settings.metrics_port is None
    both = {"ANIMFLEET_MODEL_DIR": "models/a", "ANIMFLEET_WORKER_MODEL_DIR": "models/b"}
    assert WorkerSettings.from_env(both).model_dir == Path("models/b")
    assert WorkerSettings(model_dir=Path("models/c")).model_dir == Path("models/c")


def test_an_explicit_mapping_ignores_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANIMFLEET_WORKER_STEPS", "12")
    monkeypatch.setenv("ANIMFLEET_MODEL_DIR", "from-process")
    assert WorkerSettings.from_env().steps == 12
    assert WorkerSettings.from_env().model_dir == Path("from-process")
    isolated = WorkerSettings.from_env({})
    assert isolated.steps is None and isolated.model_dir == Path("run/models/random")


def test_celery_config_holds_one_job_per_gpu() -> None:
    settings = WorkerSettings()
    config = celery_config(Region(name="eu-west", broker_url="redis://x/0"), settings)
    assert config["worker_prefetch_multiplier"] == 1 and config["worker_concurrency"] == 1
    assert config["task_acks_late"] and config["task_reject_on_worker_lost"]
    assert config["accept_content"] == ["json"] and config["task_serializer"] == "json"
    assert config["broker_transport_options"]["visibility_timeout"] > config["task_time_limit"]
    assert config["task_soft_time_limit"] < config["task_time_limit"]
    assert config["task_default_queue"] == "animate.eu-west"
    # a replacement pool process must be given time to load its model, or it is killed in a loop
    assert config["worker_proc_alive_timeout"] >= 60


def test_a_named_worker_takes_its_direct_queue_before_the_shared_one() -> None:
    region = Region(name="eu-west", broker_url="redis://x/0")
    config = celery_config(region, WorkerSettings(name="gpu-1@host"))
    names = [queue.name for queue in config["task_queues"]]
    assert names == ["animate.eu-west.w.gpu-1@host", "animate.eu-west"]
    # kombu's default takes queues in turn; "priority" takes the direct one first each time.
    assert config["broker_transport_options"]["queue_order_strategy"] == "priority"


def test_batch_mode_refuses_the_per_video_optimizations_and_the_memory_guard() -> None:
    assert WorkerSettings.from_env({}).batch == 1
    assert WorkerSettings.from_env({"ANIMFLEET_WORKER_BATCH": "4"}).batch == 4
    with pytest.raises(SettingsError) as caught:
        WorkerSettings.from_env(
            {
                "ANIMFLEET_WORKER_BATCH": "4",
                "ANIMFLEET_WORKER_BLOCK_CACHE": "2",
                "ANIMFLEET_WORKER_MAX_RSS_MB": "4096",
            }
        )
    message = str(caught.value)
    assert "ANIMFLEET_WORKER_BATCH=4" in message
    assert "ANIMFLEET_WORKER_BLOCK_CACHE=2" in message
    assert "ANIMFLEET_WORKER_MAX_RSS_MB=4096" in message
    with pytest.raises(SettingsError, match="ANIMFLEET_WORKER_BATCH"):
        WorkerSettings.from_env({"ANIMFLEET_WORKER_BATCH": "0"})


def test_a_batch_worker_takes_as_many_messages_as_it_has_slots() -> None:
    region = Region(name="cfg", broker_url="redis://127.0.0.1:6379/0")
    config = celery_config(region, WorkerSettings(batch=4, name="gpu-1@host"))
    assert (config["worker_concurrency"], config["worker_prefetch_multiplier"]) == (4, 1)
    names = [queue.name for queue in config["task_queues"]]  # a direct queue per slot
    assert names == [*(f"animate.cfg.w.gpu-1@host/{n}" for n in range(4)), "animate.cfg"]
    assert celery_config(region, WorkerSettings())["worker_concurrency"] == 1
