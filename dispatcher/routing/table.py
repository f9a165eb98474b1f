"""The routing table: for each source region, the share of new jobs each region should take."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SHARE_TOLERANCE = 1e-6
FORMAT_VERSION = 1


@dataclass(frozen=True)
class RoutingTable:
    """Per source region, the share of its new jobs that each target region should take.

    ``shares[source]`` maps target regions to non-negative shares that sum to 1.
    ``fallback[source]`` lists regions, nearest first, to try in order when every weighted
    target is full (a static spill list; the ring router leaves it empty). A source with no
    shares at all (every region it may use is down) gets no region.

    Example:
        >>> table = RoutingTable({"eu": {"eu": 0.75, "us": 0.25}, "us": {"us": 1.0}})
        >>> table.choose("eu", random.Random(1), admissible=lambda region: region != "eu")
        'us'
        >>> RoutingTable.from_json(table.to_json()) == table
        True
    """

    shares: Mapping[str, Mapping[str, float]]
    fallback: Mapping[str, Sequence[str]] = field(default_factory=dict)
    computed_at: float = 0.0

    def __post_init__(self) -> None:
        shares = {source: dict(targets) for source, targets in self.shares.items()}
        for source, targets in shares.items():
            for target, share in targets.items():
                if not (share >= 0 and math.isfinite(share)):
                    raise ValueError(f"share {source!r} -> {target!r} must be >= 0, got {share}")
            total = sum(targets.values())
            if targets and abs(total - 1.0) > SHARE_TOLERANCE:
                raise ValueError(f"shares of source {source!r} must sum to 1, got {total}")
        object.__setattr__(self, "shares", shares)
        fallback = {source: tuple(regions) for source, regions in self.fallback.items()}
        object.__setattr__(self, "fallback", fallback)

    def share(self, source: str, target: str) -> float:
        """The share of ``source``'s new jobs that ``target`` should take (0 if not listed)."""
        return self.shares.get(source, {}).get(target, 0.0)

    def targets(self, source: str) -> list[str]:
        """Regions with a positive share for ``source``, largest share first."""
        listed = self.shares.get(source, {})
        return sorted((t for t, s in listed.items() if s > 0), key=lambda t: (-listed[t], t))

    def choose(
        self, source: str, rng: random.Random, admissible: Callable[[str], bool]
    ) -> str | None:
        """Pick the region for one new job from ``source``.

        Draws a target with probability proportional to its share among the targets for which
        ``admissible(target)`` is true; when none is, the first admissible region of the
        source's fallback list. A source missing from the table (a region added since the
        table was written) is kept home. Returns ``None`` when no region can take the job.
        """
        listed = self.shares.get(source)
        if listed is None:
            return source if admissible(source) else None
        open_targets = [(t, s) for t, s in listed.items() if s > 0 and admissible(t)]
        if open_targets:
            draw = rng.random() * sum(s for _, s in open_targets)
            for target, share in open_targets:
                draw -= share
                if draw < 0:
                    return target
            return open_targets[-1][0]
        for target in self.fallback.get(source, ()):
            if admissible(target):
                return target
        return None

    def to_json(self) -> str:
        """Serialize to a JSON document (stable key order), readable by :meth:`from_json`."""
        document = {
            "version": FORMAT_VERSION,
            "computed_at": self.computed_at,
            "shares": {s: dict(sorted(t.items())) for s, t in sorted(self.shares.items())},
            "fallback": {s: list(r) for s, r in sorted(self.fallback.items()) if r},
        }
        return json.dumps(document, sort_keys=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> RoutingTable:
        """Parse a document written by :meth:`to_json`; raises ``ValueError`` when malformed."""
        document: Any = json.loads(text)
        if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
            raise ValueError(f"not a version-{FORMAT_VERSION} routing table document")
        shares = document.get("shares")
        if not isinstance(shares, dict) or not all(isinstance(v, dict) for v in shares.values()):
            raise ValueError("routing table `shares` must map sources to {target: share}")
        return cls(
            shares={str(s): {str(t): float(v) for t, v in ts.items()} for s, ts in shares.items()},
            fallback={
                str(s): [str(r) for r in rs] for s, rs in document.get("fallback", {}).items()
            },
            computed_at=float(document.get("computed_at", 0.0)),
        )

    @classmethod
    def home_only(cls, regions: Sequence[str], computed_at: float = 0.0) -> RoutingTable:
        """Every region keeps all of its own traffic."""
        return cls({region: {region: 1.0} for region in regions}, computed_at=computed_at)
