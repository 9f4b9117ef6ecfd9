"""bench/bench_fold_stage.py runs, and its routed records are what a route stage writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_fold_stage_bench_runs_and_folds_every_event():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_fold_stage.py"), "--events", "3000",
                        "--repeats", "1", "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    assert report["events"] >= 3000 and report["records"] > 0 and report["published"] > 0
    for key in ("core_us", "referee_us", "decode_us", "encode_us", "stage_us", "interleaved_us", "handed_us"):
        assert report[key] > 0


def test_its_records_fold_every_event_it_generated():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import bench_fold_stage as bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    from streams.codec import Codec
    from streams.referee.input import fold_batch
    from streams.referee.referee import Referee

    codec = Codec()
    n, records = bench.routed_records(codec, 3000, 4, 500)
    ref = Referee()
    folded = sum(fold_batch(codec, ref, value, p, i, bench.T0 + i, True, None, None)[0]
                 for i, (p, value) in enumerate(records))
    assert folded == n
    assert ref.stats.events == n and ref.stats.rejected == 0 and ref.stats.duplicates == 0
