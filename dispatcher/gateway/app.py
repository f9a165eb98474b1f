"""The HTTP gateway (``animfleet web``): FastAPI app factory and server entry point."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.middleware.base import RequestResponseEndpoint

from animfleet import logs
from animfleet.region.joblogs import keep_job_logs
from animfleet.region.ratelimit import Decision
from animfleet.topology import Topology
from dispatcher import metrics
from dispatcher.client import Client
from dispatcher.decode_budget import DECODES
from dispatcher.gateway import (
    deletion,
    errors,
    events,
    joblog,
    listing,
    model_catalog,
    options,
    playground,
    uploads,
    usage,
)
from dispatcher.gateway.auth import rate_limit_headers
from dispatcher.gateway.bodylimit import BodyLimit
from dispatcher.gateway.routes import router
from dispatcher.gateway.runtime import Runtime
from dispatcher.gateway.server import server_config
from dispatcher.gateway.settings import GatewaySettings
from dispatcher.tenancy import Tenancy

# Operation ids are what generated clients name their methods: camelCase of the handler's
# name, or this name.
OPERATION_IDS = {
    "regions": "listRegions",
    "job_events": "streamJobEvents",
    "create_jobs": "createJobBatch",
}


def operation_id(route: APIRoute) -> str:
    """``createJob`` for the handler ``create_job``."""
    first, *rest = OPERATION_IDS.get(route.name, route.name).split("_")
    return first + "".join(word.title() for word in rest)


def create_app(client: Client, settings: GatewaySettings) -> FastAPI:
    """The gateway serving jobs whose home is ``settings.region``; OpenAPI at ``/openapi.json``."""
    client.topology.region(settings.region)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Handlers run in threads, and a ``Prefer: wait`` request holds one for up to 60 s.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.threads
        yield

    app = FastAPI(
        generate_unique_id_function=operation_id,
        title="animfleet",
        version="1",
        summary="Animate a still image: enqueue, follow, cancel, get notified.",
        lifespan=lifespan,
    )
    app.state.runtime = Runtime(client=client, settings=settings)
    DECODES.pixels = settings.decode_pixels
    keep_job_logs({name: client.store(name).redis for name in client.topology.names})
    app.state.tenancy = Tenancy(client, settings.region)
    errors.install(app)
    app.include_router(listing.router)  # GET /v1/jobs before the job routes' templates
    app.include_router(joblog.router)
    app.include_router(deletion.router)
    app.include_router(router)
    app.include_router(events.router)
    app.include_router(model_catalog.router)
    app.include_router(playground.router)
    app.include_router(options.router)
    app.include_router(uploads.router)
    app.include_router(usage.router)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        """This gateway's submits, spillover, backoffs, rejections and responses."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.middleware("http")
    async def count_responses(request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        decision = getattr(request.state, "rate_limit", None)
        if decision is not None:
            response.headers.update(rate_limit_headers(decision))
        route = request.scope.get("route")
        template = getattr(route, "path", "unmatched")  # a template: bounded label values
        metrics.HTTP_RESPONSES.labels(request.method, template, response.status_code).inc()
        return response

    # Outermost: a body past the cap is refused before any other layer reads it.
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "PUT", "DELETE", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Prefer"],
            expose_headers=[
                "Location",
                "Retry-After",
                "Idempotent-Replayed",
                "WWW-Authenticate",
                *rate_limit_headers(Decision(allowed=True, retry_after_s=0)),
            ],
            max_age=600,
        )
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        timeout_s=settings.body_timeout_s,
        deadline_s=settings.body_deadline_s,
    )
    return app


def run_gateway(topology: Topology, region: str, host: str, port: int) -> None:
    """Serve the gateway in the foreground."""
    logs.configure()
    settings = GatewaySettings.from_env(region)
    app = create_app(Client(topology), settings)
    uvicorn.Server(server_config(app, settings, host, port)).run()
