"""Benchmark of the lineage core and `traintrace analyze` (issue 3).

Measures, in one run:
1. ``traintrace analyze FILE --json`` on a generated cohort log (default 1M events over 10k
   jobs): wall time and peak memory of the process;
2. the per-event fold cost after 100k and after 1M events of history: the same probe batch of
   fresh events is folded on top of each history; the ratio shows whether the cost is flat.

Usage: python bench/bench_core.py [--events 1000000] [--jobs 10000] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streams.core.decide import Lineage  # noqa: E402
from streams.core.events import parse_event  # noqa: E402
from streams.testing.cohort import generate_cohorts  # noqa: E402

STEPS = 800  # ~100 events per job with the generator's defaults


def cohort_events(jobs: int, seed: int, prefix: str, t0: int = 1_760_000_000_000):
    return generate_cohorts(jobs=jobs, cohort_size=20, steps=STEPS, seed=seed, prefix=prefix, t0=t0)


def write_log(path: Path, jobs: int) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for ev in cohort_events(jobs, seed=7, prefix="j"):
            fh.write(json.dumps(ev))
            fh.write("\n")
            n += 1
    return n


def run_analyze(path: Path) -> dict:
    cmd = [sys.executable, "-m", "streams", "analyze", str(path), "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"analyze failed: {proc.stderr.decode()[-2000:]}")
    out = json.loads(proc.stdout)
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_rss_mb": after.ru_maxrss / 1024,  # Linux: KiB
        "incidents": len(out["incidents"]),
        "plans": len(out["plans"]),
        "halts": len(out["halts"]),
        "tainted": len(out["tainted_checkpoints"]),
        "alerts": len(out["alerts"]),
    }


def probe_cost(history_events: int, probe: list, jobs_per_100k: int = 1000, repeats: int = 3) -> float:
    """Seconds per event to fold (and decide on) ``probe`` after ``history_events`` of history."""
    lin = Lineage()
    jobs = max(1, history_events * jobs_per_100k // 100_000)
    n = 0
    for d in cohort_events(jobs, seed=11, prefix="h"):
        lin.fold(parse_event(d))
        n += 1
    lin.decide()
    best = float("inf")
    for r in range(repeats):
        # a fresh copy of the probe per repeat: the same events under other job ids
        batch = [_rename(ev, f"p{r}") for ev in probe]
        gc.collect()
        t = time.perf_counter()
        for ev in batch:
            lin.apply(ev)
        best = min(best, (time.perf_counter() - t) / len(batch))
    return best, n


def _rename(ev, tag: str):
    from dataclasses import replace

    fields = {"job_id": tag + ev.job_id}
    if hasattr(ev, "checkpoint_id"):
        fields["checkpoint_id"] = tag + ev.checkpoint_id
    if hasattr(ev, "source_checkpoint_id"):
        fields["source_checkpoint_id"] = tag + ev.source_checkpoint_id
    if getattr(ev, "restored_checkpoint_id", None):
        fields["restored_checkpoint_id"] = tag + ev.restored_checkpoint_id
    if getattr(ev, "final_checkpoint_id", None):
        fields["final_checkpoint_id"] = tag + ev.final_checkpoint_id
    return replace(ev, **fields)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000, help="events in the analyze log")
    ap.add_argument("--jobs", type=int, default=10_000, help="jobs in the analyze log")
    ap.add_argument("--small-history", type=int, default=100_000)
    ap.add_argument("--large-history", type=int, default=1_000_000)
    ap.add_argument("--probe-events", type=int, default=20_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    report: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "cohort.jsonl"
        jobs = args.jobs
        t = time.perf_counter()
        n = write_log(log, jobs)
        report["log"] = {"events": n, "jobs": jobs, "bytes": os.path.getsize(log),
                         "generate_s": time.perf_counter() - t}
        report["analyze"] = run_analyze(log)
        report["analyze"]["events_per_s"] = n / report["analyze"]["wall_s"]

    probe = [parse_event(d) for d in cohort_events(max(1, args.probe_events // 100), seed=99, prefix="q",
                                                   t0=1_800_000_000_000)]
    small, n_small = probe_cost(args.small_history, probe)
    large, n_large = probe_cost(args.large_history, probe)
    report["fold_cost"] = {
        "probe_events": len(probe),
        "history_small": n_small,
        "history_large": n_large,
        "us_per_event_small": small * 1e6,
        "us_per_event_large": large * 1e6,
        "ratio_large_over_small": large / small,
    }

    if args.json:
        print(json.dumps(report, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    a, f, lg = report["analyze"], report["fold_cost"], report["log"]
    table = Table(title="traintrace core benchmark", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("goal", justify="right")
    table.add_row("log", f"{lg['events']:,} events, {lg['jobs']:,} jobs, {lg['bytes'] / 1e6:.0f} MB", "")
    table.add_row("analyze wall time", f"{a['wall_s']:.1f} s", "<= 30 s")
    table.add_row("analyze rate", f"{a['events_per_s']:,.0f} events/s", "")
    table.add_row("analyze peak memory", f"{a['peak_rss_mb']:.0f} MB", "<= 1024 MB")
    table.add_row("result", f"{a['incidents']} incidents, {a['plans']} plans, {a['tainted']} tainted, "
                  f"{a['alerts']} alerts", "")
    table.add_row(f"fold+decide cost after {f['history_small']:,} events", f"{f['us_per_event_small']:.1f} us/event", "")
    table.add_row(f"fold+decide cost after {f['history_large']:,} events", f"{f['us_per_event_large']:.1f} us/event", "")
    table.add_row("ratio large / small history", f"{f['ratio_large_over_small']:.2f}", "<= 1.5")
    Console().print(table)


if __name__ == "__main__":
    main()
