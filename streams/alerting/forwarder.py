"""``traintrace alerts --alertmanager URL``: the referee's alerts, paged where the operators are.

Follows ``lineage.alerts``, ``lineage.control`` and ``lineage.manifests`` from their beginning (no
consumer group: nothing committed, any number of forwarders), folds them into an
:class:`~streams.alerting.book.AlertBook` and posts to Alertmanager's v2 API
(``POST /api/v2/alerts``): a new or changed alert at once, an ended one once with its
``endsAt``, and every active one again every ``resend_s`` (Alertmanager ends an alert it has not
heard of for ``resolve_timeout``). The label set of an alert never changes, so a restarted
forwarder re-posting everything pages nobody twice: Alertmanager deduplicates by labels.

Why a forwarder and not metrics plus rules: an alert of the referee names a cohort, a job, an
incident and what to do about it; as metrics those would be labels of unbounded cardinality and
the message would be lost. The pipeline's health (workers down, lag, latency) is metrics and
Prometheus rules (``deploy/prometheus/traintrace-rules.yml``).

An Alertmanager that is down or refuses is retried at the next pass (what was not accepted is
not marked sent); the forwarder never exits for it.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from streams.alerting.book import AlertBook
from streams.codec import Codec, DecodeError
from streams.control.commands import command_from_record
from streams.kafka import reader
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.records import Alert, DivergenceManifest, typed

log = logging.getLogger("traintrace.alerts")

Post = Callable[[list[dict[str, Any]]], None]


def http_post(url: str, timeout: float = 10.0) -> Post:
    """A poster to Alertmanager's ``/api/v2/alerts`` at ``url`` (raises on a refusal)."""
    endpoint = url.rstrip("/") + "/api/v2/alerts"

    def post(alerts: list[dict[str, Any]]) -> None:
        req = urllib.request.Request(endpoint, data=json.dumps(alerts).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            if resp.status >= 300:
                raise OSError(f"{endpoint}: HTTP {resp.status}")

    return post


class Forwarder:
    def __init__(self, kafka: KafkaSettings | str, topics: TopicNames, post: Post, *, page_url: str | None = None,
                 resend_s: float = 60.0, codec: Codec | None = None, book: AlertBook | None = None) -> None:
        self.kafka = KafkaSettings.of(kafka)
        self.topics = topics
        self.post = post
        self.page_url = page_url
        self.resend_s = resend_s
        self.codec = codec or Codec()
        self.book = book or AlertBook()
        self.sent: dict[Any, tuple[int | None, str]] = {}  # key -> (its end, its summary) as last posted
        self.last_resend = 0.0
        self.posted = 0
        self.failures = 0
        self.undecodable = 0

    def fold(self, topic: str, value: bytes | None) -> None:
        """Fold one record of the three topics, read through its type (a record that does not
        decode, or lacks what its kind needs, is counted and skipped)."""
        try:
            name, rec = self.codec.decode_record(value or b"")
            if topic == self.topics.control:
                cmd = command_from_record(name, rec)
                if cmd is not None:
                    self.book.add_control(cmd)
                return
            record = typed(name, rec)
        except (DecodeError, KeyError, TypeError):
            self.undecodable += 1
            return
        if isinstance(record, Alert) and topic == self.topics.alerts:
            self.book.add_alert(record)
        elif isinstance(record, DivergenceManifest) and topic == self.topics.manifests:
            self.book.add_manifest(record)

    def due(self, now_ms: int, resend: bool) -> list[tuple[Any, dict[str, Any], int | None]]:
        """What to post now: new or changed alerts, and (``resend``) every active one again."""
        out = []
        for key, posted, ends in self.book.postable(self.page_url):
            state = (ends, posted["annotations"]["summary"])
            active = ends is None or ends > now_ms
            if self.sent.get(key) != state or (resend and active):
                out.append((key, posted, ends))
        return out

    def flush(self, now_ms: int | None = None, resend: bool = False) -> int:
        """Post what is due; returns how many were accepted (0 when Alertmanager refused)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        batch = self.due(now_ms, resend)
        if not batch:
            return 0
        try:
            self.post([p for _k, p, _e in batch])
        except (OSError, urllib.error.URLError, ValueError) as exc:
            self.failures += 1
            log.warning("traintrace alerts: Alertmanager refused or unreachable (%s): %d alert(s) kept for the "
                        "next pass", exc, len(batch))
            return 0
        for key, posted, ends in batch:
            self.sent[key] = (ends, posted["annotations"]["summary"])
        self.posted += len(batch)
        return len(batch)

    def once(self) -> int:
        """Read the three topics to their end and post everything (active and ended)."""
        names = [self.topics.alerts, self.topics.control, self.topics.manifests]
        got = reader.read_topics_to_end(self.kafka, names)
        for topic in names:
            for msg in got.get(topic, []):
                self.fold(topic, msg.value())
        return self.flush(resend=True)

    def run(self, stop: Callable[[], bool] = lambda: False, interval: float = 1.0) -> None:
        """Follow the topics for ever (until ``stop()``), posting as the book changes."""
        names = [self.topics.alerts, self.topics.control, self.topics.manifests]
        consumer = self.kafka.consumer(f"traintrace-alerts-{uuid.uuid4().hex}",
                                       **{"enable.auto.commit": False, "enable.partition.eof": False})
        assigned: set[str] = set()
        try:
            last_flush = 0.0
            while not stop():
                missing = [t for t in names if t not in assigned]
                if missing:
                    parts = []
                    for t in missing:
                        try:
                            parts += [TopicPartition(t, p, OFFSET_BEGINNING)
                                      for p in reader.topic_partitions(self.kafka, t, timeout=5.0)]
                            assigned.add(t)
                        except Exception as exc:  # noqa: BLE001 - a topic not there yet: later
                            log.info("traintrace alerts: %s not readable yet (%s)", t, exc)
                    if parts:
                        consumer.incremental_assign(parts)
                for msg in consumer.consume(500, timeout=0.5):
                    if msg.error():
                        if msg.error().code() != KafkaError._PARTITION_EOF:
                            log.warning("traintrace alerts: %s", msg.error())
                        continue
                    self.fold(msg.topic(), msg.value())
                now = time.monotonic()
                if now - last_flush >= interval:
                    resend = now - self.last_resend >= self.resend_s
                    if self.flush(resend=resend) and resend:
                        self.last_resend = now
                    elif resend and not self.due(int(time.time() * 1000), True):
                        self.last_resend = now
                    last_flush = now
        finally:
            consumer.close()


__all__ = ["Forwarder", "http_post"]
