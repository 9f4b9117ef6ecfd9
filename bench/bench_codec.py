"""Benchmark of the Avro codec (streams.codec) and of Kafka with its bytes.

Measures, in one run, on a realistic mix of events (a generated population-based-training cohort
log — mostly Progress, with checkpoints, consumptions, divergences, rollbacks — each event carrying
its 64-hex ``prev_hash``/``hash``):

1. encode and decode rates (events/s, one core) of
   (a) fastavro ``schemaless_writer``/``schemaless_reader`` alone with the same parsed schema
       (Avro-form data prepared beforehand: the floor),
   (b) our single-object codec (``Codec.encode_event`` from the flat dict, with the strict field
       checks; ``Codec.decode_event`` back to the flat dict), and the ratio (b)/(a),
   (c) the same codec in the Confluent wire format (mock:// Schema Registry), for reference;
2. if a broker is reachable (``--bootstrap`` or ``KAFKA_BOOTSTRAP_SERVERS``; otherwise one is
   started with ``streams.devtools.broker.LocalBroker`` in a temporary directory): the raw
   confluent-kafka produce rate and consume rate of ``--kafka-events`` (100k) encoded events on a
   fresh topic, and the consume+decode rate.

Usage: python bench/bench_codec.py [--events 100000] [--kafka-events 100000] [--partitions 1]
                                   [--bootstrap HOST:PORT] [--no-kafka] [--json]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import logging
import os
import platform
import sys
import tempfile
import time
import uuid
from io import BytesIO
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fastavro import schemaless_reader, schemaless_writer  # noqa: E402

from streams.codec import Codec  # noqa: E402


# -- data -------------------------------------------------------------------------------------


def realistic_events(n: int, seed: int = 11) -> list[dict[str, Any]]:
    """``n`` events of generated cohorts, with a hash chain per job (as the job-side client sends)."""
    try:
        from streams.testing.cohort import generate_cohorts
    except ImportError:  # pragma: no cover - fall back to the shared test vectors
        generate_cohorts = None
    out: list[dict[str, Any]] = []
    if generate_cohorts is not None:
        jobs = max(20, n // 90 + 20)
        for ev in generate_cohorts(jobs=jobs, cohort_size=20, steps=800, seed=seed, prefix="b"):
            out.append(ev)
            if len(out) >= n:
                break
    else:
        files = sorted((REPO.parent / "shared" / "scenarios").glob("*.jsonl"))
        base = [json.loads(l) for f in files for l in f.read_text().splitlines() if l.strip()]
        while len(out) < n:
            out.extend(dict(e) for e in base[: n - len(out)])
    heads: dict[str, str] = {}
    for ev in out:
        prev = heads.get(ev["job_id"], "0" * 64)
        h = hashlib.sha256((prev + json.dumps(ev, sort_keys=True)).encode()).hexdigest()
        ev["prev_hash"], ev["hash"] = prev, h
        heads[ev["job_id"]] = h
    return out


def mix_of(events: list[dict[str, Any]]) -> dict[str, float]:
    counts: dict[str, int] = {}
    for e in events:
        counts[e["type"]] = counts.get(e["type"], 0) + 1
    return {t: round(c / len(events), 4) for t, c in sorted(counts.items(), key=lambda kv: -kv[1])}


# -- timing -----------------------------------------------------------------------------------


def best_rate(fn: Callable[[], None], n: int, repeat: int) -> float:
    """Events per second of the best of ``repeat`` runs of ``fn`` (which handles ``n`` events)."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return n / best


def bench_codec(events: list[dict[str, Any]], repeat: int) -> dict[str, Any]:
    single = Codec(registry_url="", wire_format="single-object")
    confluent = Codec(registry_url=f"mock://bench-{uuid.uuid4().hex}")
    info = single.schemas.reader("LineageEvent")
    parsed = info.parsed
    shape = single.event_shape
    datums = [shape.to_avro(e) for e in events]
    n = len(events)

    def fa_encode():
        for d in datums:
            bio = BytesIO()
            schemaless_writer(bio, parsed, d)
            bio.getvalue()

    bodies = []
    for d in datums:
        bio = BytesIO()
        schemaless_writer(bio, parsed, d)
        bodies.append(bio.getvalue())

    def fa_decode():
        for b in bodies:
            schemaless_reader(BytesIO(b), parsed, None, return_record_name=True)

    def enc(codec):
        encode = codec.encode_event

        def run():
            for e in events:
                encode(e)

        return run

    so_bytes = [single.encode_event(e) for e in events]
    cf_bytes = [confluent.encode_event(e) for e in events]

    def dec(codec, data):
        decode = codec.decode_event

        def run():
            for b in data:
                decode(b)

        return run

    # Sanity: the codec gives back what it was given.
    assert single.decode_event(so_bytes[0])["seq"] == events[0]["seq"]
    assert so_bytes[0][10:] == bodies[0] == cf_bytes[0][5:]

    r = {
        "fastavro_encode": best_rate(fa_encode, n, repeat),
        "fastavro_decode": best_rate(fa_decode, n, repeat),
        "single_object_encode": best_rate(enc(single), n, repeat),
        "single_object_decode": best_rate(dec(single, so_bytes), n, repeat),
        "confluent_encode": best_rate(enc(confluent), n, repeat),
        "confluent_decode": best_rate(dec(confluent, cf_bytes), n, repeat),
    }
    r["ratio_encode"] = r["single_object_encode"] / r["fastavro_encode"]
    r["ratio_decode"] = r["single_object_decode"] / r["fastavro_decode"]
    r["mean_bytes_single_object"] = sum(map(len, so_bytes)) / n
    r["mean_bytes_json"] = sum(len(json.dumps(e)) for e in events[:10000]) / min(n, 10000)
    return r


# -- Kafka ------------------------------------------------------------------------------------

# librdkafka's informational lines (e.g. the retry while a fresh broker loads its coordinator).
_quiet = logging.getLogger("bench_codec.kafka")
_quiet.propagate = False
_quiet.addHandler(logging.NullHandler())


class _Broker:
    """The broker to use: given, from the environment, or a LocalBroker started here."""

    def __init__(self, bootstrap: str | None) -> None:
        self.bootstrap = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or None
        self.started = None
        self.tmp: tempfile.TemporaryDirectory | None = None
        self.note = "given" if self.bootstrap else ""

    def __enter__(self) -> "_Broker":
        if self.bootstrap:
            return self
        try:
            from streams.devtools.broker import LocalBroker
        except ImportError:
            self.note = "no broker: streams.devtools.broker is not available"
            return self
        self.tmp = tempfile.TemporaryDirectory(prefix="bench-codec-kafka-")
        broker = LocalBroker(self.tmp.name, die_with_parent=True)
        try:
            self.bootstrap = broker.start(timeout=120)
        except Exception as exc:  # noqa: BLE001 - report and go on without Kafka
            self.note = f"no broker: {type(exc).__name__}: {exc}"
            return self
        self.started = broker
        self.note = "LocalBroker started for this run"
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.started is not None:
            self.started.stop(timeout=30)
        if self.tmp is not None:
            self.tmp.cleanup()


def bench_kafka(bootstrap: str, values: list[tuple[bytes, bytes]], codec: Codec, partitions: int) -> dict[str, Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench-codec-{uuid.uuid4().hex}"
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1),
                                   NewTopic(topic + "-warmup", num_partitions=1, replication_factor=1)])
    for fut in futures.values():
        fut.result(60)
    deadline = time.monotonic() + 30
    while True:
        meta = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
        if meta and meta.error is None and len(meta.partitions) == partitions and all(
            p.leader >= 0 for p in meta.partitions.values()
        ):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} has no leader")
        time.sleep(0.1)

    pconf = {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "enable.idempotence": True,
             "acks": "all", "linger.ms": 5}
    producer = Producer({**pconf, "logger": _quiet})
    errors: list[Any] = []
    # Warm up outside the timing: metadata, the idempotent producer id (a fresh broker answers
    # "coordinator load in progress" for a while), the connection.
    producer.produce(topic + "-warmup", value=b"x")
    producer.flush(60)

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    n = len(values)
    t = time.perf_counter()
    for key, value in values:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    remaining = producer.flush(120)
    produce_s = time.perf_counter() - t
    if remaining or errors:
        raise RuntimeError(f"produce failed: {remaining} undelivered, errors {errors[:3]}")

    def consume(decode: Callable[[bytes], Any] | None) -> tuple[float, float]:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                            "logger": _quiet,
                            "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                            "max.partition.fetch.bytes": 10485760})
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got = 0
        first = None
        t0 = time.perf_counter()
        stop = t0 + 120
        try:
            while got < n and time.perf_counter() < stop:
                batch = consumer.consume(num_messages=10000, timeout=0.5)
                if not batch:
                    continue
                if first is None:
                    first = time.perf_counter()
                for msg in batch:
                    if msg.error() is not None:
                        raise RuntimeError(str(msg.error()))
                    value = msg.value()
                    if decode is not None:
                        decode(value)
                    got += 1
        finally:
            end = time.perf_counter()
            consumer.close()
        if got < n:
            raise RuntimeError(f"consumed {got} of {n}")
        return n / (end - (first or t0)), n / (end - t0)

    consume_rate, consume_rate_total = consume(None)
    decode_rate, decode_rate_total = consume(codec.decode_event)
    try:
        admin.delete_topics([topic, topic + "-warmup"], operation_timeout=30)
    except Exception:  # noqa: BLE001
        pass
    return {
        "events": n,
        "partitions": partitions,
        "mean_value_bytes": sum(len(v) for _, v in values) / n,
        "producer_config": {k: v for k, v in pconf.items() if k != "bootstrap.servers"},
        "produce": n / produce_s,
        "consume": consume_rate,
        "consume_decode": decode_rate,
        "consume_incl_first_fetch": consume_rate_total,
        "consume_decode_incl_first_fetch": decode_rate_total,
    }


# -- report -----------------------------------------------------------------------------------


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    c = result["codec"]
    console = Console()
    table = Table(title=f"Codec, {result['events']:,} events (one core)")
    table.add_column("path")
    table.add_column("encode (ev/s)", justify="right")
    table.add_column("decode (ev/s)", justify="right")
    table.add_row("(a) fastavro schemaless alone", f"{c['fastavro_encode']:,.0f}", f"{c['fastavro_decode']:,.0f}")
    table.add_row("(b) Codec, single-object", f"{c['single_object_encode']:,.0f}", f"{c['single_object_decode']:,.0f}")
    table.add_row("(b)/(a)", f"{c['ratio_encode']:.2f}", f"{c['ratio_decode']:.2f}")
    table.add_row("(c) Codec, Confluent (mock registry)", f"{c['confluent_encode']:,.0f}", f"{c['confluent_decode']:,.0f}")
    console.print(table)
    console.print(f"mean size: {c['mean_bytes_single_object']:.0f} B single-object vs {c['mean_bytes_json']:.0f} B JSON")
    console.print(f"mix: {result['mix']}")
    k = result.get("kafka")
    if k:
        t = Table(title=f"Kafka ({result['broker']}), {k['events']:,} events, {k['partitions']} partition(s), "
                        f"{k['mean_value_bytes']:.0f} B values")
        t.add_column("what")
        t.add_column("events/s", justify="right")
        t.add_row("produce (raw confluent-kafka, acks=all, idempotent)", f"{k['produce']:,.0f}")
        t.add_row("consume (raw)", f"{k['consume']:,.0f}")
        t.add_row("consume + decode_event", f"{k['consume_decode']:,.0f}")
        console.print(t)
        console.print(f"including the first fetch: consume {k['consume_incl_first_fetch']:,.0f}/s, "
                      f"consume+decode {k['consume_decode_incl_first_fetch']:,.0f}/s")
    else:
        console.print(f"Kafka: skipped ({result['broker']})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000, help="events for the codec rates")
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs for the codec rates")
    ap.add_argument("--kafka-events", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the result as JSON only")
    args = ap.parse_args(argv)

    events = realistic_events(max(args.events, args.kafka_events))
    result: dict[str, Any] = {
        "events": args.events,
        "python": platform.python_version(),
        "mix": mix_of(events[: args.events]),
        "codec": bench_codec(events[: args.events], args.repeat),
    }
    if args.no_kafka:
        result["broker"] = "--no-kafka"
    else:
        codec = Codec(registry_url="", wire_format="single-object")
        values = [(e["job_id"].encode(), codec.encode_event(e)) for e in events[: args.kafka_events]]
        with _Broker(args.bootstrap) as broker:
            result["broker"] = broker.note
            if broker.bootstrap:
                result["kafka"] = bench_kafka(broker.bootstrap, values, codec, args.partitions)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
