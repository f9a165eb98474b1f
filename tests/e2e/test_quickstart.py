"""The README's quick start as a new web-backend developer walks it: ``animfleet local up``, the
key it printed, the README's Python snippet run as printed, then each SDK (Python, and
TypeScript where Node is installed) through upload -> submit -> its log and progress on the
stream -> download -> delete -> usage that counts the job; and the printed ``export`` line runs
as printed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import av
import pytest

from animfleet_sdk import Animfleet, RequestRefused
from tests.e2e.test_live import _chrome
from tests.launcher.test_local_up import Started, local_up  # noqa: F401  (the fixture)
from tests.sdk.test_typescript_sdk import build_typescript_sdk

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def _frames(path: Path) -> int:
    with av.open(str(path)) as video:
        return sum(1 for _ in video.decode(video=0))


def _readme_python() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert blocks, "the README's quick start has a Python snippet"
    return str(blocks[0])


def _until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout} s")
        time.sleep(0.2)  # polling an HTTP answer; the deadline bounds it


def _printed(started: Started) -> tuple[str, str]:
    url = next(v.split()[0] for k, v in started.lines.items() if v.startswith("http://"))
    key = next(v for k, v in started.lines.items() if k.startswith("API key"))
    return url, key


def _playground_plays_a_photograph(url: str, key: str) -> None:
    import sklearn.datasets

    photo = Path(sklearn.datasets.__file__).parent / "images" / "china.jpg"
    browser = _chrome()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import Select

    assert isinstance(browser, WebDriver)
    playing = "const v = document.getElementById('video'); return v.currentTime > 0 && !v.paused;"
    try:
        browser.get(url)
        browser.find_element(By.ID, "key").send_keys(key)
        browser.find_element(By.ID, "image").send_keys(str(photo))
        Select(browser.find_element(By.ID, "size")).select_by_visible_text("128")
        browser.find_element(By.ID, "submit").click()
        _until(lambda: bool(browser.execute_script(playing)), "the playground's video to play")
        log = browser.find_element(By.ID, "log").text
        status = browser.find_element(By.ID, "status").text
    finally:
        browser.quit()
    assert status == "succeeded", log
    assert "uploaded inputs/uploads/" in log


@pytest.mark.timeout(900)
def test_the_quick_start_walks_as_printed(
    local_up: Callable[..., Started],  # noqa: F811
    tmp_path: Path,
    make_image: Callable[..., bytes],
) -> None:
    started = local_up("--storage", "s3")
    url, key = _printed(started)

    # The README's snippet as printed, after the export line local up printed, from a folder
    # where tools/ is the checkout's (the README runs it from the repository's root).
    snippet = _readme_python()
    assert "Animfleet()" in snippet and "tools/assets/example.png" in snippet
    (tmp_path / "tools").symlink_to(ROOT / "tools")
    exported = "export ANIMFLEET_URL=" + started.lines["export ANIMFLEET_URL"]
    assert f"ANIMFLEET_API_KEY={key}" in exported
    done = subprocess.run(
        ["bash", "-c", f'{exported}\nexec {sys.executable} -c "$0"', snippet],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "succeeded" in done.stdout and _frames(tmp_path / "example.mp4") >= 8

    # The printed export line, run as printed, points the CLI at this fleet.
    export = "export ANIMFLEET_FLEET_FILE=" + started.lines["export ANIMFLEET_FLEET_FILE"]
    listed = subprocess.run(
        ["bash", "-c", f"{export}\n{sys.executable} -m launcher keys list --tenant default"],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert key.split("_")[1] in listed.stdout and "active" in listed.stdout  # the printed key

    # The Python SDK, the whole way.
    with Animfleet(url, api_key=key) as api:
        stored = api.upload(make_image(64, 64, seed=5))
        job = api.submit(stored.key, "the water ripples", frames=4, size=64)
        events = list(api.stream(job.id, logs=True))
        names = [event.event for event in events]
        assert names[-1] == "succeeded" and "progress" in names, names
        assert "job.submitted" in {e.data.get("event") for e in events if e.event == "log"}
        video = tmp_path / "sdk.mp4"
        api.download(job.id, video)
        assert _frames(video) == 4
        assert api.delete(job.id).objects_deleted >= 2  # its output and its upload
        with pytest.raises(RequestRefused) as gone:
            api.get(job.id)
        assert gone.value.status == 410

        def counted() -> bool:
            total = api.usage().total
            return total.jobs.get("succeeded", 0) >= 2 and total.deleted >= 1

        _until(counted, "usage counted the two jobs and the deletion")

    # The playground in a real Chromium, with the printed key: a photograph uploaded, its video
    # played.
    _playground_plays_a_photograph(url, key)

    # The TypeScript SDK, the same way, where Node is installed.
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: the TypeScript half cannot run here")
    built = build_typescript_sdk()
    image = tmp_path / "photo.png"
    image.write_bytes(make_image(64, 64, seed=9))
    script = tmp_path / "quickstart.mjs"
    script.write_text(
        f"""
import {{ readFileSync, writeFileSync }} from "node:fs";
import {{ Animfleet }} from {json.dumps((built.parent / "dist" / "index.js").as_uri())};
const api = new Animfleet();  // ANIMFLEET_URL and ANIMFLEET_API_KEY
const stored = await api.upload(readFileSync(process.env.IMAGE));
const job = await api.submit({{ image: stored.key, prompt: "pan left", frames: 4, size: 64 }});
const names = [];
const logged = [];
for await (const event of api.events(job.id, {{ logs: true }})) {{
  names.push(event.event);
  if (event.event === "log") logged.push(event.data.event);
}}
writeFileSync(process.env.OUT, await api.download(job.id));
const deleted = await api.delete(job.id);
let usage = await api.usage();
for (let i = 0; i < 300 && (usage.total.jobs.succeeded ?? 0) < 3; i++) {{
  await new Promise((resolve) => setTimeout(resolve, 200));
  usage = await api.usage();
}}
console.log(JSON.stringify({{ names, logged, deleted, total: usage.total }}));
"""
    )
    node = shutil.which("node")
    assert node is not None
    out = tmp_path / "ts.mp4"
    env = os.environ | {
        "ANIMFLEET_URL": url,
        "ANIMFLEET_API_KEY": key,
        "IMAGE": str(image),
        "OUT": str(out),
    }
    done = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["names"][-1] == "succeeded" and "progress" in result["names"]
    assert "job.submitted" in result["logged"]
    assert result["deleted"]["objects_deleted"] >= 2
    assert result["total"]["jobs"]["succeeded"] >= 3  # the README's, Python's and this one
    assert _frames(out) == 4
