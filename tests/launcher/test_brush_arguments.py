"""``animfleet submit``'s motion-brush options: each ``--region-mask`` starts a region and
each stroke, kind, speed and amplitude belongs to the ``--region-mask`` before it (the
documented example, submitted to a real Redis, stores what it says); ``--regions`` reads a
JSON file; a bad stroke or a stray option is one line naming it. The SDK sends regions' masks
like the image."""

from __future__ import annotations

import base64
import io
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from animfleet.topology import Topology
from animfleet_sdk import _core
from dispatcher import Client
from launcher import command
from launcher.brush_arguments import brush_options, parse_stroke, regions_from_args
from launcher.command_errors import CliError


def _args(*argv: str) -> object:
    return command.build_parser().parse_args(["submit", "in.png", "still", *argv])


DOCS = Path(__file__).parents[2] / "docs" / "motion-brush.md"


def test_region_options_belong_to_the_mask_before_them(tmp_path: Path) -> None:
    water, sky = tmp_path / "water.png", tmp_path / "sky.png"
    water.write_bytes(b"water png")
    sky.write_bytes(b"sky png")
    args = _args(
        "--region-mask", str(water), "--stroke", "0.8,0.6;0.6,0.63", "--kind", "flow",
        "--region-mask", str(sky), "--kind", "drift", "--speed", "1",
        "--stroke", "0.6,0.1;0.9,0.1", "--loop", "--amplitude", "3",
    )  # fmt: skip
    regions = regions_from_args(args)  # type: ignore[arg-type]
    assert regions == [
        {"mask": b"water png", "kind": "flow", "stroke": [[0.8, 0.6], [0.6, 0.63]]},
        {
            "mask": b"sky png",
            "kind": "drift",
            "speed": 1.0,
            "stroke": [[0.6, 0.1], [0.9, 0.1]],
            "amplitude": 3.0,
        },
    ]
    assert brush_options(args) == {"regions": regions, "loop": True}  # type: ignore[arg-type]
    assert brush_options(_args()) == {}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--kind", "drift", "--speed", "2"], "--kind drift comes before any --region-mask"),
        (["--speed", "2", "--region-mask", "{mask}"], "--speed 2.0 comes before any --region-mask"),
        (["--region-mask", "{mask}", "--speed", "1", "--speed", "2"], "--speed given twice"),
        (["--regions", "{listed}", "--amplitude", "3"], "--amplitude 3.0 comes before any"),
    ],
)
def test_a_stray_region_option_is_one_line_naming_it(
    tmp_path: Path, argv: list[str], words: str
) -> None:
    (tmp_path / "m.png").write_bytes(b"mask")
    (tmp_path / "r.json").write_text(json.dumps([{"mask": "m.png", "kind": "pulse"}]))
    filled = [a.format(mask=tmp_path / "m.png", listed=tmp_path / "r.json") for a in argv]
    with pytest.raises(CliError, match=re.escape(words)) as caught:
        brush_options(_args(*filled))  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def _documented_submit() -> list[str]:
    """The ``animfleet submit`` example of the motion-brush page, as its words."""
    text = DOCS.read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith("animfleet submit "))
    return shlex.split(line, comments=True)[1:]


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_the_documented_example_submits_what_it_says(
    servers: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = servers.redis_port  # type: ignore[attr-defined]
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        f'[regions.one]\nbroker_url = "redis://127.0.0.1:{port}/15"\n'
        f'[regions.one.storage]\nbackend = "local"\nroot = "{tmp_path / "store"}"\n'
    )
    rows = np.arange(64)[:, None] < 32
    (tmp_path / "lake.png").write_bytes(_png(np.full((64, 64, 3), 90, np.uint8)))
    (tmp_path / "sky.png").write_bytes(_png(np.where(rows, 255, 0).astype(np.uint8).repeat(64, 1)))
    (tmp_path / "water.png").write_bytes(
        _png(np.where(rows, 0, 255).astype(np.uint8).repeat(64, 1))
    )
    monkeypatch.chdir(tmp_path)
    words = _documented_submit()
    assert words[:3] == ["submit", "lake.png", "still"], words
    assert command.main(["--fleet", str(fleet), *words]) == 0
    job_id = capsys.readouterr().out.strip()
    client = Client(Topology.load(fleet))
    try:
        record = client.get(job_id)
    finally:
        client.close()
    assert record.params.loop
    water, sky = record.params.regions
    assert (water.kind, water.speed, water.stroke) == ("flow", None, ((0.8, 0.6), (0.6, 0.63)))
    assert (sky.kind, sky.speed, sky.stroke) == ("drift", 1.0, ((0.6, 0.1), (0.9, 0.1)))


def test_a_regions_file_reads_masks_beside_it(tmp_path: Path) -> None:
    (tmp_path / "m.png").write_bytes(b"mask")
    listed = [{"mask": "m.png", "kind": "ripple", "amplitude": 4}]
    (tmp_path / "r.json").write_text(json.dumps(listed))
    regions = regions_from_args(_args("--regions", str(tmp_path / "r.json")))  # type: ignore[arg-type]
    assert regions == [{"mask": b"mask", "kind": "ripple", "amplitude": 4}]


@pytest.mark.parametrize("text", ["0.1;0.2", "a,b;c,d", "0.1,0.2,0.3"])
def test_a_bad_stroke_is_one_line_naming_the_option(text: str) -> None:
    with pytest.raises(CliError, match="--stroke"):
        parse_stroke(text)
    with pytest.raises(CliError, match="comes before any --region-mask"):
        regions_from_args(_args("--stroke", "0.1,0.1;0.2,0.2"))  # type: ignore[arg-type]


def test_the_sdk_sends_region_masks_like_the_image(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\nrest"
    path = tmp_path / "m.png"
    path.write_bytes(png)
    uri = "data:image/png;base64," + base64.b64encode(png).decode()
    body = _core.job_body(
        b"x",
        "still",
        {
            "loop": True,
            "regions": [
                {"mask": png, "stroke": ((0.1, 0.2), (0.3, 0.4)), "speed": None},
                {"mask": path, "kind": "pulse"},
                {"mask": "inputs/m.png", "kind": "pulse"},
            ],
        },
    )
    assert body["loop"] is True
    assert body["regions"] == [
        {"mask": uri, "stroke": [[0.1, 0.2], [0.3, 0.4]]},
        {"mask": uri, "kind": "pulse"},
        {"mask": "inputs/m.png", "kind": "pulse"},
    ]
