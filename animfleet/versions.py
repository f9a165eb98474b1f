"""Model versions and deployments by name: what a job may ask for in its ``model`` field.

A version is ``name@version`` (``animfleet-small-distilled@3``): one ``from_pretrained``
directory in a region's model registry, pinned by its content hash. A deployment is a bare name
(``default``, ``rollout``) that a region maps to weighted versions. The dispatcher picks one
version per job and records it; workers run exactly that version.
"""

from __future__ import annotations

import hashlib
import re

from animfleet.errors import PermanentError
from animfleet_api.bounds import NAME

VERSION_REF = re.compile(rf"^{NAME}@{NAME}$")
DEPLOYMENT_NAME = re.compile(rf"^{NAME}$")
# The deployment a job without ``model`` uses, when its region has one.
DEFAULT_DEPLOYMENT = "default"


class BadVersionRef(PermanentError, ValueError):
    """Not ``name@version``."""


def is_pinned(model: str) -> bool:
    """Whether ``model`` names one version (``name@version``) rather than a deployment."""
    return "@" in model


def split_ref(ref: str) -> tuple[str, str]:
    """(name, version) of ``name@version``; raises :class:`BadVersionRef`."""
    if not VERSION_REF.match(ref):
        raise BadVersionRef(
            f"a model version is name@version (lowercase letters, digits, '.', '_', '-'), "
            f"got {ref[:140]!r}"
        )
    name, _, version = ref.partition("@")
    return name, version


def sticky_fraction(key: str) -> float:
    """A number in [0, 1) fixed by ``key``: the same idempotency key (or job id) always lands on
    the same side of a deployment's weights, so a retried submit gets the same version."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
