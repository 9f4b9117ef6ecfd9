"""Benchmark of the training-job client (streams.client): its overhead per training step.

A "training step" is a numpy matrix multiply sized (calibrated at start) to take about
``--step-ms`` (75 ms). Three loops of ``--steps`` steps each, interleaved step by step (the machine is shared):

1. ``bare``: the step alone;
2. ``progress``: the step plus ``client.progress(...)`` (event built, chained, Avro-encoded,
   journaled with fsync, handed to the idempotent producer);
3. ``progress+checkpoint``: the same plus, every step, ``client.checkpoint_written(...)`` of a
   ``--ckpt-mb`` (100) MB file written once beforehand (so the cost is the streamed SHA-256 of
   100 MB from the page cache, plus one more event).

Also the client's cost alone: ``progress()`` per call (µs, over ``--events`` calls) and the
hashing throughput. Events go to a real broker (``--bootstrap`` or ``KAFKA_BOOTSTRAP_SERVERS``,
else a LocalBroker started in a temporary directory) on fresh topics; every run ends with a
flush (all events acknowledged).

Reported: wall ms per step of each loop (mean, median, p90) and its ratio to the bare step,
and, measured directly, the ms spent inside the client's calls per step.

Authenticated control (issue 13): a fourth loop, ``progress (trusted keys)``, is loop 2 with a
second client made with ``trusted_keys`` (a keyring of a throw-away processor key). Every
client-loop step also calls ``poll(0)``, as a training loop does. A keyring costs nothing per step:
signatures are verified only when a control record arrives (in ``poll``, once per command), so
that cost is measured apart: ``verify_us``, one ``check_control`` of a signed RollbackCommand, and
the same as a share of one bare step (a command arrives once per incident, not per step).

Sealed events (issue 13): a client with a journal directory seals its events by default
(:mod:`streams.client.sealing`: every event but ``Progress``, and a ``Progress`` every 32 events
or 200 ms; a seal record when idle), so the loops above are sealed clients. The sealing cost is
measured apart, on two more clients alike but for ``job_key=False`` on one: ``--seal-blocks``
blocks of ``--seal-block`` steps (step + ``progress()`` + ``poll(0)``), alternating which client
goes first, so both see the machine alike and each sees a training cadence (a Progress per step,
not one per four steps as in the interleaved loops). Reported: the ms inside the client per step
of each, their ratio, the difference as a share of the unsealed overhead, the share of events
sealed, and one ``seal()`` in µs.

Usage: python bench/bench_client.py [--steps 30] [--step-ms 75] [--ckpt-mb 100] [--events 5000]
                                    [--seal-blocks 6] [--seal-block 10]
                                    [--matmul-n N] [--bootstrap HOST:PORT] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from streams.kafka.topics import TopicNames, ensure_topics, standard_topics  # noqa: E402
from streams.client import JobClient, hash_path  # noqa: E402


class _Broker:
    def __init__(self, bootstrap: str | None) -> None:
        self.bootstrap = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or None
        self.broker = None
        self.tmp: tempfile.TemporaryDirectory | None = None
        self.note = "given broker"

    def __enter__(self) -> "_Broker":
        if self.bootstrap is None:
            from streams.devtools.broker import LocalBroker

            self.tmp = tempfile.TemporaryDirectory(prefix="tt-bench-client-broker-")
            self.broker = LocalBroker(self.tmp.name, die_with_parent=True)
            self.bootstrap = self.broker.start(timeout=120)
            self.note = "LocalBroker started for this run"
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.broker is not None:
            self.broker.stop()
        if self.tmp is not None:
            self.tmp.cleanup()


def calibrate(step_ms: float, fixed_n: int | None = None) -> tuple[int, Any]:
    """(n, step) where step() multiplies two n×n float32 matrices in about ``step_ms`` ms
    (the median of 5 runs decides; ``fixed_n`` skips the calibration)."""
    rng = np.random.default_rng(0)
    n = fixed_n or 256
    while True:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        a @ b
        runs = []
        for _ in range(5):
            t = time.perf_counter()
            a @ b
            runs.append((time.perf_counter() - t) * 1000)
        ms = statistics.median(runs)
        if fixed_n or ms >= step_ms * 0.9 or n >= 8192:
            break
        n = int(n * min(2.0, max(1.05, (step_ms / max(ms, 0.01)) ** (1 / 3))))
    state = {"a": a, "b": b}

    def step() -> float:
        c = state["a"] @ state["b"]
        return float(c[0, 0])

    return n, step


def loop(step, steps: int, client: JobClient | None, ckpt: Path | None, tag: str, offset: int,
         inside: list[float] | None = None) -> list[float]:
    """Wall ms per step (step + client calls); ``inside`` gets the ms spent in the client calls."""
    times = []
    for i in range(steps):
        s = offset + i
        t = time.perf_counter()
        x = step()
        if client is not None:
            t1 = time.perf_counter()
            client.progress(s, 0, abs(x) % 10 + 0.1, grad_norm=1.0, lr=1e-4)
            if ckpt is not None:
                client.checkpoint_written(f"{client.job_id}-{tag}-{s}", ckpt, s, 0)
            client.poll(0)
            if inside is not None:
                inside.append((time.perf_counter() - t1) * 1000)
        times.append((time.perf_counter() - t) * 1000)
    return times


def keyring(directory: Path):
    """A trusted keyring with one throw-away processor key, and that key (for :func:`verify_cost`)."""
    from streams.signing import generate_key, load_trusted_keys, save_public_key

    key = generate_key()
    save_public_key(key, directory / "processor" / "processor.pub")
    return load_trusted_keys(directory), key


def verify_cost(ring, key, n: int = 2000) -> float:
    """µs per check_control of a signed RollbackCommand (what a keyed client does per command)."""
    from streams.signing import check_control, sign_control

    rec = sign_control("RollbackCommand", {
        "command_id": "c" * 64, "job_id": "bench-job", "cohort_id": "bench", "incarnation": 0,
        "action": "ROLLBACK", "target_checkpoint_id": "bench-job-480", "target_step": 480,
        "incident_ids": ["i" * 64], "supersedes": None, "issued_ts": 1, "commitment_root": None}, key)
    assert check_control("RollbackCommand", rec, ring).ok
    t = time.perf_counter()
    for _ in range(n):
        check_control("RollbackCommand", rec, ring)
    return (time.perf_counter() - t) / n * 1e6


def seal_cost(n: int = 2000) -> float:
    """µs per seal() of an event hash (what a sealed event adds to progress())."""
    from streams.core.seals import seal
    from streams.signing import generate_key

    key = generate_key()
    h = "ab" * 32
    t = time.perf_counter()
    for _ in range(n):
        seal(h, key)
    return (time.perf_counter() - t) / n * 1e6


def seal_comparison(step, bootstrap: str, topics: TopicNames, tmpd: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Per-step overhead of a sealed client against an unsealed one (module doc)."""
    plain = JobClient("bench-job-unsealed", "bench", "numpy", journal_dir=tmpd / "journal-unsealed",
                      bootstrap=bootstrap, topics=topics, job_key=False)
    sealed = JobClient("bench-job-sealed", "bench", "numpy", journal_dir=tmpd / "journal-sealed",
                       bootstrap=bootstrap, topics=topics)
    inside: dict[str, list[float]] = {"unsealed": [], "sealed": []}
    wall: dict[str, list[float]] = {"unsealed": [], "sealed": []}
    try:
        plain.start()
        sealed.start()
        order = (("unsealed", plain), ("sealed", sealed))
        for b in range(args.seal_blocks):
            for name, c in (order if b % 2 == 0 else order[::-1]):
                wall[name] += loop(step, args.seal_block, c, None, "s", 30_000 + b * args.seal_block, inside[name])
        st = sealed.stats()
        events = sealed.next_seq
        calls = progress_calls(order, args.seal_blocks)
        left = plain.flush(120) + sealed.flush(120)
    finally:
        plain.close(30)
        sealed.close(30)
    u, s = statistics.fmean(inside["unsealed"]), statistics.fmean(inside["sealed"])
    return {
        "blocks": args.seal_blocks, "steps_per_block": args.seal_block,
        "client_ms_per_step": {k: summary(v) for k, v in inside.items()},
        "wall_ms_per_step": {k: summary(v) for k, v in wall.items()},
        "ratio_mean": round(s / u, 3),
        "ratio_median": round(statistics.median(inside["sealed"]) / statistics.median(inside["unsealed"]), 3),
        "added_ms_per_step": round(s - u, 4),
        "added_share_of_unsealed": round((s - u) / u, 4),
        "events": events, "events_sealed": st["events_sealed"], "seal_records": st["seal_records"],
        # back to back (no step between): µs per progress() call, the median of the blocks' means
        "progress_call_us": {k: round(statistics.median(v), 1) for k, v in calls.items()},
        "progress_call_ratio": round(statistics.median(calls["sealed"]) / statistics.median(calls["unsealed"]), 3),
        "seal_us": round(seal_cost(), 1),
        "unacknowledged_after_flush": left,
    }


def progress_calls(order, blocks: int, n: int = 200) -> dict[str, list[float]]:
    """µs per ``progress()`` call, back to back, per block of ``n`` calls, alternating clients."""
    out: dict[str, list[float]] = {name: [] for name, _c in order}
    for b in range(blocks):
        for name, c in (order if b % 2 == 0 else order[::-1]):
            t = time.perf_counter()
            for i in range(n):
                c.progress(50_000 + b * n + i, 0, 1.0, grad_norm=1.0, lr=1e-4)
            out[name].append((time.perf_counter() - t) / n * 1e6)
    return out


def summary(times: list[float]) -> dict[str, float]:
    return {"mean_ms": round(statistics.fmean(times), 2), "median_ms": round(statistics.median(times), 2),
            "p90_ms": round(sorted(times)[int(0.9 * (len(times) - 1))], 2)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    n, step = calibrate(args.step_ms, args.matmul_n)
    with _Broker(args.bootstrap) as broker, tempfile.TemporaryDirectory(prefix="tt-bench-client-") as tmp:
        tmpd = Path(tmp)
        topics = TopicNames.from_env(f"bench{uuid.uuid4().hex[:8]}.")
        ensure_topics(broker.bootstrap, standard_topics(topics, 2))
        ckpt = tmpd / "ckpt.bin"
        with open(ckpt, "wb") as fh:
            chunk = os.urandom(1 << 20)
            for _ in range(args.ckpt_mb):
                fh.write(chunk)
        hash_path(ckpt)  # warm the page cache
        t = time.perf_counter()
        hash_path(ckpt)
        hash_s = time.perf_counter() - t

        client = JobClient("bench-job", "bench", "numpy", journal_dir=tmpd / "journal",
                           bootstrap=broker.bootstrap, topics=topics)
        ring, key = keyring(tmpd / "trusted")
        trusted = JobClient("bench-job-trusted", "bench", "numpy", journal_dir=tmpd / "journal-trusted",
                            bootstrap=broker.bootstrap, topics=topics, trusted_keys=ring)
        try:
            client.start()
            trusted.start()
            # the client alone: progress() per call
            t = time.perf_counter()
            for i in range(args.events):
                client.progress(i, 0, 1.0, grad_norm=1.0, lr=1e-4)
            per_event_us = (time.perf_counter() - t) / args.events * 1e6
            client.flush(120)

            loop(step, 3, None, None, "warm", 0)
            # the three loops interleaved step by step, so a change in the machine's load
            # (it is shared) affects them alike
            bare: list[float] = []
            prog: list[float] = []
            both: list[float] = []
            in_prog: list[float] = []
            in_both: list[float] = []
            keyed: list[float] = []
            in_keyed: list[float] = []
            for i in range(args.steps):
                bare += loop(step, 1, None, None, "bare", i)
                prog += loop(step, 1, client, None, "p", 10_000 + i, in_prog)
                both += loop(step, 1, client, ckpt, "c", 20_000 + i, in_both)
                keyed += loop(step, 1, trusted, None, "k", 10_000 + i, in_keyed)
            left = client.flush(120) + trusted.flush(120)
            events = client.next_seq + trusted.next_seq
            authenticated = trusted.stats()["control_authenticated"]
        finally:
            client.close(30)
            trusted.close(30)
        sealing = seal_comparison(step, broker.bootstrap, topics, tmpd, args)
    verify_us = verify_cost(ring, key)

    b = summary(bare)
    p = summary(prog)
    c = summary(both)
    k = summary(keyed)
    return {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "numpy": np.__version__},
        "broker": broker.note,
        "step": {"matmul_n": n, "dtype": "float32", "target_ms": args.step_ms},
        "steps_per_loop": args.steps,
        "bare": b,
        "progress": p,
        "progress_and_checkpoint": c,
        "progress_trusted_keys": k,
        "overhead_ms": {"progress": round(p["mean_ms"] - b["mean_ms"], 2),
                        "progress_and_checkpoint": round(c["mean_ms"] - b["mean_ms"], 2),
                        "progress_trusted_keys": round(k["mean_ms"] - b["mean_ms"], 2)},
        "ratio_to_bare": {"progress": round(p["mean_ms"] / b["mean_ms"], 3),
                          "progress_and_checkpoint": round(c["mean_ms"] / b["mean_ms"], 3),
                          "progress_trusted_keys": round(k["mean_ms"] / b["mean_ms"], 3)},
        # measured directly: time inside the client's calls per step, and its share of the step
        "client_ms_per_step": {"progress": summary(in_prog),
                               "progress_and_checkpoint": summary(in_both),
                               "progress_trusted_keys": summary(in_keyed)},
        "client_share_of_bare_step": {
            "progress": round(statistics.median(in_prog) / b["median_ms"], 4),
            "progress_and_checkpoint": round(statistics.median(in_both) / b["median_ms"], 3),
            "progress_trusted_keys": round(statistics.median(in_keyed) / b["median_ms"], 4)},
        "control_authenticated": authenticated,
        "verify_us": round(verify_us, 1),
        "verify_share_of_bare_step": round(verify_us / 1000 / b["median_ms"], 5),
        "progress_call_us": round(per_event_us, 1),
        "progress_calls": args.events,
        "checkpoint_mb": args.ckpt_mb,
        "hash_ms": round(hash_s * 1000, 1),
        "hash_mb_per_s": round(args.ckpt_mb / hash_s, 1),
        "events_emitted": events,
        "events_unacknowledged_after_flush": left,
        "journal_fsync": True,
        "sealing": sealing,
    }


def print_table(r: dict[str, Any]) -> None:
    print(f"step: float32 matmul n={r['step']['matmul_n']} ({r['broker']}, {r['machine']['cpus']} CPUs), "
          f"{r['steps_per_loop']} steps per loop")
    print(f"{'loop':<26}{'mean ms':>10}{'median':>10}{'p90':>10}{'ratio':>8}")
    for key, label in (("bare", "step alone"), ("progress", "+ progress()"),
                       ("progress_and_checkpoint", f"+ progress() + ckpt {r['checkpoint_mb']} MB"),
                       ("progress_trusted_keys", "+ progress(), keyring")):
        s = r[key]
        ratio = 1.0 if key == "bare" else r["ratio_to_bare"][key]
        print(f"{label:<26}{s['mean_ms']:>10.2f}{s['median_ms']:>10.2f}{s['p90_ms']:>10.2f}{ratio:>8.3f}")
    for key, label in (("progress", "progress()"), ("progress_and_checkpoint", "progress() + checkpoint"),
                       ("progress_trusted_keys", "progress(), keyring")):
        s = r["client_ms_per_step"][key]
        print(f"inside the client, {label}: median {s['median_ms']:.2f} ms per step "
              f"({100 * r['client_share_of_bare_step'][key]:.1f}% of the median bare step)")
    print(f"progress() alone: {r['progress_call_us']:.1f} µs per call ({r['progress_calls']} calls, "
          f"journal fsync on)")
    print(f"verifying one signed command (on arrival, not per step): {r['verify_us']:.1f} µs "
          f"({100 * r['verify_share_of_bare_step']:.3f}% of a bare step)")
    print(f"hashing {r['checkpoint_mb']} MB: {r['hash_ms']:.1f} ms ({r['hash_mb_per_s']:.0f} MB/s, page cache)")
    print(f"events: {r['events_emitted']}, unacknowledged after flush: {r['events_unacknowledged_after_flush']}")
    s = r["sealing"]
    u, z = s["client_ms_per_step"]["unsealed"], s["client_ms_per_step"]["sealed"]
    print(f"sealing ({s['blocks']} alternating blocks of {s['steps_per_block']} steps each): inside the client "
          f"per step, unsealed mean {u['mean_ms']:.3f} ms (median {u['median_ms']:.3f}), sealed mean "
          f"{z['mean_ms']:.3f} ms (median {z['median_ms']:.3f}); ratio sealed/unsealed {s['ratio_mean']:.3f} "
          f"(medians {s['ratio_median']:.3f}), {1000 * s['added_ms_per_step']:+.1f} µs per step "
          f"({100 * s['added_share_of_unsealed']:+.1f}%)")
    c = s["progress_call_us"]
    print(f"  progress() back to back: unsealed {c['unsealed']:.1f} µs, sealed {c['sealed']:.1f} µs per call "
          f"(ratio {s['progress_call_ratio']:.3f})")
    print(f"  in the step loop: sealed events {s['events_sealed']} of {s['events']}, seal records {s['seal_records']}; "
          f"one seal(): {s['seal_us']:.1f} µs; unacknowledged after flush {s['unacknowledged_after_flush']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--step-ms", type=float, default=75.0)
    ap.add_argument("--ckpt-mb", type=int, default=100)
    ap.add_argument("--matmul-n", type=int, help="fix the matrix size instead of calibrating")
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--seal-blocks", type=int, default=6, help="alternating blocks, sealed vs unsealed client")
    ap.add_argument("--seal-block", type=int, default=10, help="steps per block")
    ap.add_argument("--bootstrap")
    ap.add_argument("--json", action="store_true", help="print the result as JSON only")
    args = ap.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
