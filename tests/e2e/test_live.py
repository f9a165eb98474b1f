"""End to end over HTTP, on one real fleet for this module (stand-in model, S3 storage): the
playground page in a real Chromium, the live event stream, and the async SDK.

The browser test needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install -y
chromium chromium-driver``) and Selenium; it skips, saying why, only where they are missing.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from animfleet.jobs import DEFAULT_TENANT
from animfleet.region.store_client import store_client
from animfleet.region.tenants import Limits, Tenants
from launcher.local_fleet import LocalFleet
from tests.fixtures.standin import ANIMATOR as STANDIN

REGION = "live"
SCREENSHOT = Path("out/playground.png")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("live-fleet"),
        regions=(REGION,),
        storage="s3",
        workers_per_region=1,
        model_dir=Path("standin:0.3:0.1"),
        animator=STANDIN,
        gateway=True,
        gateway_auth=True,
        service_env={"ANIMFLEET_NETGUARD_ALLOW_LOOPBACK": "1"},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def key(fleet: LocalFleet) -> str:
    """A key of the tenant jobs get when the request names none."""
    return Tenants(store_client(fleet.store_url(REGION))).create_key(DEFAULT_TENANT).key


def _chrome() -> object:
    selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip)")
    del selenium
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or driver is None:
        pytest.skip("Chromium is not installed: apt-get install -y chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--mute-audio"):
        options.add_argument(flag)
    options.add_argument("--autoplay-policy=no-user-gesture-required")
    options.add_argument("--window-size=900,1400")
    return webdriver.Chrome(service=Service(driver), options=options)


def _until(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_the_playground_submits_follows_and_plays_the_video(
    fleet: LocalFleet, key: str, tmp_path: Path, make_image: Callable[..., bytes]
) -> None:
    image = tmp_path / "input.png"
    image.write_bytes(make_image(64, 64, 3))
    browser = _chrome()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(browser, WebDriver)
    try:
        browser.get(fleet.gateway_url())
        browser.find_element(By.ID, "key").send_keys(key)
        browser.find_element(By.ID, "image").send_keys(str(image))
        _until(lambda: "input.png" in browser.find_element(By.ID, "curl").text, 10, "curl")
        browser.find_element(By.ID, "submit").click()
        script = (
            "const v = document.getElementById('video');"
            " return [v.currentSrc, v.paused, v.currentTime, v.readyState];"
        )
        _until(lambda: browser.execute_script(script)[2] > 0, 60, "the video to play")
        src, paused, _, ready = browser.execute_script(script)
        log = browser.find_element(By.ID, "log").text
        status = browser.find_element(By.ID, "status").text
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SCREENSHOT))
    finally:
        browser.quit()
    assert src and not paused and ready >= 2
    assert status == "succeeded"
    assert log.index("uploaded inputs/uploads/") < log.index("queued") < log.index("started")
    assert log.index("started") < log.index("progress")
    assert key not in (fleet.root / "logs" / f"web-{REGION}.log").read_text()


def test_the_playground_paints_a_region_draws_a_stroke_and_plays_the_loop(
    fleet: LocalFleet, key: str, tmp_path: Path, make_image: Callable[..., bytes]
) -> None:
    image = tmp_path / "input.png"
    image.write_bytes(make_image(96, 64, 5))
    browser = _chrome()
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import Select

    assert isinstance(browser, WebDriver)
    try:
        browser.get(fleet.gateway_url())
        browser.find_element(By.ID, "key").send_keys(key)
        browser.find_element(By.ID, "image").send_keys(str(image))
        canvas = browser.find_element(By.ID, "canvas")
        _until(lambda: canvas.is_displayed() and canvas.size["width"] > 0, 10, "the canvas")
        sizes = [o.text for o in Select(browser.find_element(By.ID, "size")).options]
        Select(browser.find_element(By.ID, "size")).select_by_visible_text("128")
        browser.find_element(By.ID, "add-region").click()
        width = canvas.size["width"]
        # Paint a patch left of centre, then draw a stroke to the right across it.
        paint = ActionChains(browser).move_to_element_with_offset(canvas, -width // 6, 0)
        paint.click_and_hold().move_by_offset(width // 10, 5).move_by_offset(0, 10).release()
        paint.perform()
        browser.find_element(By.ID, "mode-stroke").click()
        stroke = ActionChains(browser).move_to_element_with_offset(canvas, -width // 4, 0)
        stroke.click_and_hold().move_by_offset(width // 8, 0).move_by_offset(width // 8, 0)
        stroke.release().perform()
        browser.find_element(By.ID, "loop").click()
        regions = browser.find_element(By.ID, "regions").text
        _until(lambda: '"regions"' in browser.find_element(By.ID, "curl").text, 10, "curl")
        curl = browser.find_element(By.ID, "curl").text
        browser.find_element(By.ID, "submit").click()
        script = (
            "const v = document.getElementById('video');"
            " return [v.currentSrc, v.paused, v.currentTime, v.readyState];"
        )
        _until(lambda: browser.execute_script(script)[2] > 0, 60, "the video to play")
        src, paused, _, ready = browser.execute_script(script)
        status = browser.find_element(By.ID, "status").text
        log = browser.find_element(By.ID, "log").text
        browser.save_screenshot(str(SCREENSHOT.with_name("playground-brush.png")))
    finally:
        browser.quit()
    assert sizes == ["512 on the long side", "64", "128", "256", "384", "512", "768", "1024"]
    assert "region 0: flow, painted, stroke of" in regions and '"loop":true' in curl
    assert src and not paused and ready >= 2 and status == "succeeded"
    assert "succeeded" in log
    jobs = httpx.get(
        f"{fleet.gateway_url()}/v1/jobs", headers={"Authorization": f"Bearer {key}"}, timeout=10
    ).json()
    latest = jobs["jobs"][0]  # newest first: this one
    [region] = latest["input"]["regions"]
    assert region["kind"] == "flow" and len(region["mask_sha256"]) == 64
    assert len(region["stroke"]) >= 2 and region["stroke"][0][0] < region["stroke"][-1][0]
    assert latest["input"]["loop"] is True


def test_the_async_sdk_submits_waits_and_downloads_many(
    fleet: LocalFleet, key: str, make_image: Callable[..., bytes]
) -> None:
    av = pytest.importorskip("av")
    from animfleet_sdk import AsyncAnimfleet

    count = 12
    images = [make_image(64, 64, seed) for seed in range(count)]

    async def run() -> list[bytes]:
        async with AsyncAnimfleet(fleet.gateway_url(), api_key=key, max_retries=50) as api:
            items = [{"image": image, "prompt": "pan", "frames": 4, "size": 64} for image in images]
            results = await api.submit_many(items)
            assert all(r.job is not None for r in results), [r.error for r in results]
            ids = [r.job.id for r in results if r.job is not None]
            done = await asyncio.gather(*(api.wait(job_id, timeout=120) for job_id in ids))
            assert [job.status for job in done] == ["succeeded"] * count
            events = [e.event async for e in api.stream(ids[-1])]
            assert events[0] == "queued" and events[-1] == "succeeded"
            return list(await asyncio.gather(*(api.download(job) for job in done)))

    videos = asyncio.run(run())
    for video in videos:
        with av.open(io.BytesIO(video)) as container:
            assert sum(1 for _ in container.decode(video=0)) == 4


def test_events_resume_after_the_last_event_id_without_gap_or_repeat(
    fleet: LocalFleet, key: str, make_image: Callable[..., bytes]
) -> None:
    from animfleet_sdk import Animfleet

    with Animfleet(fleet.gateway_url(), api_key=key) as api:
        job = api.submit(make_image(), "zoom in", frames=4, size=64)
        stream = api.stream(job.id)
        first = [next(stream) for _ in range(2)]  # queued, started: then the client drops
        stream.close()
        rest = list(api.stream(job.id, last_event_id=first[-1].id))
    ids = [e.id for e in first + rest]
    assert len(ids) == len(set(ids))
    assert [e.event for e in first] == ["queued", "started"]
    steps = [e.data["step"] for e in rest if e.event == "progress"]
    assert steps == list(range(1, steps[-1] + 1)) and rest[-1].event == "succeeded"
    assert rest[-1].job is not None and rest[-1].job.output is not None
    with httpx.Client() as plain:
        assert plain.get(rest[-1].job.output.url or "").status_code == 200


def test_two_tenants_see_only_their_own_jobs(
    fleet: LocalFleet, make_image: Callable[..., bytes]
) -> None:
    import base64

    tenants = Tenants(store_client(fleet.store_url(REGION)))
    alice, bob = tenants.create_key("alice").key, tenants.create_key("bob").key
    image = "data:image/png;base64," + base64.b64encode(make_image()).decode()
    body = {"image": image, "prompt": "pan", "frames": 4, "size": 64}
    with httpx.Client(base_url=fleet.gateway_url(), timeout=60) as http:
        assert http.get("/v1/jobs").status_code == 401
        as_alice, as_bob = _bearer(alice), _bearer(bob)
        same_key = {"Idempotency-Key": "order-1"}
        mine = http.post("/v1/jobs", json=body, headers={**as_alice, **same_key})
        theirs = http.post("/v1/jobs", json=body, headers={**as_bob, **same_key})
        assert mine.status_code == theirs.status_code == 202
        job_id = mine.json()["id"]
        assert theirs.json()["id"] != job_id  # idempotency keys are per tenant
        missing = http.get("/v1/jobs/live.0123456789abcdef0123456789abcdef", headers=as_bob)
        for answer in [
            http.get(f"/v1/jobs/{job_id}", headers=as_bob),
            http.post(f"/v1/jobs/{job_id}/cancel", headers=as_bob),
            http.post(f"/v1/jobs/{job_id}/webhook/replay", headers=as_bob),
            http.get(f"/v1/jobs/{job_id}/events", headers=as_bob),
        ]:
            assert answer.status_code == 404, answer.text
            assert answer.json()["error"]["code"] == missing.json()["error"]["code"]
        listed = {j["id"] for j in http.get("/v1/jobs", headers=as_bob).json()["jobs"]}
        assert job_id not in listed and theirs.json()["id"] in listed
        assert job_id in {j["id"] for j in http.get("/v1/jobs", headers=as_alice).json()["jobs"]}
        assert http.get(f"/v1/jobs/{job_id}", headers=as_alice, params={}).status_code == 200
        conflict = http.post(
            "/v1/jobs", json={**body, "prompt": "zoom"}, headers={**as_alice, **same_key}
        )
        assert conflict.status_code == 409 and theirs.json()["id"] not in conflict.text

        tenants.set_limits("bob", Limits(rate_per_s=0.5, burst=1))
        answers = [http.get("/v1/regions", headers=as_bob) for _ in range(2)]
        assert [a.status_code for a in answers] == [200, 429]
        assert int(answers[1].headers["retry-after"]) >= 1

        tenants.revoke(bob.split("_")[1])
        revoked = http.get("/v1/jobs", headers=as_bob)
        assert revoked.status_code == 401 and revoked.json()["error"]["code"] == "key_revoked"
    logs = "".join(path.read_text() for path in (fleet.root / "logs").glob("*.log"))
    for secret in (alice, bob, *fleet.webhook_secrets):
        assert secret.split("_", 2)[-1] not in logs


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
