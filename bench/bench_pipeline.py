"""Benchmark of the live pipeline (issue 4), in one run on the local broker.

1. Throughput: N generated cohort events are put on a fresh ``lineage.events``; a raw
   confluent-kafka consumer reads and decodes them all (the baseline rate); then ``--workers``
   worker processes route and fold them. The fold rate is measured from the workers'
   ``traintrace_events_folded_total`` (read from ``/health``, which does not render every metric)
   between 10% and 90% of the events (start-up excluded).
   Printed: events/s per worker and fold rate ÷ raw consume+decode rate; and the catch-up rate,
   the events left over the time from the workers' partitions taken over (``/health``) to the
   last one folded (the 10–90 % window can fall where the two stages take turns: issue 27); the
   group's join before it is printed apart. Beside it, each worker's CPU per event by thread
   (its event loop, its other Python threads, librdkafka's) and the share of the catch-up its
   GIL was held (the loop's and the Python threads' CPU ÷ the wall time: near 100 %, the
   process is bound by one core whatever the machine has); and what the rest of the machine (the
   broker, the bench) spent an event: its cores' busy time less the workers' CPU. ``--profile
   DIR`` records each worker with py-spy meanwhile and prints where its time went
   (``bench/profile.py``).
2. Latency: with the workers caught up and every partition taken over, ``--incidents`` small cohorts are set up (A wrote
   A-520 past its coming onset, B consumed it); then A's divergence event is produced and the
   clock runs until the last RollbackCommand of the scope (A and B) is on ``lineage.control``.
   Printed: p50 / p90 / p99 / max.

``--signing on`` starts the workers with ``--signing-key`` (a throw-away processor key): every
commitment and control record is Ed25519-signed. ``--signing compare`` runs 1 and 2 twice, unsigned
then signed, and prints the cost of signing (the issue 13 goal: <= 5 % of the per-worker rate).

``--seals on`` makes every job a keyed job whose events are sealed as the job client seals them
(:func:`streams.testing.cohort.seal_events`: ``JobStarted``, ``DivergenceReported``,
``RolledBack``, ``JobFinished`` at once, otherwise every ``--seal-every``-th event), so the
workers check seals and hold unsealed events until their seal. ``--seals compare`` measures the
throughput only, ``--rounds`` times each, alternating plain (hash-chained, not sealed) and sealed
runs on fresh topics and workers, and prints each pair's ratio and the median (the same goal).
``--progress-every`` sets the generator's Progress interval (1: long jobs, one Progress a step).
``--signing alternate`` does the same for unsigned and signed workers, ``--snapshots compare``
for workers without snapshots (``--snapshot-every 0``) and with the default ones (the cost of
:mod:`streams.worker.snapshots` on the fold rate; issue 14's goal: <= 10 %).

``--checkpoints compare`` alternates signing workers without C2SP checkpoint notes
(``--log-origin none``) and with them (the default): the cost of issue 28's checkpoints (goal:
<= 5 %).

``--stages split`` runs each worker as two processes, ``traintrace worker --stages route`` and
``--stages fold`` (docs/pipeline.md): the two stages on a core each; ``--stages compare``
alternates, throughput only, ``--rounds`` runs of all-stage workers and of split ones.

``--cluster compare`` runs 1 and 2 on a local single node, then on a local three-node cluster
(``traintrace broker start --nodes 3``: topics replicated 3 times, ``min.insync.replicas`` 2,
every producer ``acks=all``), in the same run, and prints both.

Usage: python bench/bench_pipeline.py [--events 200000] [--workers 1] [--partitions 4] [--stages all|split|compare]
                                      [--signing off|on|compare|alternate] [--seals off|on|compare]
                                      [--rounds 2] [--cluster one|three|compare] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import KafkaError, TopicPartition  # noqa: E402

from streams.kafka.settings import KafkaSettings  # noqa: E402
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics  # noqa: E402
from streams.codec import Codec  # noqa: E402
from streams.testing.cohort import chain_events, generate_cohorts, seal_events  # noqa: E402
from streams.devtools.worker_process import (  # noqa: E402
    WorkerProcess,
    forget_run,
    produce_events,
    wait_assigned,
    wait_quiescent,
)

CODEC = Codec()


def produce(bootstrap: str, topic: str, events) -> int:
    return produce_events(bootstrap, topic, events, CODEC)


def raw_consume_decode(bootstrap: str, topic: str, n: int, decode=None) -> float:
    """Events/s of one confluent-kafka consumer that reads the topic and decodes every event:
    into the flat dict (``Codec.decode_event``: fastavro, what any consumer of the published
    schema does; the issue's floor), or with ``decode``."""
    decode = decode or CODEC.decode_event
    c = KafkaSettings.of(bootstrap).consumer(f"bench-raw-{uuid.uuid4().hex[:6]}")
    md = c.list_topics(topic, timeout=10)
    c.assign([TopicPartition(topic, p, 0) for p in md.topics[topic].partitions])
    got = 0
    t0 = None
    while got < n:
        msgs = c.consume(1000, timeout=1.0)
        if t0 is None and msgs:
            t0 = time.perf_counter()
        for m in msgs:
            if m.error():
                continue
            decode(m.value())
            got += 1
    dt = time.perf_counter() - t0
    c.close()
    return n / dt


def start_workers(bootstrap: str, prefix: str, app_id: str, tmp: Path, tag: str, args) -> list[WorkerProcess]:
    """``args.workers`` workers, started: one process each, or (``--stages split``) a route
    process and a fold process each."""
    base = ["--loglevel", "warn", *args.worker_args]
    kinds = [("route", ["--stages", "route"]), ("fold", ["--stages", "fold"])] if args.stages == "split" else [("", [])]
    return [WorkerProcess(bootstrap, prefix, app_id, tmp / f"{tag}{i}{kind}", args.partitions,
                          extra_args=[*base, *more]).start()
            for i in range(args.workers) for kind, more in kinds]


def stage_seconds(worker) -> dict:
    """Seconds each stage of ``worker`` spent on its records (work) and waiting for its outputs'
    acknowledgements (flush), and its calls, from the worker's ``traintrace_stage_seconds``; and
    (``snapshot_encode``) its snapshot rounds' encoding, which holds the fold's lock
    (``traintrace_snapshot_encode_seconds``)."""
    out: dict = {}
    try:
        text = worker.get("/metrics", timeout=5.0)
    except Exception:  # noqa: BLE001 - a diagnostic only
        return out
    for line in text.splitlines():
        if line.startswith(("traintrace_snapshot_encode_seconds_sum ", "traintrace_snapshot_encode_seconds_count ")):
            kind = "s" if "_sum " in line else "calls"
            out.setdefault("snapshot_encode", {})[kind] = float(line.rsplit(" ", 1)[1])
            continue
        if not line.startswith(("traintrace_stage_seconds_sum{", "traintrace_stage_seconds_count{")):
            continue
        labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.index("}")].split(","))
        key = f"{labels['stage'].strip(chr(34))}_{labels['part'].strip(chr(34))}"
        kind = "s" if "_sum{" in line else "calls"
        out.setdefault(key, {})[kind] = float(line.rsplit(" ", 1)[1])
    return out


def cpu_seconds(worker) -> float:
    """The worker process's CPU seconds so far (``process_cpu_seconds_total``; 0 when unread)."""
    try:
        return worker.metric("process_cpu_seconds_total")
    except Exception:  # noqa: BLE001 - a diagnostic only
        return 0.0


#: clock ticks a second, the unit of /proc's CPU times
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _task_cpu(pid: int, tid: int) -> tuple[str, float]:
    """(name, CPU seconds) of one thread of ``pid``, from ``/proc`` (OSError when it is gone)."""
    task = Path(f"/proc/{pid}/task/{tid}")
    fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
    return (task / "comm").read_text().strip(), (int(fields[11]) + int(fields[12])) / CLK_TCK


#: the kinds of a worker's threads :func:`thread_cpu` tells apart, by the names their libraries give them
THREAD_KINDS = (("librdkafka", "rdk:"), ("rocksdb", "rocksdb:"))


def thread_cpu(worker) -> dict[str, float]:
    """CPU seconds so far of the worker's threads by kind, from ``/proc`` (empty where there is
    none): ``loop`` its main thread; ``librdkafka`` and ``rocksdb`` the threads those libraries
    start (named ``rdk:…``, ``rocksdb:…``), which run without the GIL; ``python`` every other
    thread (the executor's consumes and flushes, the snapshot rounds, the checkpoint view, Faust's
    own), which run Python and so hold the GIL when they run. The loop's and the Python threads'
    seconds ÷ the wall time: how much of it one GIL was held. Threads that ended are not counted."""
    pid = getattr(getattr(worker, "proc", None), "pid", None)
    out: dict[str, float] = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError, TypeError):
        return out
    for tid in tids:
        try:
            name, seconds = _task_cpu(pid, tid)
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
        kind = "loop" if tid == pid else next((k for k, prefix in THREAD_KINDS if name.startswith(prefix)), "python")
        out[kind] = out.get(kind, 0.0) + seconds
    return out


def machine_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of every core of this machine so far, from ``/proc/stat`` ((0, 0)
    where there is none): the broker, the workers and the bench share them."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def folded(workers) -> float:
    total = 0.0
    for w in workers:
        try:
            total += w.folded()  # /health's "folded": traintrace_events_folded_total, without rendering /metrics
        except Exception:
            pass
    return total


def throughput(bootstrap: str, args, tmp: Path) -> dict:
    prefix = f"bench{uuid.uuid4().hex[:6]}."
    topics = TopicNames.from_env(prefix)
    ensure_topics(bootstrap, standard_topics(topics, args.partitions))
    events, jobs = bench_events(args)
    n = produce(bootstrap, topics.events, events)
    raw = raw_consume_decode(bootstrap, topics.events, n)
    # the same with the worker's own decoder (the hand reader straight to the typed event, what
    # the route stage runs): the floor moved by this project's own work, quoted beside it
    raw_typed = raw_consume_decode(bootstrap, topics.events, n, CODEC.decode_event_typed)
    app_id = f"bench-{prefix.rstrip('.')}"
    workers = start_workers(bootstrap, prefix, app_id, tmp, "tw", args)
    profilers = []
    try:
        for w in workers:
            w.wait_ready()
        t_started = time.perf_counter()
        wait_assigned(workers, args.partitions, timeout=args.timeout)
        if args.profile:
            from bench.profile import Profiler

            profilers = [Profiler(w.proc.pid, Path(args.profile) / f"worker{i}", flame=True)
                         for i, w in enumerate(workers)]
        lo, hi = 0.1 * n, 0.9 * n
        t_lo = t_hi = None
        t_ready, f_ready = time.perf_counter(), folded(workers)
        cpu_ready = [cpu_seconds(w) for w in workers]
        threads_ready = [thread_cpu(w) for w in workers]
        machine_ready = machine_cpu()
        deadline = time.monotonic() + args.timeout
        samples = [(t_ready, f_ready)]  # (time, events folded) through the catch-up: its rate by tenth
        while time.monotonic() < deadline:
            f = folded(workers)
            now = time.perf_counter()
            samples.append((now, f))
            if t_lo is None and f >= lo:
                t_lo, f_lo = now, f
            if f >= hi:
                t_hi, f_hi = now, f
                break
            time.sleep(0.2)  # /metrics read less often: the bench must not load the worker it measures
        if t_lo is None or t_hi is None:
            raise SystemExit("the workers did not fold the events in time")
        # (one read can see both 10 % and 90 %: a fold call of a large backlog holds the event loop
        # that answers the read; then the window is from the workers ready)
        rate = (f_hi - f_lo) / (t_hi - t_lo) if t_hi > t_lo else (f_hi - f_ready) / (t_hi - t_ready)
        # the whole backlog, from the workers' partitions taken over to every event folded: the
        # catch-up rate (the 10-90 % window above can fall where routing and folding take turns;
        # the group's join before it is start-up, quoted apart)
        while (f := folded(workers)) < n and time.monotonic() < deadline:
            samples.append((time.perf_counter(), f))
            time.sleep(0.2)
        samples.append((time.perf_counter(), f))
        catch_up_s = time.perf_counter() - t_ready
        by_tenth = rate_by_tenth(samples, f_ready, n)
        catch_up = (n - f_ready) / catch_up_s
        # each process's CPU (all its threads: librdkafka's too) per event of the catch-up
        cpu_us = [1e6 * (cpu_seconds(w) - c) / max(1.0, n - f_ready) for w, c in zip(workers, cpu_ready)]
        # each kind of thread's CPU per event: the loop's and the Python threads' together hold one GIL
        threads_s = [{k: v - before.get(k, 0.0) for k, v in thread_cpu(w).items()}
                     for w, before in zip(workers, threads_ready)]
        threads_us = [{k: 1e6 * v / max(1.0, n - f_ready) for k, v in t.items()} for t in threads_s]
        # the share of the catch-up each worker's event loop ran (the rest it waited: fetches, flushes,
        # the other threads' turns), and its own CPU per event: the live cost had it never waited
        loop_busy = [t.get("loop", 0.0) / catch_up_s for t in threads_s]
        loop_us = [t.get("loop", 0.0) for t in threads_us]
        gil_busy = [(t.get("loop", 0.0) + t.get("python", 0.0)) / catch_up_s for t in threads_s]
        busy, total = (b - a for a, b in zip(machine_ready, machine_cpu()))
        machine_busy = busy / total if total else 0.0  # of all cores: 1.0 is the machine saturated
        # what the rest of the machine (the broker, the bench itself, anything else) spent an event
        rest_us = max(0.0, 1e6 * busy / CLK_TCK / max(1.0, n - f_ready) - sum(cpu_us)) \
            if total else 0.0
        join_s = t_ready - t_started
        stages = {k: v for w in workers for k, v in stage_seconds(w).items() if v.get("calls")} \
            if args.workers == 1 else {}
        stages_wall = time.perf_counter() - t_ready
        for i, prof in enumerate(profilers):
            path = prof.stop()
            if path is not None:
                from bench.profile import print_summary, summary

                print_summary(summary(path), f"worker {i} profile ({path}, flame graph {path.with_suffix('.svg')})")
        wait_quiescent(bootstrap, app_id, topics, timeout=args.timeout, split=args.stages == "split")
    finally:
        for w in workers:
            w.kill()
    forget_run(bootstrap, prefix, app_id, keep=args.keep_topics)
    # the pure fold of the same events, on the same machine, in this run (the workers stopped)
    pure_us = pure_fold_us(args)
    live_us = 1e6 / (rate / args.workers)
    return {"pure_fold_us_per_event": pure_us, "live_us_per_event": live_us, "live_over_pure_fold": live_us / pure_us,
            "events": n, "jobs": jobs, "partitions": args.partitions, "workers": args.workers, "layout": args.stages,
            "raw_consume_decode_per_s": raw, "fold_per_s": rate, "fold_per_s_per_worker": rate / args.workers,
            "ratio_fold_over_raw": rate / raw, "raw_consume_typed_per_s": raw_typed,
            "ratio_fold_over_raw_typed": rate / raw_typed, "catch_up_per_s": catch_up, "ratio_catch_up_over_raw": catch_up / raw,
            "join_s": join_s, "loop_busy": loop_busy, "loop_us_per_event": loop_us,
            "threads_us_per_event": threads_us, "gil_busy": gil_busy,
            "machine_busy": machine_busy, "rest_us_per_event": rest_us, "stages": stages, "stages_wall_s": stages_wall, "cpu_us_per_event": cpu_us,
            "catch_up_per_s_by_tenth": by_tenth}


def rate_by_tenth(samples: list[tuple[float, float]], start: float, n: int) -> list[float | None]:
    """The catch-up's rate (events/s) over each tenth of the backlog, from ``samples`` of (time,
    events folded): between the first samples at or past each tenth's bounds (None where one read
    saw both). Whether a long backlog folds slower all through or slows as it goes (issue 27)."""
    bounds = [start + (n - start) * k / 10 for k in range(11)]
    at = [next((s for s in samples if s[1] >= b), None) for b in bounds]
    return [(b[1] - a[1]) / (b[0] - a[0]) if a is not None and b is not None and b[0] > a[0] else None
            for a, b in zip(at, at[1:])]


def bench_events(args):
    """The generated events of the throughput run (dicts, in the order produced) and its jobs."""
    per_job = 800 // args.progress_every + 800 // 50 + 4  # about (see generate_cohorts)
    jobs = max(20, args.events // per_job)
    events = generate_cohorts(jobs=jobs, cohort_size=20, steps=800, seed=3, progress_every=args.progress_every)
    if args.seals == "on":
        events = seal_events(events, every=args.seal_every)
    elif args.seals == "chain":
        events = chain_events(events)
    return events, jobs


#: the clock of the pure fold (any fixed start: decisions need not match the live run's)
T_PURE = 1_760_000_000_000


def pure_fold_us(args, repeats: int = 2) -> float:
    """Microseconds per event of the pure fold of the throughput run's own events, in this
    process: the core alone (``Lineage.fold`` + ``decide`` per event, one engine per cohort, as
    the worker keeps them), events parsed before the clock starts, the worker's garbage collector
    settings; best of ``repeats``. The live cost per event ÷ this is the issue 27 ratio on the
    same events and machine in one run (``bench_core``'s probe folds other events, with CPython's
    default collector)."""
    import gc

    from streams.core.cohorts import CohortRouter
    from streams.core.decide import Lineage
    from streams.core.events import parse_event
    from streams.worker.gctune import THRESHOLDS

    dicts, _jobs = bench_events(args)
    parsed = [parse_event(d) for d in dicts]
    before = gc.get_threshold()
    gc.set_threshold(*THRESHOLDS)
    try:
        best = float("inf")
        for _ in range(repeats):
            route = CohortRouter({}).route
            engines: dict[str, Lineage] = {}
            gc.collect()
            t = time.perf_counter()
            for i, e in enumerate(parsed):
                cohort = route(e)
                lin = engines.get(cohort)
                if lin is None:
                    lin = engines[cohort] = Lineage()
                lin.fold(e, T_PURE + i)
                lin.decide()
            best = min(best, time.perf_counter() - t)
            del engines
    finally:
        gc.set_threshold(*before)
    return 1e6 * best / len(parsed)


def incident_events(k: int, t0: int):
    """Cohort k: A and B. All but A's divergence event, then the divergence event."""
    a, b, cohort = f"L{k}-A", f"L{k}-B", f"L{k}"
    seq = {a: 0, b: 0}
    ts = [t0]

    def ev(job, etype, **f):
        ts[0] += 1
        d = {"type": etype, "job_id": job, "seq": seq[job], "incarnation": 0, "ts": ts[0], **f}
        seq[job] += 1
        return d

    setup = [ev(a, "JobStarted", cohort_id=cohort, base_model="m", base_checkpoint_id=None, config_hash=None),
             ev(b, "JobStarted", cohort_id=cohort, base_model="m", base_checkpoint_id=None, config_hash=None)]
    for step in (480, 520):
        setup.append(ev(a, "CheckpointWritten", checkpoint_id=f"{a}-{step}", step=step, epoch=0,
                        content_hash=f"{k:08d}{step:056d}", uri="mem://"))
    setup.append(ev(b, "CheckpointWritten", checkpoint_id=f"{b}-400", step=400, epoch=0,
                    content_hash=f"{k:08d}{400:055d}b", uri="mem://"))
    setup.append(ev(b, "CheckpointConsumed", source_checkpoint_id=f"{a}-520", step=500, mode="MERGE"))
    setup.append(ev(b, "CheckpointWritten", checkpoint_id=f"{b}-540", step=540, epoch=0,
                    content_hash=f"{k:08d}{540:055d}b", uri="mem://"))
    trigger = ev(a, "DivergenceReported", onset_step=500, detector="bench", reason="bench")
    return setup, trigger, {a, b}


def latency(bootstrap: str, args, tmp: Path) -> dict:
    prefix = f"lat{uuid.uuid4().hex[:6]}."
    topics = TopicNames.from_env(prefix)
    ensure_topics(bootstrap, standard_topics(topics, args.partitions))
    app_id = f"lat-{prefix.rstrip('.')}"
    workers = start_workers(bootstrap, prefix, app_id, tmp, "lw", args)
    seen: dict[str, float] = {}
    stamped: dict[str, float] = {}  # the command record's own timestamp (the worker's produce time)
    stop = threading.Event()
    following = threading.Event()

    def follow() -> None:
        c = KafkaSettings.of(bootstrap).consumer(f"bench-lat-{uuid.uuid4().hex[:6]}",
                                                 **{"fetch.wait.max.ms": 5, "enable.partition.eof": True})
        md = c.list_topics(topics.control, timeout=10)
        c.assign([TopicPartition(topics.control, p, 0) for p in md.topics[topics.control].partitions])
        while not stop.is_set():
            m = c.poll(0.01)
            if m is not None and m.error() and m.error().code() == KafkaError._PARTITION_EOF:
                following.set()  # fetching: a command is seen when it arrives, not when we connect
            if m is None or m.error():
                continue
            name, rec = CODEC.decode_record(m.value())
            if name == "RollbackCommand":
                seen.setdefault(rec["job_id"], time.perf_counter())
                stamped.setdefault(rec["job_id"], m.timestamp()[1] / 1000)
        c.close()

    th = threading.Thread(target=follow, daemon=True)
    try:
        for w in workers:
            w.wait_ready()
        wait_assigned(workers, args.partitions)  # incident 0 must not time the group's join
        th.start()
        following.wait(30)
        p = KafkaSettings.of(bootstrap).producer(**{"linger.ms": 0})
        lat, at, produced = [], [], []
        t0 = int(time.time() * 1000)
        for k in range(args.incidents):
            setup, trigger, scope = incident_events(k, t0 + k * 100)
            for d in setup:
                p.produce(topics.events, key=d["job_id"].encode(), value=CODEC.encode_event(d))
            p.flush(10)
            time.sleep(0.15)  # the set-up is folded before the divergence arrives
            start, wall = time.perf_counter(), time.time()
            p.produce(topics.events, key=trigger["job_id"].encode(), value=CODEC.encode_event(trigger))
            p.flush(10)
            deadline = time.monotonic() + 10
            while not scope <= seen.keys() and time.monotonic() < deadline:
                time.sleep(0.001)
            if scope <= seen.keys():
                lat.append(max(seen[j] for j in scope) - start)
                at.append(k)
                produced.append(max(stamped[j] for j in scope) - wall)
    finally:
        stop.set()
        for w in workers:
            w.kill()
    forget_run(bootstrap, prefix, app_id, keep=args.keep_topics)
    slowest = sorted(zip(lat, at), reverse=True)[:3]
    lat.sort()
    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) >= 2 else lat * 99
    return {"incidents": args.incidents, "measured": len(lat), "p50_ms": 1000 * statistics.median(lat),
            "p90_ms": 1000 * q[89], "p99_ms": 1000 * q[98], "max_ms": 1000 * lat[-1],
            "slowest": [{"incident": k, "ms": round(1000 * x, 1)} for x, k in slowest],
            "produced_p99_ms": 1000 * (statistics.quantiles(produced, n=100, method="inclusive")[98]
                                       if len(produced) >= 2 else max(produced, default=0)),
            "produced_max_ms": 1000 * max(produced, default=0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--incidents", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--keep-topics", action="store_true",
                    help="keep each run's topics and consumer groups on the broker (deleted by default)")
    ap.add_argument("--worker-args", nargs="*", default=[])
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--signing", choices=("off", "on", "compare", "alternate"), default="off",
                    help="workers sign commitments and control records (a throw-away key); compare: both; "
                         "alternate: throughput only, --rounds alternated unsigned and signed runs")
    ap.add_argument("--seals", choices=("off", "on", "compare"), default="off",
                    help="jobs seal their events (streams.core.seals); compare: alternate plain and sealed runs")
    ap.add_argument("--seal-every", type=int, default=64, help="a job seals at least every N-th event")
    ap.add_argument("--rounds", type=int, default=2, help="--seals compare: runs of each kind")
    ap.add_argument("--cost-first", action="store_true",
                    help="--seals compare / --signing alternate: each round runs the sealed (signed) kind first")
    ap.add_argument("--progress-every", type=int, default=10, help="steps between Progress events")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--stages", choices=("all", "split", "compare"), default="all",
                    help="split: each worker is a route process and a fold process (traintrace worker --stages "
                         "route / fold); compare: throughput only, --rounds alternated runs of all-stage workers "
                         "and split ones")
    ap.add_argument("--profile", metavar="DIR", default=None,
                    help="record each worker with py-spy during the throughput run (DIR/workerN.txt collapsed "
                         "stacks, .svg flame graph) and print where its time went (bench/profile.py)")
    ap.add_argument("--snapshots", choices=("on", "compare"), default="on",
                    help="compare: throughput only, --rounds alternated runs of workers without snapshots "
                         "(--snapshot-every 0) and with the default ones (streams.worker.snapshots)")
    ap.add_argument("--compare-worker-args", type=str.split, default=None, metavar="'ARGS'",
                    help="throughput only: --rounds alternated runs of workers with the default arguments and with "
                         "these added (e.g. --compare-worker-args='--fold-feed faust')")
    ap.add_argument("--checkpoints", choices=("on", "compare"), default="on",
                    help="compare: throughput only, --rounds alternated runs of signing workers without C2SP "
                         "checkpoint notes (--log-origin none) and with them (the default origin): issue 28's cost")
    ap.add_argument("--cluster", choices=("one", "three", "compare"), default="one",
                    help="the local broker(s) started when --bootstrap is not given: one node, a three-node "
                         "cluster (topics replicated 3 times, min.insync.replicas 2, acks=all), or both one "
                         "after the other in this run")
    args = ap.parse_args()
    if args.cluster == "compare":
        return compare_clusters(args)
    if args.seals == "compare" or args.signing == "alternate" or args.snapshots == "compare" \
            or args.compare_worker_args or args.checkpoints == "compare" or args.stages == "compare":
        return alternate(args)

    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker, bootstrap = start_kafka(args.cluster)
    report = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if args.signing in ("off", "compare"):
                report = measure(bootstrap, args, Path(tmp) / "unsigned", signed=False)
            if args.signing in ("on", "compare"):
                signed = measure(bootstrap, args, Path(tmp) / "signed", signed=True)
                report = signed if args.signing == "on" else {**report, "signed": signed}
    finally:
        if broker is not None:
            broker.stop()
    if args.signing == "compare":
        report["signing_cost"] = signing_cost(report, report["signed"])
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print_report(report, args.signing)


def start_kafka(shape: str):
    """A local Kafka of one node or three (fresh data dirs): (handle with .stop(), bootstrap)."""
    if shape == "three":
        from streams.devtools.cluster import LocalCluster

        kafka = LocalCluster(Path(tempfile.mkdtemp(prefix="tt-bench-cluster-")), nodes=3, die_with_parent=True)
    else:
        from streams.devtools.broker import LocalBroker

        kafka = LocalBroker(Path(tempfile.mkdtemp(prefix="tt-bench-broker-")), die_with_parent=True)
    return kafka, kafka.start(timeout=120)


def compare_clusters(args) -> None:
    """Throughput and latency on one node, then on three (RF 3, acks=all), in this run."""
    report = {}
    for shape in ("one", "three"):
        kafka, bootstrap = start_kafka(shape)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                report[shape] = measure(bootstrap, args, Path(tmp) / shape, signed=False)
        finally:
            kafka.stop()
        t, lat = report[shape].get("throughput"), report[shape]["latency"]
        print(f"{shape} node(s): " + (f"{t['fold_per_s_per_worker']:,.0f} events/s per worker, " if t else "")
              + f"divergence -> last rollback p50 {lat['p50_ms']:.0f} ms, p99 {lat['p99_ms']:.0f} ms",
              file=sys.stderr, flush=True)
    if "throughput" in report["one"]:
        report["three_over_one_fold_rate"] = (report["three"]["throughput"]["fold_per_s"]
                                              / report["one"]["throughput"]["fold_per_s"])
    report["three_over_one_p50"] = report["three"]["latency"]["p50_ms"] / report["one"]["latency"]["p50_ms"]
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for shape, label in (("one", "one node (RF 1)"), ("three", "three nodes (RF 3, min ISR 2, acks=all)")):
        print_report(report[shape], "off", title=f"traintrace live pipeline benchmark: {label}")
    if "three_over_one_fold_rate" in report:
        print(f"three nodes / one: fold rate x{report['three_over_one_fold_rate']:.3f}, "
              f"latency p50 x{report['three_over_one_p50']:.2f}")


def alternate(args) -> None:
    """Throughput of plain and sealed (``--seals compare``) or unsigned and signed
    (``--signing alternate``) runs, alternated, on one broker: an order effect (the second run
    of a process on a broker that holds the first's topics) cannot pass for the cost."""
    signing = args.signing == "alternate"
    snapshots = args.snapshots == "compare"
    checkpoints = args.checkpoints == "compare"
    split = args.stages == "compare"
    other = " ".join(args.compare_worker_args or ())
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from streams.devtools.broker import LocalBroker

        broker = LocalBroker(Path(tempfile.mkdtemp(prefix="tt-bench-broker-")))
        bootstrap = broker.start()
    rates: dict[str, list[float]] = {"base": [], "cost": []}
    raw: list[float] = []
    label = ({"base": "all stages", "cost": "split     "} if split else
             {"base": "default", "cost": other} if other else
             {"base": "signed, no checkpoints", "cost": "signed, checkpoints  "} if checkpoints else
             {"base": "no snapshots", "cost": "snapshots   "} if snapshots else
             {"base": "unsigned" if signing else "plain ", "cost": "signed  " if signing else "sealed"})
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.rounds):
                for kind in (("cost", "base") if args.cost_first else ("base", "cost")):
                    d = Path(tmp) / f"{kind}{i}"
                    d.mkdir()
                    run = argparse.Namespace(**vars(args))
                    if split:
                        run.seals = "off"
                        run.stages = "split" if kind == "cost" else "all"
                    elif other:
                        run.seals = "off"
                        if kind == "cost":
                            run.worker_args = [*args.worker_args, *args.compare_worker_args]
                    elif checkpoints:
                        from streams.signing import generate_key, save_private_key

                        run.seals = "off"
                        key = save_private_key(generate_key(), d / "processor.key")
                        run.worker_args = [*args.worker_args, "--signing-key", str(key)]
                        if kind == "base":
                            run.worker_args += ["--log-origin", "none"]
                    elif snapshots:
                        run.seals = "off"
                        if kind == "base":
                            run.worker_args = [*args.worker_args, "--snapshot-every", "0"]
                    elif signing:
                        run.seals = "off"
                        if kind == "cost":
                            from streams.signing import generate_key, save_private_key

                            key = save_private_key(generate_key(), d / "processor.key")
                            run.worker_args = [*args.worker_args, "--signing-key", str(key)]
                    else:
                        run.seals = "on" if kind == "cost" else "chain"
                    r = throughput(bootstrap, run, d)
                    rates[kind].append(r["fold_per_s_per_worker"])
                    raw.append(r["raw_consume_decode_per_s"])
                    print(f"round {i + 1} {label[kind]}: {r['fold_per_s_per_worker']:,.0f} events/s per worker "
                          f"({r['events']:,} events; x{r['live_over_pure_fold']:.2f} the pure fold)", file=sys.stderr)
    finally:
        if broker is not None:
            broker.stop()
    ratios = [c / b for b, c in zip(rates["base"], rates["cost"])]
    what = "route and fold processes / one all-stage process" if split else f"{other} / default" if other else "with snapshots / without" if snapshots else \
        "signed with checkpoint notes / without" if checkpoints else "signed / unsigned" if signing else "sealed / plain"
    report = {"compared": what, "base_per_worker": rates["base"], "cost_per_worker": rates["cost"],
              "pair_ratios": ratios, "median_ratio": statistics.median(ratios), "seal_every": args.seal_every,
              "progress_every": args.progress_every, "raw_consume_decode_per_s": statistics.median(raw)}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{what} events/s per worker: pairs {', '.join(f'x{r:.3f}' for r in ratios)}; "
          f"median x{report['median_ratio']:.3f}" + ("" if other or split else f" (goal >= x{0.9 if snapshots else 0.95})")
          + ("" if signing or snapshots or other or checkpoints or split else
             f"; seal every {args.seal_every}, Progress every {args.progress_every} step(s)"))


def measure(bootstrap: str, args, tmp: Path, signed: bool) -> dict:
    """Throughput (unless skipped) and latency, the workers signing when ``signed``."""
    tmp.mkdir(parents=True)
    run = argparse.Namespace(**vars(args))
    if signed:
        from streams.signing import generate_key, save_private_key

        key = save_private_key(generate_key(), tmp / "processor.key")
        run.worker_args = [*args.worker_args, "--signing-key", str(key)]
    out = {"signed": signed}
    if not args.skip_throughput:
        out["throughput"] = throughput(bootstrap, run, tmp)
    out["latency"] = latency(bootstrap, run, tmp)
    return out


def signing_cost(unsigned: dict, signed: dict) -> dict:
    """Signed ÷ unsigned: per-worker fold rate (goal >= 0.95) and latency p50/p99."""
    out = {}
    if "throughput" in unsigned:
        out["fold_per_s_per_worker_ratio"] = (signed["throughput"]["fold_per_s_per_worker"]
                                              / unsigned["throughput"]["fold_per_s_per_worker"])
    for q in ("p50_ms", "p99_ms"):
        out[f"latency_{q}_ratio"] = signed["latency"][q] / unsigned["latency"][q]
    return out


def print_report(report: dict, signing: str, title: str | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    title = title or "traintrace live pipeline benchmark" + {"on": " (signed)", "compare": " (unsigned)"}.get(signing, "")
    t = Table(title=title, title_justify="left")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_column("goal", justify="right")
    if "throughput" in report:
        r = report["throughput"]
        t.add_row("events", f"{r['events']:,} ({r['jobs']:,} jobs, {r['partitions']} partitions)", "")
        t.add_row("raw confluent-kafka consume+decode", f"{r['raw_consume_decode_per_s']:,.0f} events/s", "")
        how = " (a route and a fold process each)" if r.get("layout") == "split" else ""
        t.add_row(f"fold rate, {r['workers']} worker(s){how}", f"{r['fold_per_s']:,.0f} events/s", "")
        t.add_row("events/s per worker", f"{r['fold_per_s_per_worker']:,.0f}", ">= 20,000")
        t.add_row("fold rate / raw consume+decode", f"{r['ratio_fold_over_raw']:.3f}", ">= 0.3")
        if "live_over_pure_fold" in r:
            t.add_row("live cost per event / the pure fold of the same events",
                      f"{r['live_us_per_event']:.1f} / {r['pure_fold_us_per_event']:.1f} µs = "
                      f"x{r['live_over_pure_fold']:.2f}", "<= x2")
        if "raw_consume_typed_per_s" in r:
            t.add_row("  raw consume + the worker's typed decode",
                      f"{r['raw_consume_typed_per_s']:,.0f} events/s (fold / it {r['ratio_fold_over_raw_typed']:.3f})", "")
        t.add_row("catch-up: events / (partitions taken over -> all folded)",
                  f"{r['catch_up_per_s']:,.0f} events/s (/ raw {r['ratio_catch_up_over_raw']:.3f})", "")
        t.add_row("  the group's join before it", f"{r['join_s']:.1f} s", "")
        if r.get("catch_up_per_s_by_tenth"):
            t.add_row("  by tenth of the backlog (events/s, k)",
                      " ".join("-" if x is None else f"{x / 1000:.1f}" for x in r["catch_up_per_s_by_tenth"]), "")
        names = ["route", "fold"] * r["workers"] if r.get("layout") == "split" else ["worker"] * r["workers"]
        if r.get("cpu_us_per_event"):
            t.add_row("  CPU per event of the catch-up, by process",
                      ", ".join(f"{k} {us:.1f} µs" for k, us in zip(names, r["cpu_us_per_event"])), "")
        if r.get("loop_busy"):
            t.add_row("  event loop (main thread): CPU per event, share of the catch-up it ran",
                      ", ".join(f"{k} {us:.1f} µs {b:.0%}" for k, us, b in
                                zip(names, r["loop_us_per_event"], r["loop_busy"])), "")
            t.add_row("  the machine's cores busy meanwhile (the broker's too)", f"{r['machine_busy']:.0%}", "")
            if "rest_us_per_event" in r:
                t.add_row("  CPU per event of the rest of the machine (the broker, the bench)",
                          f"{r['rest_us_per_event']:.1f} µs", "")
        if r.get("threads_us_per_event"):
            t.add_row("  CPU per event by thread (loop + other Python threads + librdkafka), "
                      "share of the catch-up the GIL was held (loop + Python threads)",
                      ", ".join(f"{k} {th.get('loop', 0):.1f} + {th.get('python', 0):.1f} + {th.get('librdkafka', 0):.1f} µs, "
                                f"{g:.0%}" for k, th, g in zip(names, r["threads_us_per_event"], r["gil_busy"])), "")
        if r.get("stages"):
            wall = r["stages_wall_s"]
            parts = ", ".join(f"{k.replace('_', ' ')} {v.get('s', 0) / wall:.0%}" for k, v in sorted(r["stages"].items()))
            t.add_row("  share of the catch-up's wall time", parts, "")
    r = report["latency"]
    t.add_row("divergence -> last rollback command", f"p50 {r['p50_ms']:.0f} ms, p90 {r['p90_ms']:.0f} ms", "")
    t.add_row("  p99 / max", f"{r['p99_ms']:.0f} ms / {r['max_ms']:.0f} ms ({r['measured']} incidents)",
              "p99 <= 100 ms, max <= 1 s")
    t.add_row("  slowest incidents", ", ".join(f"#{x['incident']} {x['ms']:.0f} ms" for x in r["slowest"]), "")
    t.add_row("  by the command's own timestamp", f"p99 {r['produced_p99_ms']:.0f} ms, max {r['produced_max_ms']:.0f} ms",
              "divergence produced -> command produced")
    if "signing_cost" in report:
        s, c = report["signed"], report["signing_cost"]
        if "throughput" in s:
            t.add_row("signed: events/s per worker", f"{s['throughput']['fold_per_s_per_worker']:,.0f} "
                      f"(x{c['fold_per_s_per_worker_ratio']:.3f} of unsigned)", ">= x0.95")
        t.add_row("signed: divergence -> last rollback", f"p50 {s['latency']['p50_ms']:.0f} ms "
                  f"(x{c['latency_p50_ms_ratio']:.2f}), p99 {s['latency']['p99_ms']:.0f} ms "
                  f"(x{c['latency_p99_ms_ratio']:.2f})", "")
    Console().print(t)


if __name__ == "__main__":
    main()
