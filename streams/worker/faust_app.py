"""The Faust application: two thin agents around the router and the referee.

Flow (see the README for the diagram)::

    lineage.events ──(route agent: decode, validate, job→cohort table)──▶ lineage.by-cohort
       keyed job_id                     │ bad records                        keyed cohort_id
                                        ▼                                       │
                                   lineage.dlq            (referee agent: one core engine per cohort)
                                                                                 ▼
                 lineage.control · lineage.manifests · lineage.alerts · lineage.commitments ·
                 lineage.checkpoints (compacted checkpoint statuses, for /checkpoints/{id})

- Both agents use ``take_events`` batches; outputs go through one idempotent confluent-kafka
  producer (``murmur2_random``) and are flushed before the batch is acknowledged, so offsets are
  committed only after everything the batch caused is on the broker (at-least-once).
- The router's job → cohort map is a Faust table (RocksDB by default, changelog topic), keyed
  and partitioned like ``lineage.events``.
- The referee's state is event-sourced from ``lineage.by-cohort`` (kept forever): when a worker
  is assigned a partition it replays it up to the group's committed offset without publishing,
  re-reads the command ids already on ``lineage.control``, and goes on; duplicates of events are
  dropped by the core's (job_id, seq) digests and duplicate commands by their ids.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from typing import Any

import faust
from faust.types import TP
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from streams.kafka.settings import consumer_config, producer_config
from streams.worker import metrics
from streams.worker.clock import InputClock
from streams.worker.jobmap import HEADERS as JOBMAP_HEADERS
from streams.worker.jobmap import JobCohortMap, read_map_partitions
from streams.worker.published import read_published_commands
from streams.worker.positions import InputPartitions, Verdict
from streams.referee.input import fold_batch
from streams.referee.referee import Referee
from streams.worker.router import RawRecord, Routed, Router
from streams.worker.settings import WorkerSettings
from streams.codec import Codec, DecodeError
from streams.referee.records import Emission

log = logging.getLogger("traintrace.worker")


def record_ms(message) -> int:
    """A Faust message's timestamp (float seconds) as the integer milliseconds Kafka holds."""
    ts = message.timestamp
    return int(round(ts * 1000)) if ts is not None and ts > 0 else now_ms()


def now_ms() -> int:
    return int(time.time() * 1000)


class Outbox:
    """Encodes emissions and produces them with one idempotent producer; ``flush`` waits for
    every delivery and raises if any failed (the batch is then not acknowledged).

    Every record goes out with the Kafka headers naming its type and schema
    (``streams.codec.headers``, computed once per record name); a dead letter with its error
    kind and the original record's headers besides."""

    def __init__(self, settings: WorkerSettings, codec: Codec) -> None:
        self.topics = settings.topics
        self.codec = codec
        self.headers = codec.headers
        self.producer = Producer(producer_config(settings.bootstrap, **{"linger.ms": 2}))
        self.errors: list[str] = []

    def _cb(self, err, _msg) -> None:
        if err is not None:
            self.errors.append(str(err))

    def send(self, topic: str, key: bytes | None, value: bytes, headers: list | None = None) -> None:
        """Produce one record; ``headers`` None: those of the record ``value`` encodes (an
        ``EventBatch``, ...), found by its frame header."""
        if headers is None:
            headers = self.headers.for_value(value)
        while True:
            try:
                self.producer.produce(topic, key=key, value=value, headers=headers, on_delivery=self._cb)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)

    def emit(self, em: Emission) -> None:
        topic = getattr(self.topics, em.topic)
        self.send(topic, em.key.encode(), self.codec.encode_record(em.record, em.value),
                  self.headers.record(em.record))
        metrics.EMITTED.labels(em.record).inc()

    def dead_letter(self, record: dict[str, Any], original_headers: Any = None) -> None:
        """Produce a ``DeadLetter``; the original record's headers are ``original_headers`` or
        those a ``DeadLetterRecord`` of the router carries."""
        if original_headers is None:
            original_headers = getattr(record, "original_headers", None)
        self.send(self.topics.dlq, record.get("original_key"), self.codec.encode_record("DeadLetter", record),
                  self.headers.dead_letter(record["error_kind"], original_headers))
        metrics.DLQ.labels(record["error_kind"]).inc()

    async def flush(self) -> None:
        loop = asyncio.get_running_loop()
        remaining = await loop.run_in_executor(None, self.producer.flush, 30.0)
        if remaining or self.errors:
            errors, self.errors = self.errors, []
            raise RuntimeError(f"delivery failed ({remaining} undelivered): {errors[:3]}")


class CheckpointView:
    """Every checkpoint's last status, from the compacted ``lineage.checkpoints`` (all
    partitions), kept up to date by a background thread: what ``/checkpoints/{id}`` answers.

    Every worker keeps an entry for every checkpoint of every cohort, so an entry is a tuple
    ``(status, job_id, incarnation, step, content_hash, incident_ids)`` with the strings that
    repeat interned and a lower-case hex content hash as its 32 bytes, not the decoded record
    (a dict of ten fields: ~0.85 KB a checkpoint, ~0.2 KB so)."""

    def __init__(self, settings: WorkerSettings, codec: Codec) -> None:
        self.settings = settings
        self.codec = codec
        self.status: dict[str, tuple[str, str, int, int, bytes | str, tuple[str, ...]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-view", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def put(self, rec: dict[str, Any]) -> None:
        """Keep a decoded ``CheckpointStatus`` record (the last one of a checkpoint wins)."""
        ids = rec["incident_ids"]
        content: bytes | str = rec["content_hash"]
        try:
            raw = bytes.fromhex(content)
            if raw.hex() == content:  # kept as given otherwise: get() must return it unchanged
                content = raw
        except ValueError:
            pass
        self.status[rec["checkpoint_id"]] = (
            sys.intern(rec["status"]), sys.intern(rec["job_id"]), rec["incarnation"], rec["step"],
            content, tuple(map(sys.intern, ids)) if ids else ())

    def get(self, checkpoint_id: str) -> dict[str, Any] | None:
        """The checkpoint's last status (the fields ``/checkpoints/{id}`` shows), or None."""
        entry = self.status.get(checkpoint_id)
        if entry is None:
            return None
        status, job_id, incarnation, step, content, ids = entry
        return {"checkpoint_id": checkpoint_id, "status": status, "job_id": job_id,
                "incarnation": incarnation, "step": step,
                "content_hash": content.hex() if isinstance(content, bytes) else content,
                "incident_ids": list(ids)}

    def _run(self) -> None:
        topic = self.settings.topics.checkpoints
        consumer = Consumer(consumer_config(self.settings.bootstrap, f"{self.settings.app_id}-ckview",
                                            **{"enable.partition.eof": False}))
        try:
            md = consumer.list_topics(topic, timeout=30)
            parts = md.topics[topic].partitions if topic in md.topics else {}
            consumer.assign([TopicPartition(topic, p, 0) for p in parts])
            while not self._stop.is_set():
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                try:
                    _name, rec = self.codec.decode_record(msg.value())
                except DecodeError:
                    continue
                self.put(rec)
        except Exception:  # pragma: no cover - logged, the view is best effort
            log.exception("checkpoint view stopped")
        finally:
            consumer.close()


def _signer(settings: WorkerSettings):
    """The commitment signer of ``settings.signing_key`` (None: commitments go out unsigned)."""
    if settings.signing_key is None:
        return None
    from streams.signing import CommitmentSigner

    signer = CommitmentSigner.from_file(settings.signing_key)
    log.info("signing LineageCommitments with key %s (%s)", signer.key_id, settings.signing_key)
    return signer


def _replay_partition(settings: WorkerSettings, codec: Codec, referee: Referee, partition: int,
                      start: int, end: int) -> int:
    """Fold ``lineage.by-cohort`` partition ``partition`` offsets [start, end) into the
    referee without publishing. Returns the number of events folded."""
    if end <= start:
        return 0
    topic = settings.topics.by_cohort
    consumer = Consumer(consumer_config(settings.bootstrap, f"{settings.app_id}-replay",
                                        **{"enable.partition.eof": True}))
    n = 0
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        position = start
        idle_since = time.monotonic()
        while position < end:
            # consume() waits for the whole count or the timeout: keep the timeout short
            msgs = consumer.consume(500, timeout=0.1)
            if not msgs:
                if time.monotonic() - idle_since > 30:
                    raise RuntimeError(f"replay of {topic}[{partition}] stalled at offset {position} < {end}")
                continue
            idle_since = time.monotonic()
            for msg in msgs:
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        if position < end:
                            raise RuntimeError(f"{topic}[{partition}] ends at {position}, expected {end}")
                        continue
                    raise RuntimeError(str(msg.error()))
                if msg.offset() >= end:
                    position = end
                    break
                position = msg.offset() + 1
                n += fold_batch(codec, referee, msg.value(), partition, msg.offset(), msg.timestamp()[1],
                                       publish=False,
                                       on_reject=None)[0]
    finally:
        consumer.close()
    return n


def _die(agent: str, exc: BaseException) -> None:
    """Crash-only: an unexpected error in an agent stops the process at once, before Faust
    acknowledges the batch, so the batch is processed again after a restart (at-least-once).
    Bad input never gets here: it goes to the dead-letter topic."""
    log.critical("agent %s failed; exiting so the batch is redelivered: %r", agent, exc, exc_info=exc)
    logging.shutdown()
    os._exit(70)


def group_starts(settings: WorkerSettings, topic: str, partitions: list[int]) -> dict[int, int]:
    """Where the group resumes each partition: its committed offset, or where the partition
    begins when it has none."""
    consumer = Consumer(consumer_config(settings.bootstrap, settings.app_id))
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
        out = {}
        for tp in got:
            if tp.offset >= 0:
                out[tp.partition] = tp.offset
            else:
                low, _high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=30)
                out[tp.partition] = max(low, 0)
        return out
    finally:
        consumer.close()


def read_range(settings: WorkerSettings, topic: str, partition: int, start: int, end: int) -> list[RawRecord]:
    """The records of ``topic[partition]`` at offsets [start, end), read directly: records a
    worker owns but Faust did not deliver (its fetcher resumed past them after a rebalance and
    dropped the re-fetched ones) are processed from here, in order. Timestamps in ms."""
    out: list[RawRecord] = []
    if end <= start:
        return out
    consumer = Consumer(consumer_config(settings.bootstrap, f"{settings.app_id}-direct",
                                        **{"enable.partition.eof": True}))
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return out
                    continue
                if msg.offset() >= end:
                    return out
                out.append(RawRecord(topic, partition, msg.offset(), msg.key(), msg.value(), msg.timestamp()[1],
                                     msg.headers()))
                if msg.offset() + 1 >= end:
                    return out
        raise RuntimeError(f"reading {topic}[{partition}] {start}..{end} stalled")
    finally:
        consumer.close()


def faust_record(e) -> RawRecord:
    """A Faust event's message as a :class:`RawRecord` (timestamp in ms)."""
    m = e.message
    return RawRecord(m.topic, m.partition, m.offset, m.key, m.value, record_ms(m), m.headers)


def create_app(settings: WorkerSettings) -> faust.App:
    codec = Codec()
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.bootstrap}",
        store=settings.store,
        datadir=str(settings.data_dir),
        web_enabled=settings.web_enabled,
        web_host=settings.web_host,
        web_bind=settings.web_host,
        web_port=settings.web_port,
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=settings.partitions,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=settings.commit_interval_s,
        stream_wait_empty=False,
        producer_acks=-1,
        # a dead worker's partitions move to the others within seconds
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=max(0.5, settings.session_timeout_s / 10),
        broker_rebalance_timeout=max(20.0, settings.session_timeout_s * 2),
        # traintrace-<host>-<web port>, also the client.id of this process's confluent-kafka clients
        broker_client_id=settings.use_client_id(),
    )
    topics = settings.topics
    # acks=False: Faust commits nothing for the two inputs; the worker commits what it has
    # processed and flushed itself (streams.worker.positions explains why)
    events_topic = app.topic(topics.events, key_serializer="raw", value_serializer="raw",
                             partitions=settings.partitions, acks=False)
    by_cohort_topic = app.topic(topics.by_cohort, key_serializer="raw", value_serializer="raw",
                                partitions=settings.partitions, acks=False)
    # job_id -> cohort_id, kept in lineage.job-cohorts (streams.worker.jobmap)
    jobmap = JobCohortMap()

    outbox = Outbox(settings, codec)
    router = Router(codec, jobmap)
    referee = Referee(settings.core, settings.ack_timeout_ms, signer=_signer(settings))
    ckview = CheckpointView(settings, codec)
    clock = InputClock(settings.bootstrap, topics.events, settings.app_id)
    lock = asyncio.Lock()  # the fold (decide agent, timers)
    route_lock = asyncio.Lock()  # the router
    route = InputPartitions(topics.events)
    fold = InputPartitions(topics.by_cohort)
    suspended: dict[int, int] = {}  # by-cohort partition revoked -> position its kept state is at
    position = fold.position  # by-cohort partition -> next offset folded into the referee
    route_position = route.position  # events partition -> next offset routed

    app.traintrace = {  # for the web views and tests
        "settings": settings, "referee": referee, "router": router, "checkpoints": ckview,
        "position": position, "route_position": route_position,
    }

    async def catch_up(partition: int, end: int) -> None:
        """Take over a by-cohort partition: learn every command id already published (a
        previous owner may have published for offsets it never committed), then replay the
        partition up to ``end`` without publishing."""
        loop = asyncio.get_running_loop()
        if partition not in position:  # a takeover: learn what a previous owner published
            published, _last = await loop.run_in_executor(None, read_published_commands, settings, codec)
            referee.published |= published
        start = position.get(partition, 0)
        if end <= start:
            position.setdefault(partition, start)
            return
        t = time.perf_counter()
        n = await loop.run_in_executor(None, _replay_partition, settings, codec, referee, partition, start, end)
        position[partition] = end
        metrics.REPLAYED.inc(n)
        # publish what the rebuilt state holds and lineage.control lacks (a previous owner may
        # have committed offsets whose commands never got out)
        published, last_plan = await loop.run_in_executor(None, read_published_commands, settings, codec)
        referee.published |= published
        missing = referee.reconcile(partition, last_plan, now_ms())
        for em in missing:
            outbox.emit(em)
        if missing:
            await outbox.flush()
        log.info("rebuilt %s[%d] from offsets %d..%d: %d events in %.2fs; %d record(s) reconciled",
                 topics.by_cohort, partition, start, end, n, time.perf_counter() - t, len(missing))

    async def commit(partitions: set[TP] | None = None) -> None:
        """Commit the positions of owned partitions (all, or those of ``partitions``) that
        moved. Call with both locks held: positions only move once outputs are flushed."""
        offsets: dict[TP, int] = {}
        for inp in (route, fold):
            parts = None if partitions is None else {tp.partition for tp in partitions if tp.topic == inp.topic}
            for p, o in inp.to_commit(parts).items():
                offsets[TP(inp.topic, p)] = o
        if not offsets:
            return
        if await app.consumer._commit(offsets):
            for inp in (route, fold):
                inp.committed_at({tp.partition: o for tp, o in offsets.items() if tp.topic == inp.topic})
            metrics.COMMITS.inc()

    @app.on_partitions_revoked.connect
    async def on_revoked(app_, revoked, **kwargs) -> None:
        # wait for the batches in flight, commit exactly what they processed while the
        # partitions are still ours, and stop processing them: the next owner starts there
        async with route_lock, lock:
            await commit(set(revoked))
            for tp in revoked:
                if tp.topic == topics.by_cohort and tp.partition in fold.owned:
                    fold.revoke(tp.partition)
                    suspended[tp.partition] = position[tp.partition]  # kept, in case it comes back
                elif tp.topic == topics.events:
                    route.revoke(tp.partition)

    @app.on_partitions_assigned.connect
    async def on_assigned(app_, assigned, **kwargs) -> None:
        loop = asyncio.get_running_loop()
        ev_parts = sorted(tp.partition for tp in assigned if tp.topic == topics.events)
        mine = sorted(tp.partition for tp in assigned if tp.topic == topics.by_cohort)
        async with route_lock:
            if ev_parts:
                starts = await loop.run_in_executor(None, group_starts, settings, topics.events, ev_parts)
                # the job -> cohort entries of these partitions, whoever routed their JobStarted
                known = await loop.run_in_executor(None, read_map_partitions, settings.bootstrap,
                                                   topics.job_cohorts, ev_parts, f"{settings.app_id}-jobmap")
                for job, cohort in known.items():
                    jobmap.map.setdefault(job, cohort)
                for p in ev_parts:
                    route.assign(p, starts[p])
        starts = await loop.run_in_executor(None, group_starts, settings, topics.by_cohort, mine) if mine else {}
        log.info("assigned %s%s %s%s; by-cohort starts %s", topics.events, ev_parts, topics.by_cohort, mine, starts)
        async with lock:
            for p in sorted(suspended):
                kept = suspended.pop(p)
                if p in starts and starts[p] == kept:
                    fold.assign(p, kept)  # back to this worker untouched: its state is current
                    continue
                referee.drop_partition(p)  # another worker moved it on (or has it): rebuild
                position.pop(p, None)
            for p in mine:
                if p in fold.owned:
                    continue
                await catch_up(p, starts[p])
                fold.assign(p, starts[p])

    async def _stop_processing() -> None:
        """A clean stop: commit what was processed while the partitions are still ours."""
        async with route_lock, lock:
            try:
                await commit()
            finally:
                route.owned.clear()
                fold.owned.clear()
                clock.close()
                watermarks.close()

    app.on_before_shutdown.connect(lambda *a, **kw: _stop_processing())

    @app.timer(interval=settings.commit_interval_s)
    async def commit_positions() -> None:
        async with route_lock, lock:
            await commit()

    @app.agent(events_topic)
    async def route_agent(stream):
        """Stage one: decode and validate each record, route it to its cohort."""
        async for batch in stream.take_events(settings.batch_max, settings.batch_within_s):
            try:
                async with route_lock:
                    await _route_batch(batch)
            except Exception as exc:  # never let a batch whose outputs are not out count as done
                _die("route", exc)

    async def _route_batch(batch) -> None:
        await _route_records([faust_record(e) for e in batch])

    async def _route_records(records: list[RawRecord]) -> None:
        """Route records of ``lineage.events`` in order: each owned partition's next records;
        what Faust skipped before one of them is read from the topic and routed first."""
        loop = asyncio.get_running_loop()
        routed = Routed()
        now = now_ms()
        queue = list(records)
        i = 0
        while i < len(queue):
            rec = queue[i]
            p, o = rec.partition, rec.offset
            verdict = route.classify(p, o)
            if verdict is Verdict.STALE or verdict is Verdict.SEEN:
                metrics.STALE.inc()
                i += 1
                continue
            if verdict is Verdict.GAP:
                missing = await loop.run_in_executor(None, read_range, settings, topics.events, p,
                                                     route.position[p], o)
                metrics.DIRECT_READS.inc()
                log.info("%s[%d]: offsets %d..%d were not delivered: routing them from the topic",
                         topics.events, p, route.position[p], o - 1)
                queue[i:i] = missing  # in order, before this record (a real gap in the log: none)
                if not missing:
                    route.position[p] = o
                continue
            jobmap.partition = p  # a job's map entry goes to its events partition
            router.route_one(rec, routed, now)
            route.advance(p, o)  # (in memory only: committed once the outputs below are out)
            i += 1
        jobmap.partition = None
        for job, cohort, p in jobmap.take_pending():
            outbox.producer.produce(topics.job_cohorts, key=job.encode(), value=cohort.encode(), partition=p,
                                    headers=JOBMAP_HEADERS, on_delivery=outbox._cb)
        for cohort, events in routed.batches.items():
            for i in range(0, len(events), 1000):
                value = codec.encode_record("EventBatch", {"cohort_id": cohort, "events": events[i:i + 1000]})
                outbox.send(topics.by_cohort, cohort.encode(), value)
        for dead in routed.dead:
            outbox.dead_letter(dead)
        await outbox.flush()
        metrics.ROUTED.inc(routed.events)

    @app.agent(by_cohort_topic)
    async def decide(stream):
        """Stage two: fold each cohort's events through the core, publish the decisions."""
        async for batch in stream.take_events(64, settings.batch_within_s):
            try:
                await _decide_batch(batch)
            except Exception as exc:  # never let a batch whose outputs are not out count as done
                _die("decide", exc)

    async def _decide_batch(batch) -> None:
        await _decide_records([faust_record(e) for e in batch])

    async def _decide_records(records: list[RawRecord]) -> None:
        """Fold records of ``lineage.by-cohort`` in order and publish what they decide; what
        Faust skipped before one of them is read from the topic and folded first."""
        loop = asyncio.get_running_loop()
        async with lock:
            out: list[Emission] = []
            queue = list(records)
            i = 0
            while i < len(queue):
                rec = queue[i]
                p, o = rec.partition, rec.offset
                verdict = fold.classify(p, o)
                if verdict is Verdict.STALE or verdict is Verdict.SEEN:
                    # not ours any more (its new owner folds it), or folded already
                    metrics.STALE.inc()
                    i += 1
                    continue
                if verdict is Verdict.GAP:
                    missing = await loop.run_in_executor(None, read_range, settings, topics.by_cohort, p,
                                                         position[p], o)
                    metrics.DIRECT_READS.inc()
                    log.info("%s[%d]: offsets %d..%d were not delivered: folding them from the topic",
                             topics.by_cohort, p, position[p], o - 1)
                    queue[i:i] = missing
                    if not missing:
                        position[p] = o
                    continue
                i += 1

                def reject(routed, reason, kind, _p=p, _o=o, _rec=rec):
                    dead = {
                        "original_topic": topics.events if routed else topics.by_cohort,
                        "original_partition": routed["partition"] if routed else _p,
                        "original_offset": routed["offset"] if routed else _o,
                        "original_key": None,
                        "original_value": routed["value"] if routed else (_rec.value or b""),
                        "reason": reason, "error_kind": kind, "ts": now_ms(),
                    }
                    # the original's headers: the by-cohort record's own, or (an event, whose
                    # headers the EventBatch does not carry) those its type is written with
                    original = _rec.headers
                    if routed:
                        try:
                            original = codec.headers.event(codec.decode_event(routed["value"])["type"])
                        except (DecodeError, KeyError):
                            original = None
                    outbox.dead_letter(dead, original if original is not None else ())

                # the processor's time of these events is their input record's timestamp (the
                # router's clock), as in a replay: what it decides is reproducible from the log
                n, emissions = fold_batch(codec, referee, rec.value, p, o, rec.timestamp or now_ms(),
                                                 True, reject)
                out.extend(emissions)
                fold.advance(p, o)
                metrics.FOLDED.inc(n)
            if any(em.topic == "manifests" for em in out):
                out.extend(referee.commitments(now_ms()))
            for em in out:
                outbox.emit(em)
            await outbox.flush()
            metrics.observe_published(out)  # traintrace_divergence_to_command_seconds
            metrics.observe_referee(referee)

    watermarks = Consumer(consumer_config(settings.bootstrap, f"{settings.app_id}-watermarks"))
    waiting: dict[tuple[str, int], int] = {}  # (topic, partition) -> position seen with records waiting

    @app.timer(interval=2.0)
    async def stalled_partitions() -> None:
        """An owned partition whose position stays put over a whole interval while records wait
        past it that Faust has already read: Faust skipped its tail (nothing later arrives to
        show the gap). Read those records from the topic and process them, in order (at most
        5,000 a pass)."""
        loop = asyncio.get_running_loop()
        for inp, process, guard in ((route, _route_records, route_lock), (fold, _decide_records, None)):
            for p in sorted(inp.owned):
                pos = inp.position.get(p)
                _low, high = await loop.run_in_executor(
                    None, lambda p=p, t=inp.topic: watermarks.get_watermark_offsets(TopicPartition(t, p), timeout=10))
                key = (inp.topic, p)
                # Faust's own read offset: a stall only once Faust has read the partition to its
                # end (it still has a backlog to deliver otherwise: reading it here as well
                # would only duplicate its work)
                faust_read = app.consumer._read_offset.get(TP(inp.topic, p))
                if pos is None or high <= pos or faust_read is None or faust_read + 1 < high:
                    waiting.pop(key, None)
                    continue
                if waiting.get(key) != pos:
                    waiting[key] = pos
                    continue
                records = await loop.run_in_executor(None, read_range, settings, inp.topic, p, pos,
                                                     min(high, pos + 5000))
                log.info("%s[%d]: no progress past %d with %d record(s) waiting: processing them from the topic",
                         inp.topic, p, pos, high - pos)
                metrics.DIRECT_READS.inc()
                try:
                    if guard is not None:
                        async with guard:
                            await process(records)
                    else:
                        await process(records)
                except Exception as exc:  # as in the agents: never count unflushed outputs as done
                    _die("stalled_partitions", exc)

    @app.timer(interval=1.0)
    async def housekeeping() -> None:
        loop = asyncio.get_running_loop()
        async with lock:
            now = now_ms()
            out = referee.tick(now)
            # a grace period that ran out goes through the cohort's input, so that every replay
            # applies it at the same point; it runs on the input watermark (streams.worker.clock),
            # not on the wall clock: a worker away or behind delays halts, it does not cause them
            sent_tick = False
            if referee.due_ticks(now, settings.grace_ms):
                mark = await loop.run_in_executor(None, clock.watermark, now)
                metrics.WATERMARK_LAG.set(max(0, now - mark) / 1000)
                ticked = app.traintrace.setdefault("ticked", {})
                for cohort in referee.due_ticks(mark, settings.grace_ms):
                    if fold_partition_owned(cohort) and mark - ticked.get(cohort, 0) >= 1000:
                        ticked[cohort] = mark
                        outbox.send(topics.by_cohort, cohort.encode(), codec.encode_record("EventBatch", {
                            "cohort_id": cohort, "events": [], "tick_ms": mark, "grace_ms": settings.grace_ms}))
                        sent_tick = True
            last = app.traintrace.get("last_commitment", 0)
            if now - last >= settings.commitment_interval_s * 1000:
                out.extend(referee.commitments(now))
                app.traintrace["last_commitment"] = now
            for em in out:
                outbox.emit(em)
            if out or sent_tick:
                await outbox.flush()
            metrics.observe_referee(referee)

    def fold_partition_owned(cohort: str) -> bool:
        return referee.partition_of.get(cohort) in fold.owned

    @app.timer(interval=2.0)
    async def lag_metrics() -> None:
        try:
            for tp in app.consumer.assignment():
                hw = app.consumer.highwater(tp)
                for inp in (route, fold):
                    if tp.topic == inp.topic and tp.partition in inp.owned:
                        metrics.LAG.labels(tp.topic, str(tp.partition)).set(
                            max(0, (hw or 0) - inp.position.get(tp.partition, 0)))
        except Exception:  # pragma: no cover - metrics only
            pass

    @app.task
    async def start_views() -> None:
        ckview.start()

    from streams.worker import views

    views.register(app, referee, ckview, lock)
    return app
