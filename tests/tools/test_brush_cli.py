"""``animfleet submit``'s motion-brush options: each ``--region-mask`` starts a region whose
stroke, kind, speed and amplitude follow in order; ``--regions`` reads a JSON file; bad
strokes are one line naming the option. The SDK sends regions' masks like the image."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from animfleet_sdk import _core
from tools import cli
from tools.brush_cli import parse_stroke, regions_from_args
from tools.cli_errors import CliError


def _args(*argv: str) -> object:
    return cli.build_parser().parse_args(["submit", "in.png", "still", *argv])


def test_region_options_pair_up_in_order(tmp_path: Path) -> None:
    water, sky = tmp_path / "water.png", tmp_path / "sky.png"
    water.write_bytes(b"water png")
    sky.write_bytes(b"sky png")
    args = _args(
        "--region-mask", str(water), "--stroke", "0.8,0.6;0.6,0.63", "--kind", "flow",
        "--region-mask", str(sky), "--stroke", "0.6,0.1;0.9,0.1", "--kind", "drift",
        "--speed", "1.5", "--speed", "1", "--loop",
    )  # fmt: skip
    regions = regions_from_args(args)  # type: ignore[arg-type]
    assert regions == [
        {"mask": b"water png", "kind": "flow", "speed": 1.5, "stroke": [[0.8, 0.6], [0.6, 0.63]]},
        {"mask": b"sky png", "kind": "drift", "speed": 1.0, "stroke": [[0.6, 0.1], [0.9, 0.1]]},
    ]
    assert cli.brushed(args) == {"regions": regions, "loop": True}  # type: ignore[arg-type]
    assert cli.brushed(_args()) == {}  # type: ignore[arg-type]


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
    with pytest.raises(CliError, match="without a --region-mask"):
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
