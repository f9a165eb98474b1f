"""``GET /v1/models``: the deployments and model versions a job may ask for in ``model``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from animfleet.versions import DEFAULT_DEPLOYMENT
from dispatcher.gateway.auth import CallerDep
from dispatcher.gateway.schemas import ErrorResponse
from dispatcher.gateway.views import runtime_of

router = APIRouter(prefix="/v1")


class VersionView(BaseModel):
    ref: str = Field(description="name@version: pass as `model` to pin it")
    hash: str = Field(description="sha256 over the version's files: what a worker verifies")
    bytes: int
    pushed_at: float


class DeploymentView(BaseModel):
    name: str = Field(description="pass as `model`; `default` serves jobs that name none")
    stable: str
    weights: dict[str, float] = Field(description="share of new jobs per version (0: none)")
    updated_at: float


class Models(BaseModel):
    region: str
    default: str | None = Field(description="the deployment of jobs without `model`, if any")
    deployments: list[DeploymentView]
    versions: list[VersionView]


@router.get("/models", response_model=Models, responses={401: {"model": ErrorResponse}})
def list_models(request: Request, caller: CallerDep) -> Models:
    """The home region's deployments (with their current weights: a rolled-back canary shows
    0) and the versions of its registry."""
    del caller  # any tenant may see what it can run
    runtime = runtime_of(request)
    region = runtime.settings.region
    deployments, versions = runtime.client.versions.listing(region)
    return Models(
        region=region,
        default=DEFAULT_DEPLOYMENT if DEFAULT_DEPLOYMENT in deployments else None,
        deployments=[
            DeploymentView(name=name, stable=d.stable, weights=d.versions, updated_at=d.updated_at)
            for name, d in deployments.items()
        ],
        versions=[
            VersionView(ref=e.ref, hash=e.hash, bytes=e.bytes, pushed_at=e.pushed_at)
            for e in versions
        ],
    )
