"""The SDK sends an add-on's control image like the job's image: bytes or a file become a
base64 data URI, a URL or storage key goes as given."""

from __future__ import annotations

import base64
from pathlib import Path

from animfleet_sdk._core import job_body


def test_control_images_are_sent_as_data_uris(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
    drawn = tmp_path / "path.png"
    drawn.write_bytes(png)
    body = job_body(
        png,
        "still",
        {
            "addons": [
                {"name": "path", "scale": 1.0, "image": png},
                {"name": "other", "image": drawn},
                {"name": "shake"},
                {"name": "far", "image": "https://example.com/path.png"},
            ]
        },
    )
    uri = "data:image/png;base64," + base64.b64encode(png).decode()
    assert body["addons"] == [
        {"name": "path", "scale": 1.0, "image": uri},
        {"name": "other", "image": uri},
        {"name": "shake"},
        {"name": "far", "image": "https://example.com/path.png"},
    ]
