"""The topics the live pipeline would leave for a log, built in-process (no Kafka, no Faust).

For unit tests of whatever reads a whole log (the audit, proofs, the report): the events of a
log go through the same :class:`~streams.worker.router.Router` and
:class:`~streams.referee.referee.Referee` the worker runs, batched as the router batches them, and
every record the referee emits lands on its logical topic with a position and a timestamp —
``input`` (EventBatch), ``control``, ``manifests``, ``commitments`` (every ``commit_every``
batches, signed when a signer is given), ``dlq``.
"""

from __future__ import annotations

from typing import Any, Callable

from streams.files.archive import LogRecord
from streams.referee.input import fold_batch
from streams.referee.referee import Referee
from streams.worker.router import RawRecord, Router
from streams.codec import Codec
from streams.audit.log import AuditLog, load

T0 = 1_760_000_000_000


def simulate_pipeline(source: str | AuditLog, signer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                      batch: int = 7, commit_every: int = 3, grace_ms: int | None = None,
                      codec: Codec | None = None, horizon_ms: int | None = None,
                      control_signer: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None) -> AuditLog:
    """``source`` (a path :func:`~streams.audit.log.load` reads, or an events-only log)
    with the processor's topics added. Batch ``i`` is stamped ``T0 + 1000 * i``; with
    ``grace_ms``, the referee's clock-driven tick runs after every batch, as the worker's
    housekeeping timer does; with ``horizon_ms`` (SPEC §13) a retention tick follows every batch,
    its watermark the latest event time folded (the RetentionNotices go to ``control``); with
    ``control_signer`` the control records are signed as the worker signs them."""
    codec = codec or Codec()
    log = load(source) if isinstance(source, str) else source
    router = Router(codec, {})
    referee = Referee(signer=signer, control_signer=control_signer)
    counters: dict[str, int] = {}

    def put(topic: str, key: str | None, ts: int, value: bytes) -> None:
        n = counters.get(topic, 0)
        counters[topic] = n + 1
        log.add(LogRecord(topic, 0, n, ts, key, value))

    def publish(emissions, ts: int) -> None:
        for em in emissions:
            if em.topic in ("control", "manifests", "commitments"):
                put(em.topic, em.key, ts, codec.encode_record(em.record, em.value))

    # route in the events' order, cutting a batch when the cohort changes or it is full
    batches: list[tuple[str, list[dict[str, Any]]]] = []
    for rec in list(log.topic("events")):
        routed = router.route([RawRecord("lineage.events", rec.partition, rec.offset,
                                         rec.key.encode() if rec.key is not None else None, rec.value)], 0)
        for dead in routed.dead:
            put("dlq", rec.key, T0, codec.encode_record("DeadLetter", dead))
        for cohort, events in routed.batches.items():
            if batches and batches[-1][0] == cohort and len(batches[-1][1]) < batch:
                batches[-1][1].extend(events)
            else:
                batches.append((cohort, list(events)))
    mark = 0  # the latest event time folded (the retention ticks' watermark)
    for i, (cohort, events) in enumerate(batches):
        ts = T0 + 1000 * i
        offset = counters.get("input", 0)
        put("input", cohort, ts, codec.encode_record("EventBatch", {"cohort_id": cohort, "events": events}))
        def dead_letter(r: dict[str, Any] | None, reason: str, kind: str, ts: int = ts) -> None:
            if r is not None:  # as the worker does: the routed event's position on lineage.events
                put("dlq", None, ts, codec.encode_record("DeadLetter", {
                    "original_topic": "lineage.events", "original_partition": r["partition"],
                    "original_offset": r["offset"], "original_key": None, "original_value": r["value"],
                    "reason": reason, "error_kind": kind, "ts": ts}))

        value = codec.encode_record("EventBatch", {"cohort_id": cohort, "events": events})
        _n, emissions = fold_batch(codec, referee, value, 0, offset, ts, True, dead_letter)
        publish(emissions, ts)
        if grace_ms is not None:  # the worker's timer: a due grace period becomes a tick record
            now = ts + 400
            publish(referee.tick(now), now)
            for due in referee.due_ticks(now, grace_ms):
                offset = counters.get("input", 0)
                put("input", due, now, codec.encode_record("EventBatch", {
                    "cohort_id": due, "events": [], "tick_ms": now, "grace_ms": grace_ms}))
                publish(referee.clock_tick(due, now, grace_ms, partition=0), now)
                referee.note_input(due, 0, offset)
        if horizon_ms is not None:
            mark = max([mark] + [codec.decode_event(r["value"])["ts"] for r in events if r["value"]])
            offset = counters.get("input", 0)
            put("input", cohort, ts + 450, codec.encode_record("EventBatch", {
                "cohort_id": cohort, "events": [], "tick_ms": mark, "grace_ms": grace_ms or 0,
                "settle_horizon_ms": horizon_ms}))
            publish(referee.clock_tick(cohort, mark, grace_ms or 0, partition=0, horizon_ms=horizon_ms), ts + 450)
            referee.note_input(cohort, 0, offset)
        if i % commit_every == commit_every - 1 or i == len(batches) - 1:
            publish(referee.commitments(ts + 500), ts + 500)
    for topic in ("control", "manifests", "commitments", "dlq", "input"):
        log.records.setdefault(topic, [])
    log.sort()
    return log
