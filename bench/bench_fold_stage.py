"""The fold stage's work per event in-process, part by part, against the pure core (issue 27).

The events of ``bench_pipeline`` (the same generator and seed) are encoded, routed by the route
stage's own ``Router`` into the ``EventBatch`` records a route stage writes (per partition, in
chunks of ``--chunk`` records), and then, with the worker's garbage collector settings:

1. the core alone: ``Lineage.fold`` + ``decide`` per event, one engine per cohort;
2. ``Referee.handle`` around the same core (the records it decides, the statistics);
3. the decode of the records: the ``EventBatch`` and each event by hand;
4. the encoding of every record the referee decides to publish;
5. all of it as the fold stage runs it: ``fold_batch`` and the encoding;
6. the same work with each event decoded and then folded before the next is decoded;
7. 5 in an all-stage worker: each record handed over by the route stage of the same process
   with the events it parsed (``ParsedEvents``: its put and take timed, nothing read or decoded).

Printed: microseconds per event of each (best of ``--repeats``), and all of it ÷ the core alone
(the share of the fold stage's work that is not the core). 1 and 2 fold events decoded before
the clock starts; 5 decodes the events of a record first and then folds them (as ``fold_batch``
does since the fourteenth round of issue 27), so the parts add up to about 5: decoding and folding
one event at a time cost 4–5 µs an event more than the parts on the bench machine (6 runs that
way, each event decoded and then folded before the next is decoded). No Kafka: what the live fold
process spends beyond this (librdkafka, the checkpoint view's thread, snapshots, the event loop)
is what ``bench_pipeline``'s CPU per event shows above it.

Usage: python bench/bench_fold_stage.py [--events 200000] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streams.codec import Codec  # noqa: E402
from streams.core.decide import Lineage  # noqa: E402
from streams.referee.input import ParsedEvents, fold_batch, read_batch  # noqa: E402
from streams.referee.referee import Referee  # noqa: E402
from streams.testing.cohort import generate_cohorts  # noqa: E402
from streams.worker.gctune import tune  # noqa: E402
from streams.worker.router import RawRecord, Router  # noqa: E402
from streams.worker.stages import EVENTS_PER_BATCH  # noqa: E402

T0 = 1_760_000_000_000


def routed_records(codec: Codec, events: int, partitions: int, chunk: int) -> tuple[int, list[tuple[int, bytes]]]:
    """(events, [(by-cohort partition, EventBatch bytes)]) in the order a worker would fold them."""
    per_job = 800 // 10 + 800 // 50 + 4  # as bench_pipeline sizes its jobs
    dicts = list(generate_cohorts(jobs=max(20, events // per_job), cohort_size=20, steps=800, seed=3,
                                  progress_every=10))
    parts: list[list[tuple[bytes, bytes]]] = [[] for _ in range(partitions)]
    for d in dicts:
        key = d["job_id"].encode()
        parts[zlib.crc32(key) % partitions].append((key, codec.encode_event(d)))
    router = Router(codec, {})
    out: list[tuple[int, bytes]] = []
    done = [0] * partitions
    while any(done[p] < len(parts[p]) for p in range(partitions)):
        for p in range(partitions):
            batch = parts[p][done[p]:done[p] + chunk]
            raws = [RawRecord("events", p, done[p] + i, k, v) for i, (k, v) in enumerate(batch)]
            done[p] += len(batch)
            for cohort, evs in router.route(raws, T0).batches.items():
                for i in range(0, len(evs), EVENTS_PER_BATCH):  # as the route stage's finish splits them
                    out.append((zlib.crc32(cohort.encode()) % partitions,
                                codec.encode_event_batch(cohort, evs[i:i + EVENTS_PER_BATCH])))
    return len(dicts), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=2000, help="records the route stage takes a call")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    codec = Codec()
    n, records = routed_records(codec, args.events, args.partitions, args.chunk)
    tune()
    decoded = []
    for p, value in records:
        b = read_batch(codec, value)
        decoded.append((p, b.cohort, [(r, codec.decode_event_typed(r["value"])) for r in b.events]))

    def timed(fn) -> float:
        best = float("inf")
        for _ in range(args.repeats):
            gc.collect()
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
        return 1e6 * best / n

    def core() -> None:
        engines: dict[str, Lineage] = {}
        for i, (_p, cohort, evs) in enumerate(decoded):
            lin = engines.get(cohort)
            if lin is None:
                lin = engines[cohort] = Lineage()
            for _r, e in evs:
                lin.fold(e, T0 + i)
                lin.decide()

    emitted: list = []

    def referee() -> None:
        ref = Referee()
        emitted.clear()
        for i, (p, cohort, evs) in enumerate(decoded):
            for r, e in evs:
                emitted.extend(ref.handle(cohort, e, T0 + i, p, True, None, r).emissions)

    def decode() -> None:
        for _p, value in records:
            for r in read_batch(codec, value).events:
                codec.decode_event_typed(r["value"])

    def encode() -> None:
        for em in emitted:
            codec.encode_record(em.record, em.value)
            codec.headers.record(em.record)

    def stage() -> None:
        ref = Referee()
        for i, (p, value) in enumerate(records):
            for em in fold_batch(codec, ref, value, p, i, T0 + i, True, lambda *a: None, None)[1]:
                codec.encode_record(em.record, em.value)
                codec.headers.record(em.record)

    def interleaved() -> None:  # 5 as fold_batch ran before: each event decoded, then folded
        ref = Referee()
        for i, (p, value) in enumerate(records):
            batch = read_batch(codec, value)
            out = []
            for r in batch.events:
                out.extend(ref.handle(batch.cohort, codec.decode_event_typed(r["value"]), T0 + i, p, True, None,
                                      r).emissions)
            ref.note_input(batch.cohort, p, i)
            for em in out:
                codec.encode_record(em.record, em.value)
                codec.headers.record(em.record)

    def handed() -> None:  # 5 with every record handed over (an all-stage worker's fold)
        ref = Referee()
        parsed = ParsedEvents(limit=n + 1)
        for (_p, value), (_p2, cohort, evs) in zip(records, decoded):
            parsed.put(value, cohort, evs)
        for i, (p, value) in enumerate(records):
            for em in fold_batch(codec, ref, value, p, i, T0 + i, True, lambda *a: None, parsed)[1]:
                codec.encode_record(em.record, em.value)
                codec.headers.record(em.record)

    report = {"events": n, "records": len(records), "core_us": timed(core), "referee_us": timed(referee),
              "decode_us": timed(decode), "encode_us": timed(encode), "published": len(emitted),
              "stage_us": timed(stage), "interleaved_us": timed(interleaved), "handed_us": timed(handed)}
    report["stage_over_core"] = report["stage_us"] / report["core_us"]
    report["interleaved_over_stage"] = report["interleaved_us"] / report["stage_us"]
    report["handed_over_core"] = report["handed_us"] / report["core_us"]
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{n:,} events in {len(records):,} EventBatch records; {len(emitted):,} records published")
    for label, key in (("the core alone (Lineage.fold + decide)", "core_us"),
                       ("Referee.handle around it", "referee_us"),
                       ("decode (EventBatch, then each event)", "decode_us"),
                       ("encoding what is published", "encode_us"),
                       ("the fold stage (fold_batch + encoding)", "stage_us"),
                       ("6: the same, decoded and folded in turn", "interleaved_us"),
                       ("7: 5, every record handed over", "handed_us")):
        print(f"  {label:42s} {report[key]:6.2f} us an event")
    print(f"  the fold stage / the core alone: x{report['stage_over_core']:.2f}")
    print(f"  decoded and folded in turn / the fold stage: x{report['interleaved_over_stage']:.2f}")
    print(f"  handed over / the core alone: x{report['handed_over_core']:.2f}")


if __name__ == "__main__":
    main()
