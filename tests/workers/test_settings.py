import pytest
from pydantic import ValidationError

from animfleet.topology import Region
from workers.celery_app import celery_config
from workers.settings import WorkerSettings


def test_visibility_timeout_must_exceed_hard_limit() -> None:
    with pytest.raises(ValidationError, match="visibility_timeout_s"):
        WorkerSettings.from_env({"ANIMFLEET_WORKER_HARD_TIME_LIMIT_S": "1000"})


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
