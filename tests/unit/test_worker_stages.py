"""``traintrace worker --stages``: which stages a worker runs and the group it joins (docs/pipeline.md)."""

from __future__ import annotations

import pytest

from streams.worker.settings import WorkerSettings, route_group


@pytest.mark.parametrize("stages, routes, folds, group, routing", [
    ("all", True, True, "tt", "tt"),
    ("route", True, False, "tt-route", "tt-route"),
    # a fold worker's grace periods run on how far the route workers routed (streams.worker.clock)
    ("fold", False, True, "tt", "tt-route"),
])
def test_a_worker_runs_its_stages_in_its_group(stages, routes, folds, group, routing):
    s = WorkerSettings(bootstrap="k:1", app_id="tt", stages=stages)
    assert (s.routes, s.folds, s.group_id, s.routing_group) == (routes, folds, group, routing)


def test_route_workers_have_a_group_of_their_own_under_the_app_ids_prefix():
    # the processor's ACLs grant groups by the app id's prefix (streams.kafka.acls): the route group is covered
    assert route_group("traintrace") == "traintrace-route"
    assert route_group("tt").startswith("tt")


def test_the_environment_names_a_bad_stage(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k:1")
    monkeypatch.setenv("TRAINTRACE_STAGES", "both")
    with pytest.raises(ValueError, match="TRAINTRACE_STAGES"):
        WorkerSettings.from_env()
