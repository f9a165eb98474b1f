"""Schemathesis hooks of ``make fuzz-api`` (loaded through ``SCHEMATHESIS_HOOKS``).

A generated job names an image no decoder reads, so every submit is refused with 422 and the
stateful phase never gets a job id to follow its links with (get, logs, cancel, delete). Here a
submit's string ``image`` is swapped for a real PNG, so jobs exist and every route is reached
with a real id. A case generated to be invalid is left as it is.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import schemathesis
from PIL import Image

SUBMITS = {("POST", "/v1/jobs"), ("PUT", "/v1/jobs/{job_id}")}


def _png_data_uri() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (90, 140, 200)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


PNG = _png_data_uri()


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    """A valid submit's image becomes a real PNG; a case meant to be invalid is left alone."""
    operation = case.operation
    if (operation.method.upper(), operation.path) not in SUBMITS:
        return case
    meta = getattr(case, "_meta", None)
    negative = meta is not None and (
        meta.generation.mode.is_negative
        or any(info.mode.is_negative for info in meta.components.values())
    )
    if not negative and isinstance(case.body, dict) and isinstance(case.body.get("image"), str):
        case.body = {**case.body, "image": PNG}
    return case
