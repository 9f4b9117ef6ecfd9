"""Memory of a live worker's fold (issue 10 item 6): what each folded event leaves behind.

Folds a generated stream through one :class:`~streams.referee.referee.Referee` in-process, the
way the decide agent of ``traintrace worker`` does (``streams/worker/stages.py``):

- events are routed by cohort (:class:`~streams.core.cohorts.CohortRouter`) and cut into input
  batches (a new batch when the cohort changes or at ``--batch`` events; a batch's events share
  its timestamp, as the events of one ``lineage.by-cohort`` record do);
- each event is Avro-encoded and decoded back (``Codec.encode_event`` / ``decode_event``: the
  worker folds what it decodes, so every event brings fresh strings), parsed with
  ``parse_event`` and folded with ``Referee.handle(cohort, event, ts, partition=...,
  publish=True)``; then ``note_input``;
- ``referee.commitments(ts)`` after a batch that published a manifest, and every
  ``--commit-every`` (10k) events with ``referee.tick`` and ``due_ticks`` (the worker's timers);
- the ``CheckpointStatus`` records published go through the worker's checkpoint view
  (``checkpoint_view.CheckpointView``: every worker keeps the compacted ``lineage.checkpoints``,
  checkpoint_id -> the record's bytes, for ``/checkpoints/{id}``); ``--no-view`` leaves it out.

The events are those of the ``kill -9`` integration test scaled up (``generate_cohorts`` with
``divergence_rate=0.1, exploit_every=40, exploit_prob=0.6, alias_prob=0.05``): 2000 jobs in
cohorts of 20, about 300 events per job, the SPEC §9 hash chain filled in as a job client
writes it. They are generated lazily: the bench itself keeps nothing of the stream.

Two passes, run as two processes at once (``--mode both``, the default; ~2 min on 2 cores):

``rss``
    no tracing: the RSS (``/proc/self/status`` VmRSS, after ``gc.collect()``) and the retained
    size of the referee's object graph (every object reachable from it, ``sys.getsizeof``,
    each counted once), broken down by structure, after ``--first`` (100k) and ``--events``
    (600k) events, and the growth per event between them.
``traced``
    ``tracemalloc`` started at the ``--first`` mark (tracing makes the fold ~7x slower here,
    so it does not trace the first 100k): after ``--trace-to`` events (default 150k; 600k with
    ``--trace-to 600000``, ~8 min) the memory allocated since the mark and still alive, per
    event, and its top allocation sites by line (``Snapshot.statistics("lineno")``) — i.e.
    what each folded event leaves behind, by the line that allocated it.

Usage: python bench/bench_memory.py [--events 600000] [--first 100000] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import linecache
import os
import subprocess
import sys
import time
import tracemalloc
import types
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streams.worker.checkpoint_view import CheckpointView  # noqa: E402
from streams.referee.referee import Referee  # noqa: E402
from streams.codec import Codec  # noqa: E402
from streams.core.cohorts import CohortRouter  # noqa: E402
from streams.core.events import parse_event  # noqa: E402
from streams.testing.cohort import chain_events, generate_cohorts  # noqa: E402

T0 = 1_760_000_000_000
PARTITIONS = 8


def rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def events_stream(jobs: int, steps: int, seed: int):
    gen = generate_cohorts(jobs=jobs, cohort_size=20, steps=steps, seed=seed, divergence_rate=0.1,
                           exploit_every=40, exploit_prob=0.6, alias_prob=0.05, t0=T0)
    return chain_events(gen)


def partition_of(cohort: str) -> int:
    return sum(cohort.encode()) % PARTITIONS


# ---------------------------------------------------------------------- retained size

_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType,
           types.MethodType, types.FrameType)


def deep_size(roots, seen: set[int]) -> int:
    """Bytes of every object reachable from ``roots`` not in ``seen`` (then added to it)."""
    total = 0
    stack = list(roots)
    while stack:
        o = stack.pop()
        i = id(o)
        if i in seen or isinstance(o, _OPAQUE):
            continue
        seen.add(i)
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


_STATE_PARTS = ("checkpoints", "consumers", "hash_once", "by_hash", "unresolved", "diverged", "src_holders",
                "src_ckpts", "acknowledged")
_LINEAGE_PARTS = ("_raw", "verdicts", "plans", "incidents", "_dependents", "_members",
                  "_plans_by_incident", "_halted", "_alerted", "log")
_REFEREE_PARTS = ("decided_manifest", "decided_plan", "decided_halt", "snapshots", "published",
                  "issued", "versions", "incident_cohort", "_last_root", "_unacked_alerted",
                  "position", "partition_of")


def retained(referee: Referee, view: dict | None) -> dict[str, int]:
    """The referee's retained bytes by structure (each object counted once, in this order:
    the job records slot by slot, then the state's indexes, the lineage's caches, the
    referee's own maps), and the checkpoint view's."""
    seen: set[int] = set()
    parts: Counter[str] = Counter()
    engines = list(referee.engines.values())
    for lin in engines:
        for job in lin.state.jobs.values():
            for inc in job.incarnations.values():
                for s in type(inc).__slots__:
                    parts[f"incarnation.{s}"] += deep_size([getattr(inc, s)], seen)
                parts["incarnation.<object>"] += deep_size([inc], seen)
            for s in type(job).__slots__:
                parts[f"job.{s}"] += deep_size([getattr(job, s)], seen)
            parts["job.<object>"] += deep_size([job], seen)
    for lin in engines:
        for s in _STATE_PARTS:
            if hasattr(lin.state, s):
                parts[f"state.{s}"] += deep_size([getattr(lin.state, s)], seen)
        parts["state.jobs.<dict>"] += deep_size([lin.state.jobs], seen)
        for s in _LINEAGE_PARTS:
            parts[f"lineage.{s}"] += deep_size([getattr(lin, s)], seen)
    for s in _REFEREE_PARTS:
        parts[f"referee.{s}"] += deep_size([getattr(referee, s)], seen)
    parts["referee.<rest>"] += deep_size([referee], seen)
    out = {k: v for k, v in parts.items() if v}
    out["<referee total>"] = sum(out.values())
    if view is not None:
        out["checkpoint view"] = deep_size([view], set())
    return out


# ---------------------------------------------------------------------- the fold


def fold(args: argparse.Namespace, marks: list[int], at_mark) -> dict:
    """Fold the stream like the worker; call ``at_mark(n, referee, view)`` at each mark."""
    codec = Codec()
    referee = Referee()
    router = CohortRouter()
    ckview = None if args.no_view else CheckpointView(None, Codec())
    view = None if ckview is None else ckview.status
    state = {"n": 0, "batch": 0, "since": 0, "commitments": 0}
    cur: list = []
    cur_cohort: list[str | None] = [None]

    def publish(emissions) -> None:
        if view is None:
            return
        for em in emissions:
            if em.topic == "checkpoints":  # CheckpointView reads lineage.checkpoints back
                ckview.put_raw(em.key.encode(), codec.encode_record(em.record, em.value))  # as its thread does

    def flush() -> None:
        if not cur:
            return
        cohort = cur_cohort[0]
        part = partition_of(cohort)
        b = state["batch"]
        ts = T0 + 50 * b  # the input record's timestamp: the processor's clock
        manifest = False
        for value in cur:
            ev = parse_event(codec.decode_event(value))
            h = referee.handle(cohort, ev, ts, partition=part, publish=True)
            publish(h.emissions)
            manifest = manifest or any(em.topic == "manifests" for em in h.emissions)
        referee.note_input(cohort, part, b)
        if manifest:
            state["commitments"] += len(referee.commitments(ts))
        state["since"] += len(cur)
        if state["since"] >= args.commit_every:  # the worker's timers
            state["since"] = 0
            publish(referee.tick(ts))
            referee.due_ticks(ts, 60_000)
            state["commitments"] += len(referee.commitments(ts))
        state["batch"] = b + 1
        cur.clear()

    last = marks[-1]
    for d in events_stream(args.jobs, args.steps, args.seed):
        value = codec.encode_event(d)
        cohort = router.route(parse_event(d)) if d["type"] == "JobStarted" else router.mapping.get(d["job_id"], "")
        if cohort != cur_cohort[0] or len(cur) >= args.batch:
            flush()
            cur_cohort[0] = cohort
        cur.append(value)
        state["n"] += 1
        n = state["n"]
        if n in marks:
            flush()
            at_mark(n, referee, view)
            if n == last:
                break
    flush()
    if state["n"] < last:
        raise SystemExit(f"the stream has only {state['n']} events; raise --steps or --jobs")
    st = referee.stats
    return {"events": st.events, "duplicates": st.duplicates, "rejected": st.rejected,
            "commands": st.commands, "manifests": st.manifests, "alerts": st.alerts,
            "commitments": state["commitments"], "cohorts": len(referee.engines),
            "jobs": sum(len(lin.state.jobs) for lin in referee.engines.values()),
            "checkpoints": sum(len(lin.state.checkpoints) for lin in referee.engines.values()),
            "view": len(view) if view is not None else None}


def run_rss(args: argparse.Namespace) -> dict:
    points: dict[int, dict] = {}
    t0 = time.perf_counter()

    def at_mark(n, referee, view) -> None:
        gc.collect()
        points[n] = {"events": n, "rss_kib": rss_kib(), "elapsed_s": round(time.perf_counter() - t0, 1),
                     "retained": retained(referee, view)}

    gc.collect()
    base = rss_kib()
    totals = fold(args, sorted({args.first, args.events}), at_mark)
    lo, hi = points[args.first], points[args.events]
    span = args.events - args.first
    growth = {k: round((hi["retained"].get(k, 0) - lo["retained"].get(k, 0)) / span, 2)
              for k in hi["retained"]}
    return {"mode": "rss", "baseline_rss_kib": base, "at_first": lo, "at_end": hi, "totals": totals,
            "rss_growth_bytes_per_event": round((hi["rss_kib"] - lo["rss_kib"]) * 1024 / span, 1),
            "retained_growth_bytes_per_event": dict(sorted(growth.items(), key=lambda kv: -kv[1]))}


def run_traced(args: argparse.Namespace) -> dict:
    end = min(args.trace_to, args.events)
    out: dict = {"mode": "traced", "from": args.first, "to": end}
    t0 = time.perf_counter()

    def at_mark(n, referee, view) -> None:
        gc.collect()
        if n == args.first:
            tracemalloc.start(1)
            out["rss_at_first_kib"] = rss_kib()
            return
        snap = tracemalloc.take_snapshot().filter_traces((
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
            tracemalloc.Filter(False, "<unknown>"),
            tracemalloc.Filter(False, "*/streams/testing/cohort.py"),  # the bench's generator, not the worker
        ))
        traced = tracemalloc.get_traced_memory()[0]
        span = n - args.first
        out["traced_kib"] = traced // 1024
        out["traced_bytes_per_event"] = round(traced / span, 1)
        out["rss_less_tracemalloc_kib"] = rss_kib() - tracemalloc.get_tracemalloc_memory() // 1024
        out["elapsed_s"] = round(time.perf_counter() - t0, 1)
        out["top"] = [_stat(s, span) for s in snap.statistics("lineno")[:args.top]]
        tracemalloc.stop()

    fold(args, sorted({args.first, end}), at_mark)
    return out


def _stat(s, span: int) -> dict:
    fr = s.traceback[0]
    name = fr.filename
    for root in [str(REPO)]:
        if root and name.startswith(root.rstrip("/") + "/"):
            name = os.path.relpath(name, root)
            break
    return {"site": f"{name}:{fr.lineno}", "kib": round(s.size / 1024), "count": s.count,
            "bytes_per_event": round(s.size / span, 2),
            "line": linecache.getline(fr.filename, fr.lineno).strip()[:70]}


# ---------------------------------------------------------------------- both, report


def run_both(args: argparse.Namespace, argv: list[str]) -> dict:
    base = [sys.executable, str(Path(__file__).resolve())] + [a for a in argv if a != "--json"] + ["--json"]
    procs = {m: subprocess.Popen(base + ["--mode", m], stdout=subprocess.PIPE, cwd=REPO) for m in ("rss", "traced")}
    out = {}
    for m, p in procs.items():
        stdout, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"the {m} pass failed ({p.returncode})")
        out[m] = json.loads(stdout)[m]
    return out


def report(out: dict) -> str:
    lines: list[str] = []
    r = out.get("rss")
    if r is not None:
        lo, hi = r["at_first"], r["at_end"]
        span = hi["events"] - lo["events"]
        lines.append(f"totals: {r['totals']}")
        lines.append(f"{'events':>10} {'RSS MiB':>9} {'referee MiB':>12} {'view MiB':>9} {'elapsed s':>10}")
        lines.append(f"{0:>10,} {r['baseline_rss_kib'] / 1024:9.1f}")
        for p in (lo, hi):
            rt = p["retained"]
            lines.append(f"{p['events']:>10,} {p['rss_kib'] / 1024:9.1f} {rt['<referee total>'] / 2**20:12.1f} "
                         f"{rt.get('checkpoint view', 0) / 2**20:9.1f} {p['elapsed_s']:10.1f}")
        g = r["retained_growth_bytes_per_event"]
        lines.append(f"growth per event, {lo['events']:,} -> {hi['events']:,}: RSS {r['rss_growth_bytes_per_event']} B, "
                     f"referee {g['<referee total>']} B, checkpoint view {g.get('checkpoint view', 0)} B")
        lines.append(f"\nretained growth by structure ({span:,} events):")
        for k, v in g.items():
            if not k.startswith("<") and k != "checkpoint view" and abs(v) >= 0.1:
                lines.append(f"  {v:8.2f} B/event  {k}")
    t = out.get("traced")
    if t is not None:
        lines.append(f"\ntracemalloc, allocated after {t['from']:,} events and alive at {t['to']:,}: "
                     f"{t['traced_kib'] / 1024:.1f} MiB = {t['traced_bytes_per_event']} B/event "
                     f"({t['elapsed_s']} s)")
        lines.append(f"top {len(t['top'])} sites by line:")
        for s in t["top"]:
            lines.append(f"  {s['kib']:>8,} KiB {s['bytes_per_event']:>7.2f} B/event {s['count']:>9,}  "
                         f"{s['site']}: {s['line']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("both", "rss", "traced"), default="both")
    ap.add_argument("--events", type=int, default=600_000)
    ap.add_argument("--first", type=int, default=100_000)
    ap.add_argument("--trace-to", type=int, default=150_000, help="end of the traced window")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=2300)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--batch", type=int, default=500, help="events per input batch at most")
    ap.add_argument("--commit-every", type=int, default=10_000, help="events between commitment timers")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--no-view", action="store_true", help="leave the worker's checkpoint view out")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.mode == "both":
        out = run_both(args, argv)
    else:
        out = {args.mode: (run_rss if args.mode == "rss" else run_traced)(args)}
    print(json.dumps(out, indent=1) if args.json else report(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
