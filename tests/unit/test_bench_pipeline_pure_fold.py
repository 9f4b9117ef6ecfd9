"""bench/bench_pipeline.py measures the pure fold of its own events in the same run (issue 27: the
live cost per event ÷ the pure fold's), folding every event it would produce."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_pure_fold_of_the_bench_events_is_timed():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import bench_pipeline as bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    args = argparse.Namespace(events=3000, progress_every=10, seals="off", seal_every=64)
    events, jobs = bench.bench_events(args)
    assert jobs >= 20 and len(list(events)) >= 3000
    assert bench.pure_fold_us(args, repeats=1) > 0
