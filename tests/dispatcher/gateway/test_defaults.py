"""What a request gets when it leaves the size out, and a masked job's image-conditioned add-on
refused at submit: through a gateway in this process over a real Redis (no GPUs: the jobs wait
in the backlog, where their recorded parameters are read back)."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis
from PIL import Image

from animfleet.topology import Topology
from dispatcher import Client
from dispatcher.admission import AdmissionSettings
from dispatcher.gateway import GatewaySettings
from dispatcher.inputs import default_size
from launcher.local_fleet import LocalFleet

DB = 12


@pytest.fixture(scope="module")
def gateway(
    servers: LocalFleet,
    tmp_path_factory: pytest.TempPathFactory,
    serve: Callable[[Client, GatewaySettings], AbstractContextManager[str]],
) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("defaults-storage")
    region = {
        "broker_url": f"redis://127.0.0.1:{servers.redis_port}/{DB}",
        "storage": {"backend": "local", "root": str(root)},
    }
    topology = Topology.from_mapping({"regions": {"df": region}}, env={})
    redis.Redis(port=servers.redis_port, db=DB).flushdb()
    client = Client(topology, admission=AdmissionSettings(retry_budget_s=0.0, max_attempts=1))
    with serve(client, GatewaySettings(region="df", auth=False)) as url:
        yield url
    redis.Redis(port=servers.redis_port, db=DB).flushdb()


def _uri(width: int, height: int, mode: str = "RGB") -> str:
    pixels = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _submit(url: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/jobs", json={"prompt": "pan left", **body}, timeout=30)


def test_default_size_is_512_on_the_long_side_with_the_aspect_ratio() -> None:
    assert default_size(300, 200) == (512, 344)
    assert default_size(200, 300) == (344, 512)
    assert default_size(64, 64) == (512, 512)
    assert default_size(4000, 100) == (512, 32)  # never below the smallest served side
    assert default_size(300, 200, width=128) == (128, 88)
    assert default_size(300, 200, height=128) == (192, 128)
    assert default_size(300, 200, 64, 64) == (64, 64)


@pytest.mark.parametrize(
    ("image", "fields", "size"),
    [
        ((300, 200), {}, (512, 344)),
        ((200, 300), {}, (344, 512)),
        ((300, 200), {"size": 64}, (64, 64)),
        ((300, 200), {"width": 128}, (128, 88)),
    ],
)
def test_a_job_without_a_size_is_512_px_on_the_long_side(
    gateway: str, image: tuple[int, int], fields: dict[str, int], size: tuple[int, int]
) -> None:
    answer = _submit(gateway, image=_uri(*image), **fields)
    assert answer.status_code in (200, 202), answer.text
    params = answer.json()["input"]
    assert (params["width"], params["height"]) == size


def test_a_masked_job_with_an_image_conditioned_addon_is_refused_at_submit(
    gateway: str,
) -> None:
    image = _uri(64, 64)
    mask = _uri(64, 64, mode="L")
    addons = [{"name": "shake"}, {"name": "path", "image": _uri(64, 64)}]
    answer = _submit(gateway, image=image, mask=mask, addons=addons, size=64)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "addons.1"
    assert "'path' takes a control image" in error["message"] and "mask" in error["message"]
