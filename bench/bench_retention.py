"""Retention on a long PBT run (SPEC §13, issue 25), through the referee's own code.

A generated population (``--trials`` jobs in one cohort, a checkpoint every ``--ckpt-every``
steps, PBT exploits of each other's checkpoints, divergences found up to ``--late`` steps after
their onset) is folded through :class:`streams.referee.referee.Referee`; every ``--tick`` events
the processor's clock ticks with the settle horizon (the watermark: the latest event time read),
and each job deletes at once everything its RetentionNotice lists as deletable
(``CheckpointDeleted``), as the torch helper's ``prune()`` does with ``keep=0``.

The horizon is the smallest one the log keeps (every event and every divergence within it:
measured over the log), times ``--horizon-factor``. Printed: over the run, the checkpoints
written (what keep-all holds), those on disk with retention, and why each kept one is kept
(latest, base, needed, not-settled); at the end the ratio kept ÷ written, and the checks that
the run kept its promise (no plan targeted a deleted checkpoint, no deletion judged pinned).

Usage: python bench/bench_retention.py [--trials 16] [--steps 4000] [--ckpt-every 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streams.core.events import parse_event  # noqa: E402
from streams.referee.referee import Referee  # noqa: E402
from streams.testing.cohort import generate_cohorts  # noqa: E402
from streams.testing.horizon import kept_horizon  # noqa: E402


def population(trials: int, steps: int, ckpt_every: int, late: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    raw = list(generate_cohorts(jobs=trials, cohort_size=trials, steps=steps, seed=seed, divergence_rate=0.4,
                                ckpt_every=ckpt_every, exploit_every=ckpt_every, exploit_prob=0.5, alias_prob=0.0))
    for d in raw:
        if d["type"] == "DivergenceReported":
            d["onset_step"] = max(ckpt_every, d["onset_step"] - rng.randint(0, late))
    return raw


def run(raw: list[dict], horizon: int, tick: int, samples: int) -> dict:
    ref = Referee()
    shift: Counter[str] = Counter()
    last: dict[str, tuple[int, int]] = {}
    cohort_of: dict[str, str] = {}
    deleted: set[str] = set()
    written = 0
    violations = {"targets_deleted": 0, "deleted_pinned": 0}
    rows = []
    w = 0
    every = max(1, len(raw) // samples)
    t0 = time.perf_counter()
    ticks = 0

    def take(out):
        for em in out:
            if em.record == "RollbackCommand" and em.value.get("target_checkpoint_id") in deleted:
                violations["targets_deleted"] += 1
            elif em.topic == "alerts" and em.value["kind"] == "DELETED_PINNED":
                violations["deleted_pinned"] += 1
            elif em.record == "RetentionNotice":
                yield em

    for i, d in enumerate(raw):
        job = d["job_id"]
        if d["type"] == "JobStarted":
            cohort_of[job] = d["cohort_id"]
        e = parse_event({**d, "seq": d["seq"] + shift[job]})
        cohort = cohort_of.get(job, "")
        list(take(ref.handle(cohort, e, e.ts).emissions))
        written += d["type"] == "CheckpointWritten"
        last[job] = (e.seq, e.incarnation)
        w = max(w, e.ts)
        if i % tick == 0 or i == len(raw) - 1:
            ticks += 1
            for em in list(take(ref.clock_tick(cohort, w, 10**12, horizon_ms=horizon))):
                j = em.value["job_id"]
                for r in em.value["deletable"]:
                    seq, inc = last[j]
                    gone = parse_event({"type": "CheckpointDeleted", "job_id": j, "seq": seq + 1, "incarnation": inc,
                                        "ts": w, "prev_hash": None, "hash": None, "checkpoint_id": r["checkpoint_id"]})
                    list(take(ref.handle(cohort, gone, w).emissions))
                    deleted.add(r["checkpoint_id"])
                    shift[j] += 1
                    last[j] = (seq + 1, inc)
        if i % every == 0 or i == len(raw) - 1:
            book = ref.engines[cohort].book()
            why = Counter(k[1] for _v, _dl, kept in book.views.values() for k in kept)
            rows.append({"events": i + 1, "written": written, "on_disk": written - len(deleted), **why})
    seconds = time.perf_counter() - t0
    return {"rows": rows, "written": written, "deleted": len(deleted), "kept": written - len(deleted),
            "violations": violations, "ticks": ticks, "seconds": seconds, "events": len(raw)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--ckpt-every", type=int, default=20)
    ap.add_argument("--late", type=int, default=100, help="divergences found up to this many steps late")
    ap.add_argument("--tick", type=int, default=200, help="a retention tick every this many events")
    ap.add_argument("--horizon-factor", type=float, default=1.0)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    raw = population(a.trials, a.steps, a.ckpt_every, a.late, a.seed)
    horizon = int(kept_horizon([parse_event(d) for d in raw]) * a.horizon_factor)
    out = run(raw, horizon, a.tick, a.samples)
    out.update(trials=a.trials, steps=a.steps, ckpt_every=a.ckpt_every, horizon_ms=horizon)
    if a.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{a.trials} trials x {a.steps} steps, a checkpoint every {a.ckpt_every} steps, divergences found up "
          f"to {a.late} steps late; horizon {horizon} ms of event time (x{a.horizon_factor:g} the smallest the log "
          f"keeps); {out['events']} events, {out['ticks']} ticks, {out['seconds']:.1f} s")
    cols = ["events", "written", "on_disk", "latest", "needed", "base", "not-settled"]
    print("  ".join(f"{c:>11}" for c in cols))
    for r in out["rows"]:
        print("  ".join(f"{r.get(c, 0):>11}" for c in cols))
    print(f"keep-all: {out['written']} checkpoints; with retention: {out['kept']} on disk "
          f"(kept / written = {out['kept'] / max(1, out['written']):.3f}); peak on disk over the run: "
          f"{max(r['on_disk'] for r in out['rows'])}")
    print(f"promise kept: {out['violations']['targets_deleted']} plan(s) targeting a deleted checkpoint, "
          f"{out['violations']['deleted_pinned']} deletion(s) judged pinned")
    return 0 if not any(out["violations"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
