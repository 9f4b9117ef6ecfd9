"""bench/bench_pipeline.py measures the pure fold of its own events in the same run (issue 27: the
live cost per event ÷ the pure fold's), folding every event it would produce."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _bench():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import bench_pipeline as bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    return bench


def test_the_pure_fold_of_the_bench_events_is_timed():
    bench = _bench()
    args = argparse.Namespace(events=3000, progress_every=10, seals="off", seal_every=64)
    events, jobs = bench.bench_events(args)
    assert jobs >= 20 and len(list(events)) >= 3000
    assert bench.pure_fold_us(args, repeats=1) > 0


def test_the_event_loops_own_cpu_and_the_machines_are_read_from_proc():
    """What tells a worker's wait from its work: its main thread's CPU (the event loop) and the
    machine's busy cores, both from /proc; a process that is not there reads 0."""
    import os
    import threading
    import types

    bench = _bench()
    me = types.SimpleNamespace(proc=types.SimpleNamespace(pid=os.getpid()))
    busy0, total0 = bench.machine_cpu()
    before = bench.thread_cpu(me).get("loop", 0.0)
    for _ in range(50_000):  # until this process's main thread has run a clock tick more
        sum(range(10_000))
        if bench.thread_cpu(me).get("loop", 0.0) > before:
            break
    if threading.current_thread() is threading.main_thread():
        assert bench.thread_cpu(me).get("loop", 0.0) > before
    busy1, total1 = bench.machine_cpu()
    assert 0 <= busy0 <= total0 and 0 < busy1 <= total1 and busy1 >= busy0 and total1 >= total0  # (ticks: may lag)
    assert bench.thread_cpu(types.SimpleNamespace(proc=None)).get("loop", 0.0) == 0.0
    assert bench.thread_cpu(types.SimpleNamespace(proc=types.SimpleNamespace(pid=2 ** 22 + 7))).get("loop", 0.0) == 0.0


def test_a_workers_threads_cpu_is_read_by_kind():
    """Whether a worker is bound by its GIL: the CPU of its threads by kind, from /proc: its
    main thread (the loop), librdkafka's threads (named rdk:...), and every other thread, which
    runs Python; a process that is not there reads nothing."""
    import os
    import threading
    import types

    from confluent_kafka import Producer

    bench = _bench()
    me = types.SimpleNamespace(proc=types.SimpleNamespace(pid=os.getpid()))
    producer = Producer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0})  # starts rdk: threads
    try:
        kinds = bench.thread_cpu(me)
        assert "loop" in kinds and "librdkafka" in kinds and all(v >= 0 for v in kinds.values())
        before, seen = kinds.get("python", 0.0), []

        def burn() -> None:  # a Python thread of this process, until it has run a clock tick or more
            for _ in range(50_000):
                sum(range(10_000))
                if bench.thread_cpu(me).get("python", 0.0) > before:
                    seen.append(True)
                    return

        t = threading.Thread(target=burn)
        t.start()
        t.join()
        assert seen
    finally:
        del producer
    assert bench.thread_cpu(types.SimpleNamespace(proc=None)) == {}
    assert bench.thread_cpu(types.SimpleNamespace(proc=types.SimpleNamespace(pid=2 ** 22 + 7))) == {}


def test_the_stages_and_the_snapshot_encode_are_read_from_the_workers_metrics():
    """The bench's split of a worker's wall time: each stage's work and flush, and the snapshot
    rounds' encode (under the fold's lock), from /metrics as the worker renders it."""
    import types

    from streams.worker import metrics

    bench = _bench()
    metrics.SNAPSHOT_ENCODE_SECONDS.observe(0.25)
    metrics.STAGE_SECONDS.labels("fold", "work").observe(1.5)
    worker = types.SimpleNamespace(get=lambda path, timeout: metrics.render().decode())
    seen = bench.stage_seconds(worker)
    assert seen["snapshot_encode"]["calls"] >= 1 and seen["snapshot_encode"]["s"] >= 0.25
    assert seen["fold_work"]["calls"] >= 1 and seen["fold_work"]["s"] >= 1.5
    assert bench.stage_seconds(types.SimpleNamespace(get=lambda path, timeout: 1 / 0)) == {}


def test_the_catch_up_rate_is_given_by_tenth_of_the_backlog():
    bench = _bench()
    samples = [(0.0, 0), (1.0, 10), (2.0, 50), (3.0, 100)]  # (seconds, events folded)
    assert bench.rate_by_tenth(samples, 0, 100) == [10.0, 40.0, None, None, None, 50.0, None, None, None, None]
    steady = [(t / 10, 10 * t) for t in range(101)]  # 100 events/s, read every 0.1 s
    assert [round(x, 6) for x in bench.rate_by_tenth(steady, 0, 100)] == [100.0] * 10
    assert bench.rate_by_tenth([(0.0, 20)], 20, 100) == [None] * 10  # never read past the start
