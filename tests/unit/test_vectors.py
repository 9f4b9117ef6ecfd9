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
