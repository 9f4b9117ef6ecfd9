"""Every vector of ../shared/scenarios, through the core and through `traintrace analyze --json`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from streams.cli.main import cli
from streams.core.decide import Lineage
from streams.core.events import parse_event
from streams.core.project import final_state
from streams.core.state import fold_all

from .vectors import comparable, load_expected, load_lines, mismatches, scenarios_dir, vector_names

NAMES = vector_names()


def test_all_vectors_present():
    assert len(NAMES) >= 15


@pytest.mark.parametrize("name", NAMES)
def test_vector_batch(name):
    events = [parse_event(d) for d in load_lines(name)]
    lin = Lineage()
    lin.apply_many(events)
    lin.finish_input()
    got = comparable(lin.final_state())
    problems = mismatches(load_expected(name), got)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", NAMES)
def test_vector_event_by_event_equals_from_scratch(name):
    """Deciding after every event (the live path) ends where the from-scratch projection does."""
    events = [parse_event(d) for d in load_lines(name)]
    lin = Lineage()
    for ev in events:
        lin.apply(ev)
    lin.finish_input()
    assert lin.final_state() == final_state(fold_all(events))


@pytest.mark.parametrize("name", NAMES)
def test_vector_through_cli(name):
    result = CliRunner().invoke(cli, ["analyze", str(scenarios_dir() / f"{name}.jsonl"), "--json"])
    assert result.exit_code == 0, result.output
    got = comparable(json.loads(result.output))
    problems = mismatches(load_expected(name), got)
    assert not problems, "\n".join(problems)


def test_cohorts_fold_separately_and_merge_like_one_log():
    """Several vectors side by side (renamed into separate cohorts) give each vector's answer."""
    from streams.core.cohorts import CohortLineage

    names = ["01_seed_example", "10_content_alias", "13_duplicates", "14_pbt_cohort"]
    events = []
    for i, name in enumerate(names):
        for d in load_lines(name):
            d = dict(d)
            for key in ("job_id", "checkpoint_id", "source_checkpoint_id", "base_checkpoint_id",
                        "restored_checkpoint_id", "final_checkpoint_id", "cohort_id"):
                if d.get(key) is not None:
                    d[key] = f"v{i}-{d[key]}"
            events.append(parse_event(d))
    together = CohortLineage()
    together.apply_many(events)
    together.finish_input()
    merged = together.final_state()
    n_incidents = sum(len(load_expected(n)["incidents"]) for n in names)
    n_plans = sum(len(load_expected(n)["plans"]) for n in names)
    n_tainted = sum(len(load_expected(n)["tainted_checkpoints"]) for n in names)
    assert (len(merged["incidents"]), len(merged["plans"]), len(merged["tainted_checkpoints"])) == (
        n_incidents, n_plans, n_tainted)
    assert sorted(merged["tainted_checkpoints"]) == sorted(
        f"v{i}-{c}" for i, n in enumerate(names) for c in load_expected(n)["tainted_checkpoints"])


def test_unregistered_job_is_its_own_bucket():
    from streams.core.cohorts import UNREGISTERED_COHORT, CohortLineage

    lin = CohortLineage()
    lin.apply_many(parse_event(d) for d in load_lines("07_ledger_gap_unregistered"))
    assert UNREGISTERED_COHORT in lin.cohorts
    assert [(h["job_id"], h["reason"]) for h in lin.final_state()["halts"]] == [
        ("A", "LEDGER_GAP"), ("X", "UNREGISTERED")]
