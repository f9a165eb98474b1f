"""Affinity placement on real workers: a job goes onto the direct queue of an idle worker that
holds what it needs warm (an add-on, its image's template), and that worker runs it."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable

import httpx
import pytest
import redis

from animfleet.jobs import JobRecord
from animfleet.region.affinity import Holdings, addon_thing, image_digest, template_thing
from animfleet.region.keys import JOB_KEY
from animfleet.region.store_client import store_client
from launcher.local_fleet import LocalFleet, default_broker
from tools.training.evaluation.mask_scenes import mask_png, scene_mask

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        default_broker() == "rabbitmq",
        reason="no direct queues on RabbitMQ: per-consumer prefetch (docs/brokers.md)",
    ),
]


def _idle_holders(fleet: LocalFleet, store: redis.Redis, thing: str) -> list[str]:
    """Both workers idle and claiming ``thing``: the holders, best first."""
    deadline = time.monotonic() + 60
    while True:
        idle = [b["worker"] for b in fleet.heartbeats("api") if not b["job_id"]]
        holders = Holdings(store, "api").candidates([thing])
        if len(idle) == 2 and sorted(holders) == sorted(idle):
            return holders
        assert time.monotonic() < deadline, f"idle {idle}, holders {holders}"
        time.sleep(0.05)


def test_jobs_go_to_the_idle_worker_holding_their_addon(
    api: httpx.Client, api_fleet: LocalFleet, png_data_uri: str
) -> None:
    store = store_client(api_fleet.store_url("api"))
    ran_on = []
    for seed in range(3):
        first = _idle_holders(api_fleet, store, addon_thing("shake"))[0]
        response = api.post(
            "/v1/jobs",
            json={
                "image": png_data_uri, "prompt": "still", "frames": 4, "seed": seed,
                "addons": [{"name": "shake"}],
            },
            headers={"Prefer": "wait=60"},
        )  # fmt: skip
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "succeeded"
        raw = store.get(JOB_KEY + response.json()["id"])
        assert raw is not None
        ran_on.append((first, JobRecord.model_validate_json(raw).worker))
    # Every holder is idle and holds the add-on: the dispatchers' order (most held, then name)
    # names the same first one each time, and its direct queue took the job. Placed on the
    # shared queue instead, each job would have gone to either worker.
    assert all(chosen == ran for chosen, ran in ran_on), ran_on


def test_a_masked_job_goes_to_the_worker_holding_its_images_template(
    api: httpx.Client, api_fleet: LocalFleet, make_image: Callable[..., bytes]
) -> None:
    """The first masked job with an image leaves its template on the worker that ran it; the
    next masked job with that image (another mask, another seed) runs there too."""
    store = store_client(api_fleet.store_url("api"))
    masks = [mask_png(scene_mask(seed, 0.25, 64, 0)) for seed in (1, 2)]
    pairs = []
    for seed in range(3):
        image = make_image(seed=100 + seed)
        uri = "data:image/png;base64," + base64.b64encode(image).decode()
        workers = []
        for mask in masks:
            _idle_holders(api_fleet, store, addon_thing("shake"))  # both idle again
            response = api.post(
                "/v1/jobs",
                json={
                    "image": uri, "prompt": "zoom in", "frames": 4, "seed": seed,
                    "mask": "data:image/png;base64," + base64.b64encode(mask).decode(),
                },
                headers={"Prefer": "wait=60"},
            )  # fmt: skip
            assert response.status_code == 200, response.text
            raw = store.get(JOB_KEY + response.json()["id"])
            assert raw is not None
            workers.append(JobRecord.model_validate_json(raw).worker)
        assert Holdings(store, "api").holders([template_thing(image_digest(image))])
        pairs.append(tuple(workers))
    # Placed on the shared queue, each second job would have gone to either idle worker.
    assert all(first == second for first, second in pairs), pairs
