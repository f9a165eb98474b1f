"""The asynchronous client of the HTTP API. The synchronous one (``_sync_client.py``) is
generated from this file by ``tools/generate_sync_sdk.py``: edit this one, then regenerate."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from animfleet_sdk import _core
from animfleet_sdk.errors import RequestRefused, WaitTimeout
from animfleet_sdk.responses import (
    BatchResult,
    DeletedJob,
    Event,
    Job,
    JobLog,
    JobPage,
    PresignedUpload,
    StoredUpload,
    Usage,
)


class AsyncAnimfleet:
    """``async with AsyncAnimfleet("https://api.example.com", api_key="af_...") as api:
    await api.submit(...)``: submit, follow, fetch.

    Without arguments it reads ``ANIMFLEET_URL`` and ``ANIMFLEET_API_KEY`` (``animfleet local
    up`` prints both as one ``export`` line); no URL either way is a ``ValueError``.

    429 and 503 answers are retried after their ``Retry-After``, up to ``max_retries`` times;
    every submit carries an idempotency key, so a retry never makes a second job. An image
    given as bytes or a file larger than ``upload_over_bytes`` is uploaded first
    (:meth:`upload`) and sent as its key instead of inline.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 90.0,
        max_retries: int = 5,
        upload_over_bytes: int = _core.UPLOAD_OVER_BYTES,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.max_retries = max_retries
        self.upload_over_bytes = upload_over_bytes
        self.http = http or httpx.AsyncClient(base_url=_core.gateway_url(base_url), timeout=timeout)
        self.http.headers.update(_core.headers(_core.api_key_or_env(api_key)))

    async def __aenter__(self) -> AsyncAnimfleet:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            response = await self.http.request(method, path, **kwargs)
            pause = _core.should_retry(response, attempt, self.max_retries)
            if pause is None:
                return _core.checked(response)
            attempt += 1
            await asyncio.sleep(pause)

    async def submit(
        self,
        image: _core.Image,
        prompt: str,
        *,
        idempotency_key: str | None = None,
        wait: float | None = None,
        **options: Any,
    ) -> Job:
        """Enqueue a job; ``options`` are the other fields of
        :class:`animfleet_api.request.JobRequest`: mask (a PNG, white animates), frames, fps,
        size or width/height (default: 512 px on the image's long side, its aspect ratio),
        seed, model, webhook, deadline, metadata...; ``model`` is a deployment or a pinned
        ``name@version``; ``addons``, each ``{"name", "scale"}`` and, for an image-conditioned
        one, its control ``image`` (bytes, a file, a URL or an ``inputs/`` key, like ``image``).
        ``regions``: motion-brush regions, each ``{"mask", "kind", "stroke", "speed",
        "amplitude"}`` (the mask like ``image``); ``loop``: a seamless loop.
        ``wait``: answer once it finished or after that many seconds (at most 60)."""
        headers = {"Idempotency-Key": idempotency_key or _core.new_idempotency_key()}
        if wait:
            headers["Prefer"] = f"wait={min(int(wait), _core.MAX_PREFER_WAIT_S)}"
        data = _core.image_bytes(image)
        if data is not None and len(data) > self.upload_over_bytes:
            image = (await self.upload(data)).key
        body = _core.job_body(image, prompt, options)
        return Job.model_validate(await self._call("POST", "/v1/jobs", json=body, headers=headers))

    async def submit_many(self, jobs: Sequence[Mapping[str, Any]]) -> list[BatchResult]:
        """Up to 500 jobs in one request, each ``{"image", "prompt", ...options}``; results in
        order, each with its job or its error. Items without an ``idempotency_key`` get one."""
        items = [_core.batch_item(job) for job in jobs]
        answer = await self._call("POST", "/v1/jobs/batch", json={"jobs": items})
        return [BatchResult.model_validate(result) for result in answer["results"]]

    async def models(self) -> dict[str, Any]:
        """The region's deployments (current weights) and versions: what ``model=`` takes."""
        answer: dict[str, Any] = await self._call("GET", "/v1/models")
        return answer

    async def get(self, job_id: str, *, wait: float | None = None) -> Job:
        headers = {"Prefer": f"wait={min(int(wait), _core.MAX_PREFER_WAIT_S)}"} if wait else {}
        return Job.model_validate(await self._call("GET", f"/v1/jobs/{job_id}", headers=headers))

    async def wait(self, job_id: str, timeout: float = 300.0) -> Job:
        """The job once terminal; :class:`WaitTimeout` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            job = await self.get(job_id, wait=max(1.0, min(remaining, _core.MAX_PREFER_WAIT_S)))
            if job.terminal:
                return job
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"job {job_id} still {job.status} after {timeout} s")

    async def stream(
        self, job_id: str, last_event_id: str | None = None, *, logs: bool = False
    ) -> AsyncIterator[Event]:
        """The job's live events up to its terminal one; a dropped connection is resumed:
        ``queued`` (``queue_position``, 0 = next to start, and ``estimated_start_at``, a Unix
        time, once the region has run a job to measure from), ``started``, ``progress``
        (``step``, ``total``) per denoising step, then one of ``succeeded``, ``failed``,
        ``canceled``, ``expired``. With ``logs``, also its log lines as ``log`` events."""
        parser = _core.EventParser(last_event_id)
        params = {"logs": "true"} if logs else {}
        for _ in range(self.max_retries + 1):
            headers = {"Last-Event-ID": parser.last_id} if parser.last_id else {}
            try:
                async with self.http.stream(
                    "GET", f"/v1/jobs/{job_id}/events", headers=headers, params=params
                ) as response:
                    if not response.is_success:
                        await response.aread()
                        _core.checked(response)
                    async for line in response.aiter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            yield event
                            if event.terminal:
                                return
            except (httpx.ReadError, httpx.RemoteProtocolError, httpx.ReadTimeout):
                continue  # resume after the last event seen

    async def cancel(self, job_id: str) -> Job:
        return Job.model_validate(await self._call("POST", f"/v1/jobs/{job_id}/cancel"))

    async def list(
        self,
        *,
        status: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        cursor: str | None = None,
        limit: int = 20,
    ) -> JobPage:
        params = _core.list_params(status, created_after, created_before, cursor, limit)
        return JobPage.model_validate(await self._call("GET", "/v1/jobs", params=params))

    async def iter_jobs(self, **filters: Any) -> AsyncIterator[Job]:
        """Every job matching ``filters`` (those of :meth:`list`), newest first."""
        cursor = None
        while True:
            page = await self.list(cursor=cursor, **filters)
            for job in page.jobs:
                yield job
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def download(self, job: Job | str, path: str | Path | None = None) -> bytes:
        """The job's MP4 (from its signed output URL, read afresh); also written to ``path``."""
        current = await self.get(job if isinstance(job, str) else job.id)  # a fresh URL
        url = _core.output_url(current)
        async with httpx.AsyncClient(timeout=self.http.timeout) as plain:  # key stays with API
            response = await plain.get(url)
            response.raise_for_status()
        if path is not None:
            Path(path).write_bytes(response.content)
        return response.content

    async def upload(self, image: bytes | str | Path) -> StoredUpload:
        """Put an image (bytes or a file) in the region's storage once; the answer's ``key`` is
        usable as a job's ``image``, ``mask`` or an add-on's ``image``, by this tenant only.
        The bytes go straight to storage through a presigned upload; a region whose storage
        cannot sign one takes them itself (``POST /v1/uploads/direct``)."""
        data = _core.image_bytes(image)
        if data is None:
            raise ValueError(f"image: an upload needs bytes or a file (got {str(image)[:80]!r})")
        kind = _core.image_type(data)
        try:
            answer = await self._call("POST", "/v1/uploads", json={"content_type": kind})
        except RequestRefused as refused:
            if refused.code != "presign_unsupported":
                raise
            stored = await self._call(
                "POST", "/v1/uploads/direct", content=data, headers={"Content-Type": kind}
            )
            return StoredUpload.model_validate(stored)
        ticket = PresignedUpload.model_validate(answer)
        async with httpx.AsyncClient(timeout=self.http.timeout) as plain:  # key stays with API
            response = await plain.post(
                ticket.url, data=ticket.fields, files={"file": ("upload", data, kind)}
            )
            response.raise_for_status()
        return StoredUpload(key=ticket.key, content_type=kind, bytes=len(data))

    async def logs(self, job_id: str, *, level: str | None = None) -> JobLog:
        """What the fleet's processes logged about the job, oldest first (at ``level`` or
        above: debug, info, warning, error)."""
        params = {"level": level} if level else {}
        answer = await self._call("GET", f"/v1/jobs/{job_id}/logs", params=params)
        return JobLog.model_validate(answer)

    async def delete(self, job_id: str) -> DeletedJob:
        """Erase the job (canceled first if not ended): outputs, its uploads, record and log.
        It then answers 410 ``deleted``, and so does a retried submit with its idempotency
        key."""
        return DeletedJob.model_validate(await self._call("DELETE", f"/v1/jobs/{job_id}"))

    async def usage(self, from_day: str | None = None, to_day: str | None = None) -> Usage:
        """This tenant's use by day (UTC): jobs by outcome, GPU-seconds, frames x pixels,
        output bytes, deletions; days as YYYY-MM-DD (default: the last 30 days)."""
        params = {name: day for name, day in (("from", from_day), ("to", to_day)) if day}
        return Usage.model_validate(await self._call("GET", "/v1/usage", params=params))
