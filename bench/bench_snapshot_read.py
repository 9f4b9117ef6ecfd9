"""What bringing a cohort back into memory costs in reads (issue 27): one record of a snapshot
topic at a known offset, through ``read_range`` (a fresh consumer each time: the takeover's way)
and through ``RecordReader`` (one consumer kept open: ``SnapshotStore.bring_back`` and the HTTP
views' rows of a resting cohort). Records of 20 KB on two partitions of a local broker, read in
a scattered order; median, min and max of each, and the ratio of the medians, measured in one run.

Usage: python bench/bench_snapshot_read.py [--reads 40] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_client import _Broker  # noqa: E402 - the benches' broker: given, or started for the run
from streams.kafka.reader import RecordReader, read_range  # noqa: E402
from streams.kafka.settings import KafkaSettings  # noqa: E402
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--reads", type=int, default=40)
    args = ap.parse_args()
    with _Broker(args.bootstrap) as broker:
        bootstrap = broker.bootstrap
        assert bootstrap is not None
        topics = TopicNames.from_env(f"sr{uuid.uuid4().hex[:8]}.")
        ensure_topics(bootstrap, standard_topics(topics, 2))
        kafka = KafkaSettings.of(bootstrap)
        producer = kafka.producer()
        for i in range(100):
            producer.produce(topics.snapshots, key=b"c:%d" % i, value=b"%05d" % i + b"x" * 20_000, partition=i % 2)
        producer.flush(30)
        reader = RecordReader(kafka, topics.snapshots)
        ways = {"read_range (a fresh consumer)":
                lambda p, o: next(iter(read_range(kafka, topics.snapshots, {p: (o, o + 1)})), None),
                "RecordReader (one consumer kept)": reader.read}
        medians = {}
        for name, read in ways.items():
            times = []
            for i in range(args.reads):
                part, off = i % 2, (i * 7) % 50
                t0 = time.perf_counter()
                msg = read(part, off)
                times.append(time.perf_counter() - t0)
                assert msg is not None and msg.offset() == off and int(msg.value()[:5]) == 2 * off + part
            times.sort()
            medians[name] = times[len(times) // 2]
            print(f"{name}: median {medians[name] * 1000:.1f} ms, min {times[0] * 1000:.1f}, "
                  f"max {times[-1] * 1000:.1f} ({args.reads} reads)")
        reader.close()
        a, b = medians.values()
        print(f"RecordReader ÷ read_range (medians): ×{b / a:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
