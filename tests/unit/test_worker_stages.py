"""``traintrace worker --stages``: which stages a worker runs and the group it joins (docs/pipeline.md)."""

from __future__ import annotations

import pytest

from streams.worker.settings import WorkerSettings, route_group


@pytest.mark.parametrize("stages, routes, folds, group", [
    ("all", True, True, "tt"),
    ("route", True, False, "tt-route"),
    ("fold", False, True, "tt"),
])
def test_a_worker_runs_its_stages_in_its_group(stages, routes, folds, group):
    s = WorkerSettings(bootstrap="k:1", app_id="tt", stages=stages)
    assert (s.routes, s.folds, s.group_id) == (routes, folds, group)


def test_route_workers_have_a_group_of_their_own_under_the_app_ids_prefix():
    # the processor's ACLs grant groups by the app id's prefix (streams.kafka.acls): the route group is covered
    assert route_group("traintrace") == "traintrace-route"
    assert route_group("tt").startswith("tt")


def test_the_environment_names_a_bad_stage(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k:1")
    monkeypatch.setenv("TRAINTRACE_STAGES", "both")
    with pytest.raises(ValueError, match="TRAINTRACE_STAGES"):
        WorkerSettings.from_env()
