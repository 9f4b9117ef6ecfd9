"""The shipped Grafana dashboard (issue 26): the committed JSON is what
``deploy/grafana/dashboard.py`` builds with Grafana's Foundation SDK, and no panel queries a
metric a worker does not expose."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("grafana_foundation_sdk")

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "deploy" / "grafana" / "dashboard.py"
SHIPPED = REPO / "deploy" / "grafana" / "traintrace-dashboard.json"


def _builder():
    spec = importlib.util.spec_from_file_location("traintrace_dashboard", BUILDER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_dashboard_is_what_the_builder_builds():
    assert SHIPPED.read_text() == _builder().render(), "run: python deploy/grafana/dashboard.py > " + str(SHIPPED)


def test_every_panel_queries_a_metric_a_worker_exposes():
    from streams.worker import metrics

    names = {"up"}
    for m in metrics.REGISTRY.collect():
        names |= {m.name, m.name + "_total", m.name + "_bucket", m.name + "_count", m.name + "_sum"}
    dash = json.loads(SHIPPED.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets") or ()]
    assert len(exprs) >= 10
    used = {m for e in exprs for m in re.findall(r"\b(traintrace_[a-z_]+|up)\b(?=\{|\[|\))", e)}
    assert used and used <= names, used - names
