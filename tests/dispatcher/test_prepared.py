"""A job's inputs computed once at the edge: one pixel check and one digest of the image per
submit, carried down to the record; the job listed under its tenant by the admission itself."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
import redis
from PIL import ImageFile

from animfleet.job_inputs import JobInputs
from animfleet.region.keys import INPUT_KEY, TENANT_IN_FLIGHT, TENANT_JOBS
from animfleet.region.workers import WorkerRegistry
from animfleet.topology import Topology
from dispatcher import Client, inputs
from dispatcher.admission import AdmissionSettings
from dispatcher.inputs import InvalidInput, parse_request
from dispatcher.prepared import CheckedImage, ImageChecks, PreparedInputs
from dispatcher.records import fingerprint

SETTINGS = AdmissionSettings(retry_budget_s=0.0, max_attempts=1)


@pytest.fixture
def client(
    regions_on_redis: Callable[..., Topology], redis_client: redis.Redis
) -> Iterator[Client]:
    found = Client(regions_on_redis("one", "two"), admission=SETTINGS)
    abroad = found.store("two").redis
    abroad.flushdb()
    yield found
    abroad.flushdb()
    found.close()


def test_the_fingerprint_is_the_one_from_before_the_digest_was_shared() -> None:
    """Idempotency keys bound before survive: the same bytes hash to the same fingerprint."""
    image, mask = b"image bytes", b"mask bytes"
    request = parse_request(prompt="sway", width=64, height=64)
    for given in (None, mask):
        before = hashlib.sha256(image)
        if given is not None:
            before.update(b"mask:" + hashlib.sha256(given).digest())
        unused = {"addons", "regions", "loop", "negative_prompt", "guidance"}  # fields added later
        before.update(request.model_dump_json(exclude=unused).encode())
        before.update(b"east")
        digest = None if given is None else hashlib.sha256(given).hexdigest()
        inputs = PreparedInputs.of(image, CheckedImage.known(image, 64, 64), given, digest)
        assert fingerprint(inputs, request, "east") == before.hexdigest()
        assert inputs.image_sha256 == hashlib.sha256(image).hexdigest()
        assert JobInputs.unpack(inputs.packed) == JobInputs(image, {"mask": given} if given else {})


def test_a_submit_decodes_and_hashes_the_image_once_and_the_record_carries_the_digest(
    client: Client, redis_client: redis.Redis, make_image: Callable[..., bytes]
) -> None:
    db = redis_client
    WorkerRegistry(db, "one").beat("gpu0", {}, ttl_s=60, busy=False)
    image = make_image(seed=3)
    decodes, digests = [], []  # pixel checks (a full decode or the PNG stream's), digests
    load, sha256, pixels = ImageFile.ImageFile.load, hashlib.sha256, inputs.pixels_intact

    def counted_load(self: ImageFile.ImageFile) -> object:
        decodes.append(1)
        return load(self)

    def counted_pixels(*args: Any) -> bool:
        decodes.append(1)
        return pixels(*args)

    def counted_sha256(*args: object, **kwargs: object) -> object:
        digests.append(1)
        return sha256(*args, **kwargs)  # type: ignore[arg-type]

    with (
        mock.patch.object(ImageFile.ImageFile, "load", counted_load),
        mock.patch.object(inputs, "pixels_intact", counted_pixels),
        mock.patch.object(hashlib, "sha256", counted_sha256),
    ):
        handle = client.submit(image, "sway", home_region="one", idempotency_key="k", tenant="t")
    assert (len(decodes), len(digests)) == (1, 1)
    stored = client.get(handle.id)
    assert stored.params.image_sha256 == sha256(image).hexdigest()
    assert handle.record == stored  # what the gateway answers with: no read back
    assert db.get(INPUT_KEY + handle.id) == image
    # Listed under its tenant and counted in flight by the admission script itself.
    assert db.zscore(TENANT_JOBS + "t", handle.id) == stored.created_at
    assert db.zscore(TENANT_IN_FLIGHT + "t", handle.id) == stored.created_at
    with (
        mock.patch.object(ImageFile.ImageFile, "load", counted_load),
        mock.patch.object(inputs, "pixels_intact", counted_pixels),
        mock.patch.object(hashlib, "sha256", counted_sha256),
    ):
        again = client.submit(image, "sway", home_region="one", idempotency_key="k", tenant="t")
    assert (again.id, again.created, again.record) == (handle.id, False, None)
    assert db.zcard(TENANT_JOBS + "t") == 1
    # The same bytes again: hashed, but not decoded again (the check remembers its answer).
    assert (len(decodes), len(digests)) == (1, 2)


def test_image_checks_refuse_what_check_image_refuses_and_forget_the_oldest(
    make_image: Callable[..., bytes],
) -> None:
    checks = ImageChecks(most=2)
    images = [make_image(width=16 * (n + 1), height=8, seed=n) for n in range(3)]
    for image in images:
        checked = checks.check(image)
        assert (checked.sha256, checked.height) == (sha256_hex(image), 8)
    assert len(checks._sizes) == 2 and sha256_hex(images[0]) not in checks._sizes
    with pytest.raises(InvalidInput, match="image: must be bytes"):
        checks.check("not bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="image: could not be decoded"):
        checks.check(images[2][:-40])  # truncated: a new digest, checked in full


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_job_admitted_abroad_is_listed_at_home(
    client: Client, redis_client: redis.Redis, make_image: Callable[..., bytes]
) -> None:
    """The admission script lists a job under its tenant only in its own region's Redis: a job
    taken in by another region is listed in its home region's afterwards."""
    abroad = client.store("two").redis
    WorkerRegistry(abroad, "two").beat("gpu0", {}, ttl_s=60, busy=False)
    image = make_image(seed=4)
    request = parse_request(prompt="sway", width=64, height=64, tenant="t")
    inputs = PreparedInputs.of(image, ImageChecks().check(image))
    print_ = fingerprint(inputs, request, "one")
    handle = client._admit("two", "one", request, inputs, None, "k2", print_)
    assert handle is not None and handle.region == "two" and handle.record is not None
    assert abroad.zscore(TENANT_JOBS + "t", handle.id) is None
    created = handle.record.created_at
    assert redis_client.zscore(TENANT_JOBS + "t", handle.id) == created
    assert redis_client.zscore(TENANT_IN_FLIGHT + "t", handle.id) == created
