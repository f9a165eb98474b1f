"""The SDK sends a job's ``mask`` the ways it sends the image: bytes or a file as a data URI,
a URL or ``inputs/`` key as given."""

from __future__ import annotations

import base64
from pathlib import Path

from animfleet_sdk import _core


def test_a_mask_is_sent_like_the_image(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"rest"
    body = _core.job_body(b"\x89PNG image", "zoom in", {"mask": png, "frames": 8})
    assert body["mask"] == "data:image/png;base64," + base64.b64encode(png).decode()
    assert body["frames"] == 8
    path = tmp_path / "mask.png"
    path.write_bytes(png)
    assert _core.job_body(b"x", "p", {"mask": path})["mask"] == body["mask"]
    assert _core.job_body(b"x", "p", {"mask": "inputs/m.png"})["mask"] == "inputs/m.png"
    assert "mask" not in _core.job_body(b"x", "p", {"mask": None})
