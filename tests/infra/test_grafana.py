"""The Grafana dashboard is valid JSON and every metric it queries is one we define."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import dispatcher.metrics
import workers.metrics

DASHBOARD = Path(__file__).parents[2] / "infra" / "grafana" / "animfleet.json"
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def defined_metric_names() -> set[str]:
    assert dispatcher.metrics.JOBS_SUBMITTED and workers.metrics.JOBS_FINISHED  # registered
    names: set[str] = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES)
    return names


def test_dashboard_queries_only_metrics_that_exist() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\banimfleet_[a-z_]+", expr)}
    assert len(used) >= 15
    assert used - defined_metric_names() == set()
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
