"""Benchmark of a worker's recovery (issue 14): does it grow with history?

For each history size (default 100k and 1M events), on fresh topics:

1. The history: cohorts that trained and finished one after another (no divergence: their
   jobs all finished, nothing to acknowledge, so they are *settled*), then an *active block* —
   ``--active-cohorts`` cohorts training concurrently, with divergences — of which the first
   half is produced. The active block is the same for every size: only the finished past grows.
2. A worker (``--snapshot-every``, ``--snapshot-interval``) folds all of it; its fold rate is
   measured from ``traintrace_events_folded_total`` between 10% and 90% of the events. It runs
   on for ``--snapshot-interval`` seconds after the last input, so its last round is out (what
   a crash leaves to re-fold is then the input after that round: at most ``--snapshot-every``
   events a partition, or the interval's worth — the same whatever the history).
3. It is killed (SIGKILL); the second half of the active block is produced (the jobs went on).
4. A new worker (fresh data dir) starts. Recovery = from its start to the group's committed
   offsets at the end of both inputs (lag 0: a worker commits only what it has published, so
   the tail's decisions are out). Also printed: the worker's memory (VmRSS) and cohorts in memory
   after recovery (its peak during it, and once settled: ``--settle`` seconds later), and what its
   takeover re-folded.

Each size runs twice, with snapshots and without (``--snapshot-every 0``: the re-fold of the
whole partition, the behaviour before snapshots), alternately. Printed: recovery seconds, the
1M ÷ 100k ratio with snapshots (goal <= 1.5), and the fold rate with snapshots ÷ without (the
cost of taking them; goal >= 0.9).

Usage: python bench/bench_recovery.py [--histories 100000,1000000] [--partitions 4]
                                      [--snapshot-every 20000] [--snapshot-interval 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streams.codec import Codec  # noqa: E402
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics  # noqa: E402
from streams.testing.cohort import generate_cohorts  # noqa: E402
from streams.devtools.worker_process import (  # noqa: E402
    WorkerProcess,
    forget_run,
    group_lag,
    produce_events,
    wait_quiescent,
)

CODEC = Codec()
ERA_JOBS = 200  # jobs of one era of finished cohorts (20 cohorts of 10)


def finished_era(i: int, steps: int) -> list[dict]:
    """20 cohorts that train one after another and all finish (every job gets its JobFinished)."""
    out: list[dict] = []
    done: set[str] = set()
    started: dict[str, dict] = {}
    for d in generate_cohorts(jobs=ERA_JOBS, cohort_size=10, steps=steps, seed=1000 + i, prefix=f"e{i}-",
                              divergence_rate=0.0, exploit_every=100, exploit_prob=0.5, alias_prob=0.0,
                              t0=1_760_000_000_000 + i * 10_000_000):
        out.append(d)
        if d["type"] == "JobFinished":
            done.add(d["job_id"])
        last = started.setdefault(d["job_id"], d)
        if d["seq"] >= last["seq"]:
            started[d["job_id"]] = d
    for job, last in started.items():  # the generator lets 20% of jobs run on: they end here
        if job not in done:
            out.append({"type": "JobFinished", "job_id": job, "seq": last["seq"] + 1, "incarnation": last["incarnation"],
                        "ts": last["ts"] + 1, "status": "SUCCEEDED", "final_checkpoint_id": None})
    return out


def active_block(cohorts: int, steps: int) -> list[dict]:
    """``cohorts`` cohorts of 10 training concurrently (interleaved), with divergences."""
    events = list(generate_cohorts(jobs=cohorts * 10, cohort_size=10, steps=steps, seed=7, prefix="live-",
                                   divergence_rate=0.1, exploit_every=40, exploit_prob=0.6,
                                   t0=1_790_000_000_000))
    rng = random.Random(7)
    queues: dict[str, list[dict]] = {}
    cohort_of: dict[str, str] = {}
    for d in events:
        if d["type"] == "JobStarted":
            cohort_of[d["job_id"]] = d["cohort_id"]
        queues.setdefault(cohort_of[d["job_id"]], []).append(d)
    out: list[dict] = []
    live = sorted(queues)
    while live:
        c = rng.choice(live)
        out.extend(queues[c][:5])
        del queues[c][:5]
        if not queues[c]:
            live.remove(c)
    return out


def history(size: int, active: list[dict], steps: int) -> list[dict]:
    """Finished eras until ``size`` events with the first half of ``active`` at the end."""
    first = active[: len(active) // 2]
    out: list[dict] = []
    i = 0
    while len(out) + len(first) < size:
        out.extend(finished_era(i, steps))
        i += 1
    return out[: max(0, size - len(first))] + first if i else first


def metric(w: WorkerProcess, name: str) -> float:
    return w.metric(name)


def fold_rate(w: WorkerProcess, n: int, timeout: float) -> float:
    lo, hi = 0.1 * n, 0.9 * n
    t_lo = f_lo = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            f = metric(w, "traintrace_events_folded_total")
        except OSError:
            f = 0.0
        now = time.perf_counter()
        if t_lo is None and f >= lo:
            t_lo, f_lo = now, f
        if t_lo is not None and f >= hi:
            return (f - f_lo) / max(1e-9, now - t_lo)
        time.sleep(0.1)
    raise SystemExit(f"the worker did not fold {n} events within {timeout}s:\n{w.log_tail(30)}")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def one_run(bootstrap: str, args, tmp: Path, events: list[dict], tail: list[dict], snapshot_every: int) -> dict:
    prefix = f"rec{uuid.uuid4().hex[:6]}."
    topics = TopicNames.from_env(prefix)
    ensure_topics(bootstrap, standard_topics(topics, args.partitions))
    app_id = f"rec-{prefix.rstrip('.')}"
    wargs = ["--loglevel", "info", "--evict-settled", "--snapshot-every", str(snapshot_every),
             "--snapshot-interval", str(args.snapshot_interval), "--commit-interval", "1"]
    produce_events(bootstrap, topics.events, events, CODEC)
    first = WorkerProcess(bootstrap, prefix, app_id, tmp / f"{prefix}w0", args.partitions, extra_args=wargs).start()
    try:
        first.wait_ready()
        rate = fold_rate(first, len(events), args.timeout)
        try:
            wait_quiescent(bootstrap, app_id, topics, timeout=args.timeout)
        except TimeoutError as exc:
            raise SystemExit(f"{exc}\n{first.log_tail(60)}") from exc
        if snapshot_every:  # the last round of every partition is out (--snapshot-interval after the
            time.sleep(args.snapshot_interval + 3)  # last input, as a long-running worker's is)
        snaps = metric(first, "traintrace_snapshots_written_total")
    finally:
        first.kill()
    produce_events(bootstrap, topics.events, tail, CODEC)
    t0 = time.perf_counter()
    second = WorkerProcess(bootstrap, prefix, app_id, tmp / f"{prefix}w1", args.partitions, extra_args=wargs).start()
    samples: list[tuple[float, float]] = []  # (seconds since its start, VmRSS MB) of the new worker
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                samples.append((round(time.perf_counter() - t0, 2), round(rss_mb(second.proc.pid), 1)))
            except OSError:
                return
            done.wait(0.25)

    threading.Thread(target=sample, daemon=True).start()
    try:
        second.wait_ready(timeout=args.timeout)
        ready = time.perf_counter() - t0
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            lag = group_lag(bootstrap, app_id, [topics.events, topics.by_cohort])
            if all(v == 0 for v in lag.values()):
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"no recovery within {args.timeout}s: lag {lag}\n{second.log_tail(30)}")
        recovery = time.perf_counter() - t0
        log = second.log_tail(2000)
        refolded = sum(int(m.group(1)) for m in re.finditer(r"from offsets \d+\.\.\d+: (\d+) events", log))
        out = {"history": len(events), "tail": len(tail), "snapshot_every": snapshot_every,
               "fold_per_s": rate, "snapshots_written": snaps, "recovery_s": recovery, "ready_s": ready,
               "refolded_events": refolded, "cohorts_in_memory": metric(second, "traintrace_cohorts"),
               "rss_mb": rss_mb(second.proc.pid)}
        # and once it settled: the checkpoint view caught up with lineage.checkpoints (a thread that
        # reads it from the start meanwhile) and the worker gave its free heap back (every 5 s)
        time.sleep(args.settle)
        out["rss_settled_mb"] = rss_mb(second.proc.pid)
        done.set()
        out["rss_peak_mb"] = max((r for _t, r in samples), default=out["rss_mb"])
        out["rss_timeline"] = samples
        if os.environ.get("BENCH_RECOVERY_LOG"):  # the new worker's log, for a timeline of its takeover
            Path(os.environ["BENCH_RECOVERY_LOG"] + f".{len(events)}").write_text(log)
    finally:
        done.set()
        second.kill()
    forget_run(bootstrap, prefix, app_id, keep=args.keep_topics)
    return out


def inprocess_cost(events: list[dict], partitions: int, every: int) -> dict:
    """The snapshot rounds' share of the fold, without Kafka: the events folded through a
    referee as a worker does (cohorts spread over ``partitions``), with a round of a partition
    (encode its changed cohorts and digest them; settled ones leave memory) every ``every``
    events of it (and, as the worker does, no sooner than the changed cohorts' last snapshots
    would be re-encoded), against the same fold without rounds: CPU seconds of this process,
    three alternated pairs, the median ratio."""
    from streams.core.events import parse_event
    import zlib as _z
    from streams.referee import snapshots as images
    from streams.referee.referee import Referee
    from streams.worker.snapshots import round_is_due

    parsed = [parse_event(d) for d in events]
    cohort_of: dict[str, str] = {}
    routed = []
    for ev in parsed:
        if type(ev).__name__ == "JobStarted":
            cohort_of.setdefault(ev.job_id, ev.cohort_id)
        c = cohort_of.get(ev.job_id, "")
        routed.append((c, _z.crc32(c.encode()) % partitions, ev))

    def run(rounds: bool) -> tuple[float, int, int]:
        ref = Referee()
        stored: dict[str, bytes] = {}
        ref.restorer = lambda c: c in stored and images.restore(ref, c, 0, stored.pop(c)) is not None
        since = [0] * partitions
        changed: list[set[str]] = [set() for _ in range(partitions)]
        held: dict[str, int] = {}  # cohort -> events its last snapshot held
        written = 0
        t0 = time.process_time()
        for i, (c, p, ev) in enumerate(routed):
            ref.handle(c, ev, 1_000 + i, partition=p, publish=False)
            if not rounds:
                continue
            changed[p].add(c)
            since[p] += 1
            # the worker's rule (SnapshotStore.due, round_is_due): every N events, and no sooner
            # than the changed cohorts' last snapshots would be re-encoded, unless as much settles
            if since[p] >= every and round_is_due(
                    since[p], sum(held.get(x, 0) for x in changed[p]
                                  if x in ref.engines and not images.settled(ref.engines[x])),
                    sum(ref.engines[x].state.events_folded for x in changed[p]
                        if x in ref.engines and images.settled(ref.engines[x]))):
                for cohort in sorted(changed[p]):
                    if cohort not in ref.engines:
                        continue
                    enc = images.encode(ref, cohort)  # what a round does under the fold's lock
                    images.digest(enc)
                    written += 1
                    held[cohort] = ref.engines[cohort].state.events_folded
                    if images.settled(ref.engines[cohort]):
                        stored[cohort] = enc
                        ref.forget_cohorts([cohort])
                since[p], changed[p] = 0, set()
        return time.process_time() - t0, written, len(ref.engines)

    import gc
    import statistics

    gc.collect()
    gc.freeze()  # the parsed input is not the fold's garbage (the worker freezes its start-up too)
    ratios, plains, snaps = [], [], []
    for i in range(3):  # alternated, each order: an order effect cannot pass for the cost
        first, second = (False, True) if i % 2 == 0 else (True, False)
        a, b = run(first), run(second)
        plain, snap = (a, b) if first is False else (b, a)
        plains.append(plain[0])
        snaps.append(snap[0])
        ratios.append(plain[0] / snap[0])
        gc.collect()
    gc.unfreeze()
    return {"events": len(events), "fold_s": statistics.median(plains), "fold_with_rounds_s": statistics.median(snaps),
            "snapshots_written": snap[1], "rate_ratios": ratios, "rate_ratio": statistics.median(ratios),
            "cohorts_in_memory": snap[2], "cohorts_in_memory_without": plain[2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    ap.add_argument("--histories", default="100000,1000000")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--active-cohorts", type=int, default=20)
    ap.add_argument("--steps", type=int, default=400, help="steps of every job")
    ap.add_argument("--snapshot-every", type=int, default=20_000)
    ap.add_argument("--snapshot-interval", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--keep-topics", action="store_true",
                    help="keep each run's topics and consumer groups on the broker (deleted by default)")
    ap.add_argument("--settle", type=float, default=12.0,
                    help="seconds after the recovery to read the new worker's settled RSS")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-without", dest="without", action="store_false",
                    help="skip the runs without snapshots (the full re-fold, slow on a large history)")
    ap.add_argument("--inprocess-only", action="store_true",
                    help="only the in-process measure of the rounds' cost (no Kafka)")
    ap.add_argument("--long-lived", action="store_true",
                    help="--inprocess-only: the history is --active-cohorts cohorts training all along "
                         "(no cohort finishes: the case where rounds would re-encode large states)")
    args = ap.parse_args()
    if args.inprocess_only:
        active = active_block(args.active_cohorts, args.steps)
        for size in (int(x) for x in args.histories.split(",")):
            events = (active_block(args.active_cohorts, max(args.steps, int(size / (args.active_cohorts * 1.2))))[:size]
                      if args.long_lived else history(size, active, args.steps))
            r = inprocess_cost(events, args.partitions, args.snapshot_every)
            print(json.dumps(r) if args.json else
                  f"history {r['events']:>8}: fold {r['fold_s']:.1f}s, with rounds every {args.snapshot_every} "
                  f"events a partition {r['fold_with_rounds_s']:.1f}s ({r['snapshots_written']} snapshots): "
                  f"rate x{r['rate_ratio']:.3f} (median of {', '.join(f'x{x:.3f}' for x in r['rate_ratios'])}); "
                  f"cohorts in memory {r['cohorts_in_memory']} "
                  f"(without leaving: {r['cohorts_in_memory_without']})")
        return
    broker = None
    bootstrap = args.bootstrap
    if not bootstrap:
        from streams.devtools.broker import LocalBroker

        broker = LocalBroker(Path(tempfile.mkdtemp(prefix="tt-bench-broker-")), die_with_parent=True)
        bootstrap = broker.start()
    active = active_block(args.active_cohorts, args.steps)
    tail = active[len(active) // 2:]
    runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for size in (int(x) for x in args.histories.split(",")):
                events = history(size, active, args.steps)
                for every in ((args.snapshot_every, 0) if args.without else (args.snapshot_every,)):
                    r = one_run(bootstrap, args, Path(tmp), events, tail, every)
                    runs.append(r)
                    print(f"history {r['history']:>8} snapshots {'every ' + str(every) if every else 'off':>12}: "
                          f"fold {r['fold_per_s']:8.0f}/s, recovery {r['recovery_s']:6.1f}s (ready {r['ready_s']:.1f}s), "
                          f"re-folded {r['refolded_events']}, {r['cohorts_in_memory']:.0f} cohorts, "
                          f"{r['rss_mb']:.0f} MB", file=sys.stderr, flush=True)
    finally:
        if broker is not None:
            broker.stop()
    report = summary(runs, args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)


def summary(runs: list[dict], args) -> dict:
    on = [r for r in runs if r["snapshot_every"]]
    off = [r for r in runs if not r["snapshot_every"]]
    out = {"runs": runs, "snapshot_every": args.snapshot_every, "snapshot_interval_s": args.snapshot_interval}
    if len(on) >= 2:
        out["recovery_ratio_largest_over_smallest"] = on[-1]["recovery_s"] / on[0]["recovery_s"]
    out["fold_rate_with_over_without"] = [a["fold_per_s"] / b["fold_per_s"] for a, b in zip(on, off)] if off else []
    return out


def print_report(report: dict) -> None:
    print(f"recovery after a kill (snapshots every {report['snapshot_every']} events a partition "
          f"or {report['snapshot_interval_s']:.0f}s):")
    print(f"  {'history':>9} {'snapshots':>9} {'recovery s':>10} {'re-folded':>10} {'cohorts':>8} {'RSS MB':>7} "
          f"{'peak MB':>7} {'settled':>7} {'fold/s':>8}")
    for r in report["runs"]:
        print(f"  {r['history']:>9} {'on' if r['snapshot_every'] else 'off':>9} {r['recovery_s']:>10.1f} "
              f"{r['refolded_events']:>10} {r['cohorts_in_memory']:>8.0f} {r['rss_mb']:>7.0f} "
              f"{r.get('rss_peak_mb', r['rss_mb']):>7.0f} {r.get('rss_settled_mb', 0):>7.0f} {r['fold_per_s']:>8.0f}")
    if "recovery_ratio_largest_over_smallest" in report:
        print(f"  recovery with snapshots, largest / smallest history: "
              f"x{report['recovery_ratio_largest_over_smallest']:.2f} (goal <= 1.5)")
    for x in report["fold_rate_with_over_without"]:
        print(f"  fold rate with snapshots / without: x{x:.3f} (goal >= 0.9)")


if __name__ == "__main__":
    main()
