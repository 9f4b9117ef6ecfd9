"""check_pipeline waits out the grace period only when a consumption's source is never written
(streams.testing.invariants.every_source_written): the shared vectors say which."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.audit.analyze import analyze_file
from streams.testing.invariants import every_source_written

SCENARIOS = Path(__file__).resolve().parents[3] / "shared" / "scenarios"


def _analysis(name: str):
    path = SCENARIOS / f"{name}.jsonl"
    if not path.exists():
        pytest.skip(f"no {path}")
    return analyze_file(str(path))


def test_an_unwritten_source_needs_the_grace_period() -> None:
    analysis = _analysis("06_guard_untraceable")
    assert any(h["reason"] == "UNTRACEABLE_SOURCE" for h in analysis.result["halts"])
    assert not every_source_written(analysis)


@pytest.mark.parametrize("name", ["01_seed_example", "02_clean_consumer", "03_transitive_chain"])
def test_logs_whose_sources_are_all_written_need_no_wait(name: str) -> None:
    analysis = _analysis(name)
    assert not any(h["reason"] == "UNTRACEABLE_SOURCE" for h in analysis.result["halts"])
    assert every_source_written(analysis)


def test_a_parallel_analysis_is_not_known() -> None:
    class Forked:  # analyze_file with processes > 1 keeps no engines
        lineage = None

    assert not every_source_written(Forked())
