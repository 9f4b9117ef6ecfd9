"""A real worker's memory over a long run (issues 10, 27): RSS after 100k and after 1M folded events.

Generated cohort events (the kill -9 test's mix: exploits, merges, divergences, rollbacks) are
put on a fresh ``lineage.events``: the first ``--first``, then (once the worker has folded them
and settled) the rest. One ``traintrace worker`` process folds them; its RSS
(``/proc/<pid>/status``, the whole process tree's main process) is read twice at each mark:

- **in flight**: when its ``traintrace_events_folded_total`` passes the mark, in the middle of a
  catch-up (what librdkafka has prefetched, the batches on their way, a snapshot round being
  encoded: tens of MiB that come and go with the moment of the read);
- **settled**: ``--settle`` seconds after it folded everything produced so far: what it keeps.
  The default, 60 s, is past the worker's memory trim (streams.worker.gctune) and long enough
  for the cohorts that went quiet to leave memory (``--evict-idle-after``, 30 s, counted from
  the first look that finds a cohort quiet, at most every ``--snapshot-interval``).

Printed: both at each mark, and the growth per folded event between the marks, settled (the
issue 27 goal: what memory grows with history) and in flight. (``bench/bench_memory.py`` breaks
the same growth down in-process.)

The generated cohorts train one after another, and a fifth of their jobs never finish: no cohort
settles. The default worker's memory follows the cohorts that train (a cohort quiet for a
snapshot round leaves memory, its rows kept on disk for the HTTP views: streams.worker.resting);
``--worker-args '--keep-idle --keep-settled'`` measures one that keeps every cohort.

Usage: python bench/bench_worker_memory.py [--events 1000000] [--first 100000] [--bootstrap HOST:PORT]
                                           [--settle 60] [--worker-args '--keep-idle --keep-settled']
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streams.kafka.topics import TopicNames, ensure_topics, standard_topics  # noqa: E402
from streams.testing.cohort import generate_cohorts  # noqa: E402
from streams.devtools.worker_process import WorkerProcess, forget_run, produce_events  # noqa: E402


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """``field`` of ``/proc/<pid>/status`` in KiB: the RSS, or (``VmHWM``) its peak so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def gauges(w: WorkerProcess) -> dict[str, float]:
    """The worker's cohorts in memory and resting (on disk), from ``/metrics``."""
    return {name: w.metric(f"traintrace_{name}") for name in ("cohorts", "cohorts_resting")}


#: seconds the whole run may take before the bench gives up on the worker
DEADLINE_S = 900


def until(w: WorkerProcess, count: int, t0: float, produced: int, peak: dict[str, float] | None = None) -> None:
    """Until the worker has folded ``count`` events. A worker busy with a batch may answer
    ``/health`` late: that is "not yet", not a failure; a run past :data:`DEADLINE_S` is one.
    ``peak``: the most cohorts seen in memory meanwhile (``/metrics`` read about once a second)."""
    done = 0.0
    looked = 0.0
    while done < count:
        if peak is not None and time.monotonic() - looked >= 1.0:
            looked = time.monotonic()
            try:
                peak["cohorts"] = max(peak.get("cohorts", 0.0), gauges(w)["cohorts"])
            except OSError:
                pass
        if w.proc is not None and w.proc.poll() is not None:
            raise SystemExit(f"the worker exited ({w.proc.returncode}) after folding {done:.0f} of {produced} "
                             f"events; the end of its log:\n{w.log_tail(20)}")
        if time.monotonic() - t0 > DEADLINE_S:
            raise SystemExit(f"the worker folded only {done:.0f} of {produced} events in {DEADLINE_S} s")
        try:
            done = w.folded()
        except OSError:  # URLError, a timeout, a refused connection: asked again
            pass
        else:
            if done >= count:
                return
        time.sleep(0.2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--first", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--worker-args", default="", help="more arguments of the worker (one string)")
    ap.add_argument("--settle", type=float, default=60.0,
                    help="seconds after the worker folded everything produced before its settled RSS is read "
                         "(past the memory trim's interval and the eviction of the cohorts gone quiet)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep-topics", action="store_true",
                    help="keep each run's topics and consumer groups on the broker (deleted by default)")
    args = ap.parse_args()
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from streams.devtools.broker import LocalBroker

        broker = LocalBroker(Path(tempfile.mkdtemp(prefix="tt-bench-broker-")))
        bootstrap = broker.start()
    try:
        prefix = f"mem{uuid.uuid4().hex[:8]}."
        topics = TopicNames.from_env(prefix)
        ensure_topics(bootstrap, standard_topics(topics, args.partitions))
        steps = max(50, int(args.events / 2000 / 0.125))  # ~0.13 events per job-step in this mix
        events = generate_cohorts(jobs=2000, cohort_size=20, steps=steps, seed=21, divergence_rate=0.1,
                                  exploit_every=40, exploit_prob=0.6, alias_prob=0.05)
        first = produce_events(bootstrap, topics.events, (d for _i, d in zip(range(args.first), events)))
        with tempfile.TemporaryDirectory() as tmp:
            w = WorkerProcess(bootstrap, prefix, f"tt-{prefix.rstrip('.')}", Path(tmp) / "w", args.partitions,
                              extra_args=["--loglevel", "warn", *shlex.split(args.worker_args)]).start()
            try:
                w.wait_ready()
                in_flight, settled, cohorts, peak_rss, peak_cohorts = {}, {}, {}, {}, {}
                t0 = time.monotonic()
                n = first
                for phase in (1, 2):
                    if phase == 2:  # the rest, while the worker runs: a backlog again
                        n += produce_events(bootstrap, topics.events,
                                            (d for _i, d in zip(range(args.events - first), events)))
                    mark = args.first if phase == 1 else n
                    peak: dict[str, float] = {}
                    until(w, mark, t0, n, peak)
                    in_flight[mark] = rss_kib(w.proc.pid)
                    until(w, n, t0, n, peak)
                    peak_rss[mark] = rss_kib(w.proc.pid, "VmHWM")
                    peak_cohorts[mark] = peak.get("cohorts", 0.0)
                    time.sleep(args.settle)
                    settled[mark] = rss_kib(w.proc.pid)
                    cohorts[mark] = gauges(w)
            finally:
                w.kill()
        forget_run(bootstrap, prefix, w.app_id, keep=args.keep_topics)
        lo, hi = args.first, n

        def growth(marks: dict) -> float:
            return round((marks[hi] - marks[lo]) * 1024 / (hi - lo), 1)

        out = {"events": n, "worker_args": args.worker_args, "settle_s": args.settle,
               "rss_kib": settled, "rss_kib_in_flight": in_flight, "cohorts": cohorts,
               # the process's peak RSS so far, and the most cohorts in memory seen, while it caught up to each mark
               "rss_kib_peak": peak_rss, "cohorts_peak": peak_cohorts,
               "growth_bytes_per_event": growth(settled), "growth_bytes_per_event_in_flight": growth(in_flight)}
    finally:
        if broker is not None:
            broker.stop()
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        settled, in_flight, cohorts = out["rss_kib"], out["rss_kib_in_flight"], out["cohorts"]
        peak_rss, peak_cohorts = out["rss_kib_peak"], out["cohorts_peak"]
        print(f"worker RSS settled ({args.settle:g} s after folding everything) after {lo:,} events: "
              f"{settled[lo] / 1024:.1f} MiB; after {hi:,}: {settled[hi] / 1024:.1f} MiB; "
              f"growth {out['growth_bytes_per_event']} bytes per folded event (goal <= 16)")
        print(f"  in flight (read as the count passed each mark): {in_flight[lo] / 1024:.1f} MiB, "
              f"{in_flight[hi] / 1024:.1f} MiB; growth {out['growth_bytes_per_event_in_flight']} bytes per event")
        print(f"  while catching up: peak RSS {peak_rss[lo] / 1024:.1f} MiB to {lo:,}, {peak_rss[hi] / 1024:.1f} MiB "
              f"to {hi:,}; at most {peak_cohorts[lo]:.0f} and {peak_cohorts[hi]:.0f} cohorts in memory")
        print(f"  cohorts in memory / resting on disk, settled: {cohorts[lo].get('cohorts', 0):.0f} / "
              f"{cohorts[lo].get('cohorts_resting', 0):.0f} after {lo:,}; {cohorts[hi].get('cohorts', 0):.0f} / "
              f"{cohorts[hi].get('cohorts_resting', 0):.0f} after {hi:,} (worker args: {args.worker_args or 'none'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
