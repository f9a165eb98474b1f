"""Every Python and TypeScript code block of the README and ``docs/*.md`` runs as written against
a live local fleet, and the stream's events are the ones the docs name.

Each block runs in a fresh directory where ``tools/`` is the checkout's (the examples open
``tools/assets/example.png``, as from the repository's root), with ``ANIMFLEET_URL``,
``ANIMFLEET_API_KEY`` and ``ANIMFLEET_FLEET_FILE`` set to the fleet's: Python in a subprocess,
TypeScript compiled by ``tsc`` with the ``tsconfig.json`` its page states (the page's JSON block
with ``compilerOptions``) in an ES module project, then run by Node. A block that cannot run is
marked on the line before it with ``<!-- not-run: the reason -->``; the reasons are listed.
Pages added later are picked up as they are.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from animfleet.region.store_client import store_client
from animfleet.region.tenants import Tenants
from animfleet_sdk import Animfleet
from launcher.local_fleet import LocalFleet
from tests.fixtures.standin import ANIMATOR as STANDIN
from tests.sdk.test_typescript_sdk import SDK, build_typescript_sdk
from tools import EXAMPLE_IMAGE

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
REGION = "eu-west"  # the region the docs' examples name
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->\s*$")
LANGUAGES = {"python": "python", "py": "python", "ts": "typescript", "typescript": "typescript"}
WRONG_KEY = "af_0000000000000000_not-a-key"


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    language: str  # python | typescript
    code: str
    not_run: str | None  # the stated reason, for a marked block

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            language = LANGUAGES.get(match.group(1))
            if language is None:
                continue
            before = text[: match.start()].rstrip("\n").rpartition("\n")[2]
            marked = NOT_RUN.search(before)
            line = text.count("\n", 0, match.start()) + 1
            reason = marked.group(1) if marked else None
            found.append(Example(page, line, language, match.group(2), reason))
    return found


EXAMPLES = _examples()
RUNNABLE = [example for example in EXAMPLES if example.not_run is None]


def _tsconfig(page: Path) -> str:
    """The ``tsconfig.json`` a page states for its TypeScript: its JSON block naming
    ``compilerOptions``."""
    for match in BLOCK.finditer(page.read_text()):
        if match.group(1) == "json" and "compilerOptions" in match.group(2):
            return match.group(2)
    pytest.fail(f"{page.name} has TypeScript but states no tsconfig.json (a JSON block)")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    with LocalFleet(
        tmp_path_factory.mktemp("docs-fleet"),
        regions=(REGION,),
        storage="s3",
        workers_per_region=1,
        model_dir=Path("standin:1.0"),  # long enough that a job waits behind another
        animator=STANDIN,
        gateway=True,
        gateway_auth=True,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def environment(fleet: LocalFleet) -> dict[str, str]:
    key = Tenants(store_client(fleet.store_url(REGION))).create_key("docs").key
    return os.environ | {
        "ANIMFLEET_URL": fleet.gateway_url(REGION),
        "ANIMFLEET_API_KEY": key,
        "ANIMFLEET_FLEET_FILE": str(fleet.fleet_file),
    }


def _workdir(tmp_path: Path) -> Path:
    (tmp_path / "tools").symlink_to(ROOT / "tools")  # the examples' paths are the checkout's
    return tmp_path


def _typescript_project(example: Example, work: Path) -> list[str]:
    """``example`` compiled in an ES module project of its own; the command that runs it."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: TypeScript examples cannot run here")
    build_typescript_sdk()
    (work / "package.json").write_text(json.dumps({"type": "module", "private": True}))
    (work / "tsconfig.json").write_text(_tsconfig(example.page))
    modules = work / "node_modules"
    (modules / "@animfleet").mkdir(parents=True)
    (modules / "@types").mkdir()
    (modules / "@animfleet" / "sdk").symlink_to(SDK)
    (modules / "typescript").symlink_to(SDK / "node_modules" / "typescript")
    (modules / "@types" / "node").symlink_to(SDK / "node_modules" / "@types" / "node")
    (work / "example.ts").write_text(example.code)
    node = shutil.which("node")
    assert node is not None
    tsc = [node, str(modules / "typescript" / "bin" / "tsc"), "-p", str(work)]
    compiled = subprocess.run(tsc, cwd=work, capture_output=True, text=True, timeout=300)
    assert compiled.returncode == 0, f"{example.name} does not compile:\n{compiled.stdout}"
    return [node, "example.js"]


def _command(example: Example, work: Path) -> list[str]:
    if example.language == "typescript":
        return _typescript_project(example, work)
    (work / "example.py").write_text(example.code)
    return [sys.executable, "example.py"]


def test_every_block_runs_or_says_why() -> None:
    assert RUNNABLE, "the README and docs have runnable examples"
    skipped = [f"{example.name}: {example.not_run}" for example in EXAMPLES if example.not_run]
    print("not run:", *skipped or ["none"], sep="\n  ")
    assert all(reason.strip() for reason in skipped if reason), skipped


@pytest.mark.parametrize("example", RUNNABLE, ids=[example.name for example in RUNNABLE])
def test_the_example_runs_as_written(
    example: Example, environment: dict[str, str], tmp_path: Path
) -> None:
    work = _workdir(tmp_path)
    argv = _command(example, work)
    done = subprocess.run(argv, cwd=work, env=environment, capture_output=True, text=True)
    assert done.returncode == 0, f"{example.name} failed:\n{done.stdout[-2000:]}{done.stderr}"
    if "Animfleet(" in example.code:  # the SDK's examples: a refused call fails the program
        refused = environment | {"ANIMFLEET_API_KEY": WRONG_KEY}
        failed = subprocess.run(argv, cwd=work, env=refused, capture_output=True, text=True)
        assert failed.returncode != 0, f"{example.name} exits 0 when its call fails"


def test_a_queued_job_carries_its_position_and_an_estimated_start(
    environment: dict[str, str],
) -> None:
    image = EXAMPLE_IMAGE.read_bytes()
    with Animfleet(environment["ANIMFLEET_URL"], api_key=environment["ANIMFLEET_API_KEY"]) as api:
        api.wait(api.submit(image, "pan left", size=64, frames=4).id)  # a run time to go by
        ahead = [api.submit(image, "pan left", size=64, frames=4) for _ in range(2)]
        submitted = time.time()
        job = api.submit(image, "zoom in", size=64, frames=4)
        events = list(api.stream(job.id))
        for earlier in ahead:
            api.wait(earlier.id)
    first = events[0]
    assert first.event == "queued", events
    position, start = first.data["queue_position"], first.data["estimated_start_at"]
    assert isinstance(position, int) and position >= 0, first.data
    assert isinstance(start, float) and start > submitted, first.data
    names = [event.event for event in events]
    assert names[-1] == "succeeded" and {"started", "progress"} <= set(names), names
    assert set(names) <= {"queued", "started", "progress", "succeeded"}, names
