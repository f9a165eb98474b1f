"""What the sync and async clients share: request bodies, answers, retries, the SSE parser."""

from __future__ import annotations

import base64
import json
import mimetypes
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from animfleet_api.bounds import MAX_PREFER_WAIT_S as MAX_PREFER_WAIT_S
from animfleet_sdk.errors import ApiError, RequestRefused, TryLater
from animfleet_sdk.responses import Event

RETRY_STATUSES = frozenset({429, 503})
DEFAULT_RETRY_S = 1.0
USER_AGENT = "animfleet-sdk/1"

Image = bytes | str | Path


UPLOAD_OVER_BYTES = 2**20  # a submitted image larger than this is uploaded first, sent as its key


def image_type(data: bytes) -> str:
    """The content type of PNG, JPEG or WebP bytes (PNG when unsure: the gateway decides)."""
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "image/png"


def image_bytes(image: Image) -> bytes | None:
    """The bytes of an image given as bytes or a file; None for a URL or a storage key."""
    if isinstance(image, bytes):
        return image
    if isinstance(image, Path) or Path(image).is_file():
        return Path(image).read_bytes()
    return None


def image_field(image: Image) -> str:
    """A URL or ``inputs/`` key as given; bytes or a file as a base64 data URI."""
    if isinstance(image, str) and not Path(image).is_file():
        return image
    if isinstance(image, str | Path):
        path = Path(image)
        kind = mimetypes.guess_type(path.name)[0] or "image/png"
        return f"data:{kind};base64,{base64.b64encode(path.read_bytes()).decode()}"
    return f"data:{image_type(image)};base64,{base64.b64encode(image).decode()}"


def job_body(image: Image, prompt: str, options: Mapping[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"image": image_field(image), "prompt": prompt}
    body.update({name: value for name, value in options.items() if value is not None})
    if "mask" in body:  # sent the ways the image is: bytes or a file become a data URI
        body["mask"] = image_field(body["mask"])
    if body.get("addons"):
        body["addons"] = [addon_field(addon) for addon in body["addons"]]
    if body.get("regions"):
        body["regions"] = [region_field(region) for region in body["regions"]]
    return body


def region_field(region: Mapping[str, Any]) -> dict[str, Any]:
    """A motion-brush region as sent: its ``mask`` (bytes, a file, a URL or a key) like the
    job's image, its stroke as lists, unset fields left out."""
    sent = {name: value for name, value in region.items() if value is not None}
    if "mask" in sent:
        sent["mask"] = image_field(sent["mask"])
    if "stroke" in sent:
        sent["stroke"] = [[float(x), float(y)] for x, y in sent["stroke"]]
    return sent


def addon_field(addon: Mapping[str, Any]) -> dict[str, Any]:
    """An add-on as sent: its control ``image`` (bytes, a file, a URL or a key) like the
    job's image."""
    sent = dict(addon)
    if sent.get("image") is not None:
        sent["image"] = image_field(sent["image"])
    return sent


def new_idempotency_key() -> str:
    """Each submit carries one, so the SDK's retries never create a job twice."""
    return "sdk-" + secrets.token_hex(16)


URL_ENV = "ANIMFLEET_URL"  # the gateway, read when no base_url is given
API_KEY_ENV = "ANIMFLEET_API_KEY"  # the API key, read when no api_key is given


def gateway_url(base_url: str | None) -> str:
    """``base_url``, else ``$ANIMFLEET_URL``; a clear error when neither is set."""
    url = base_url or os.environ.get(URL_ENV)
    if not url:
        raise ValueError(
            f"no gateway URL: pass base_url or set {URL_ENV} (e.g. http://127.0.0.1:8000)"
        )
    return url


def api_key_or_env(api_key: str | None) -> str | None:
    """``api_key``, else ``$ANIMFLEET_API_KEY``; None (no header) for a gateway without keys."""
    return api_key or os.environ.get(API_KEY_ENV) or None


def headers(api_key: str | None) -> dict[str, str]:
    found = {"User-Agent": USER_AGENT}
    if api_key:
        found["Authorization"] = f"Bearer {api_key}"
    return found


def retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", DEFAULT_RETRY_S)))
    except ValueError:  # an HTTP date: rare, wait the default
        return DEFAULT_RETRY_S


def should_retry(response: httpx.Response, attempt: int, max_retries: int) -> float | None:
    """Seconds to wait before retrying, or ``None`` to stop here."""
    if response.status_code in RETRY_STATUSES and attempt < max_retries:
        return retry_after(response)
    return None


def checked(response: httpx.Response) -> Any:
    """The answer's JSON, or the API's error raised."""
    if response.is_success:
        return response.json()
    try:
        error = response.json()["error"]
        code, message, field_name = error["code"], error["message"], error.get("field")
    except (ValueError, KeyError, TypeError):
        code, message, field_name = "http_error", response.text[:200], None
    kind: type[ApiError] = ApiError  # a server error: neither side can say more
    if response.status_code in RETRY_STATUSES:
        kind = TryLater
    elif response.status_code < 500:
        kind = RequestRefused
    wait = retry_after(response) if "retry-after" in response.headers else None
    raise kind(response.status_code, code, message, field_name, wait)


@dataclass
class EventParser:
    """Server-Sent Events, one line at a time (comments, i.e. heartbeats, are skipped)."""

    last_id: str | None = None
    _fields: dict[str, str] = field(default_factory=dict)

    def feed(self, line: str) -> Event | None:
        if line == "":
            fields, self._fields = self._fields, {}
            if "data" not in fields:
                return None
            event_id = fields.get("id", self.last_id or "")
            self.last_id = event_id
            return Event(
                id=event_id, event=fields.get("event", "message"), data=json.loads(fields["data"])
            )
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data" and name in self._fields:  # a multi-line data field
            value = self._fields[name] + "\n" + value
        self._fields[name] = value
        return None


def batch_item(job: Mapping[str, Any]) -> dict[str, Any]:
    options = {k: v for k, v in job.items() if k not in ("image", "prompt")}
    options.setdefault("idempotency_key", new_idempotency_key())
    return job_body(job["image"], job["prompt"], options)


def list_params(
    status: str | None,
    created_after: float | None,
    created_before: float | None,
    cursor: str | None,
    limit: int,
) -> dict[str, str | int | float]:
    given = {
        "status": status,
        "created_after": created_after,
        "created_before": created_before,
        "cursor": cursor,
        "limit": limit,
    }
    return {name: value for name, value in given.items() if value is not None}


def output_url(job: Any) -> str:
    if job.output is None or not job.output.url:
        raise ValueError(f"job {job.id} has no output to download (status {job.status})")
    return str(job.output.url)
