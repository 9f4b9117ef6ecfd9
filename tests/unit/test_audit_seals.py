"""The ``chains`` check on sealed jobs: the job's key, not the arrival order, tells a forgery
from the job's own record (issue 13, signed events).

Two kinds of log: events only (nothing to hold the processor to: a forgery is a warning), and
events with the processor's topics, built here by the worker's own path (the router, then
:func:`streams.referee.input.fold_batch` with its refusals dead-lettered as the worker does).
"""

from __future__ import annotations

from dataclasses import replace

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.audit.run import audit
from streams.audit.log import AuditLog
from streams.codec import Codec
from streams.core.chain import chain_hash
from streams.core.events import event_to_dict
from streams.core.seals import seal
from streams.files.archive import LogRecord
from streams.referee.input import fold_batch
from streams.referee.referee import Referee
from streams.worker.router import RawRecord, Router

from .test_seals import Job

CODEC = Codec()
T0 = 1_760_000_000_000


def consumer(job: Job, checkpoint_id: str):
    """``job`` consumes ``checkpoint_id`` (a sealed CheckpointConsumed)."""
    return job.event("CheckpointConsumed", {"source_checkpoint_id": checkpoint_id, "step": 0, "mode": "INIT"},
                     sealed=True)


def events_log(events) -> AuditLog:
    log = AuditLog(source="test")
    for i, ev in enumerate(events):
        log.add(LogRecord("events", 0, i, T0 + i, ev.job_id, CODEC.encode_event(event_to_dict(ev))))
    return log


def pipeline_log(events, drop_dead: set[int] = frozenset()) -> AuditLog:
    """``events`` on the events topic and what the worker leaves for them: one input batch per
    event, the referee's records, every refusal dead-lettered (but the events positions in
    ``drop_dead``: a processor that failed to)."""
    log = events_log(events)
    router, referee = Router(CODEC, {}), Referee()
    n: dict[str, int] = {}

    def put(topic: str, key, ts: int, value: bytes) -> None:
        log.add(LogRecord(topic, 0, n.setdefault(topic, 0), ts, key, value))
        n[topic] += 1

    def reject(routed, reason: str, kind: str) -> None:
        if routed is not None and routed["offset"] not in drop_dead:
            put("dlq", None, ts, CODEC.encode_record("DeadLetter", {
                "original_topic": "lineage.events", "original_partition": routed["partition"],
                "original_offset": routed["offset"], "original_key": None, "original_value": routed["value"],
                "reason": reason, "error_kind": kind, "ts": ts}))

    for rec in list(log.topic("events")):
        ts = T0 + 1000 * rec.offset
        routed = router.route([RawRecord("lineage.events", 0, rec.offset, rec.key.encode(), rec.value)], 0)
        for cohort, batch in routed.batches.items():
            offset = n.get("input", 0)
            value = CODEC.encode_record("EventBatch", {"cohort_id": cohort, "events": batch})
            put("input", cohort, ts, value)
            _n, emissions = fold_batch(CODEC, referee, value, 0, offset, ts, True, reject)
            emissions += referee.commitments(ts + 500)
            for em in emissions:
                if em.topic in ("control", "manifests", "commitments"):
                    put(em.topic, em.key, ts, CODEC.encode_record(em.record, em.value))
    for topic in ("control", "manifests", "commitments", "dlq", "input"):
        log.records.setdefault(topic, [])
    return log


def scenario():
    """A (keyed) writes two checkpoints; B (keyed) consumes A's first; A then progresses."""
    a, b = Job("A"), Job("B")
    head = [a.start(), b.start(), a.progress(1), a.checkpoint(1), b.progress(1)]
    head.append(consumer(b, "A-1"))
    head += [a.progress(2), a.checkpoint(2)]
    return a, b, head


def chains(report):
    return report.check("chains")


def lines(findings):
    return [f.line() for f in findings]


def forged_divergence(a: Job, key=None):
    """Another producer's DivergenceReported for A at A's next seq: correct chain, its seal
    missing (``key`` None) or made with ``key``."""
    return a.diverged(0, sealed=key is not None, key=key, advance=False)


def test_a_forgery_before_the_genuine_event_is_named_and_the_genuine_is_not():
    a, _b, evs = scenario()
    forged = forged_divergence(a)
    genuine = a.progress(3, sealed=True)
    for log in (events_log(evs + [forged, genuine]), pipeline_log(evs + [forged, genuine])):
        report = audit(log)
        chk = chains(report)
        assert report.passed, lines(chk.failures)
        (w,) = chk.warnings
        assert (w.job_id, w.seq, w.where) == ("A", forged.seq, f"events[0]@{len(evs)}")
        assert "forged DivergenceReported" in w.what and "the job sealed other content at seq 5" in w.what
        assert not report.final_state["plans"]  # the forgery rolled nobody back
    assert chk.counts["forged, dead-lettered"] == 1 and "dead-lettered" in w.what


def test_a_forgery_after_the_genuine_event_is_named_and_the_genuine_is_not():
    a, _b, evs = scenario()
    forged = forged_divergence(a)
    genuine = a.progress(3, sealed=True)
    report = audit(pipeline_log(evs + [genuine, forged]))
    chk = chains(report)
    assert report.passed, lines(chk.failures)
    (w,) = chk.warnings
    assert (w.seq, w.where) == (forged.seq, f"events[0]@{len(evs) + 1}")
    assert "the job sealed other content at seq" in w.what and chk.counts["forged, dead-lettered"] == 1


def test_a_forgery_sealed_by_another_key_is_named():
    a, _b, evs = scenario()
    forged = forged_divergence(a, key=Ed25519PrivateKey.generate())
    genuine = a.progress(3, sealed=True)
    report = audit(pipeline_log(evs + [forged, genuine]))
    chk = chains(report)
    assert report.passed, lines(chk.failures)
    (w,) = chk.warnings
    assert w.where == f"events[0]@{len(evs)}" and "seal does not verify" in w.what
    assert not report.final_state["plans"]


def test_a_forgery_the_processor_did_not_dead_letter_fails():
    a, _b, evs = scenario()
    forged = forged_divergence(a)
    report = audit(pipeline_log(evs + [forged, a.progress(3, sealed=True), a.progress(4, sealed=True)],
                                drop_dead={len(evs)}))
    (f,) = chains(report).failures
    assert (f.job_id, f.seq, f.where) == ("A", forged.seq, f"events[0]@{len(evs)}")
    assert "not in the dead-letter topic" in f.what and "FORGED_EVENT" in f.what


def test_the_genuine_event_dead_lettered_as_forged_fails():
    """The issue's old outcome, built by hand: the genuine event in the DLQ as forged."""
    a, _b, evs = scenario()
    genuine = a.progress(3, sealed=True)
    log = pipeline_log(evs + [genuine])
    log.add(LogRecord("dlq", 0, 99, T0, None, CODEC.encode_record("DeadLetter", {
        "original_topic": "lineage.events", "original_partition": 0, "original_offset": len(evs),
        "original_key": None, "original_value": b"", "reason": "forged", "error_kind": "FORGED_EVENT", "ts": T0})))
    fails = chains(audit(log)).failures
    assert [(f.job_id, f.seq, f.where) for f in fails] == [("A", genuine.seq, f"events[0]@{len(evs)}")]
    assert "genuine event was dead-lettered as forged" in fails[0].what


def test_an_unsealed_tail_is_counted_not_failed_and_a_detached_one_is_named():
    a, _b, evs = scenario()
    tail = [a.progress(3), a.progress(4)]  # no seal yet: a later one may cover them
    detached = forged_divergence(a)  # in the tail, but chained from nowhere the job sealed
    detached = replace(detached, seq=tail[0].seq, prev_hash="ab" * 32, hash=None)
    detached = replace(detached, hash=chain_hash(detached.prev_hash, detached))
    for log in (events_log(evs + tail + [detached]), pipeline_log(evs + tail + [detached])):
        report = audit(log)
        chk = chains(report)
        assert report.passed, lines(chk.failures)
        assert chk.counts["unsealed tail (awaiting a seal)"] == 2
        (w,) = chk.warnings
        assert w.where == f"events[0]@{len(evs) + 2}" and "not linked to the job's sealed chain" in w.what
    assert chk.counts["forged, held"] == 1


def test_a_sealed_divergence_is_the_real_thing():
    a, b, evs = scenario()
    real = a.diverged(0)
    report = audit(pipeline_log(evs + [real]))
    chk = chains(report)
    assert report.passed and not chk.warnings and not chk.failed, lines(chk.failures)
    assert {p["job_id"] for p in report.final_state["plans"]} == {"A", "B"}  # B consumed the tainted A-1


def test_a_job_without_a_key_is_checked_as_before():
    """Unkeyed: first seen wins, the later event at that seq is the conflicting duplicate."""
    a = Job("U")
    evs = [a.start(sealed=False, declare=None), a.progress(1)]
    first = a.diverged(0, sealed=False, advance=False)
    second = a.progress(2)
    report = audit(events_log(evs + [first, second]))
    chk = chains(report)
    assert [(f.job_id, f.seq, f.where) for f in chk.failures] == [("U", 2, "events[0]@3")]
    assert "conflicting duplicate" in chk.failures[0].what and not chk.warnings
    assert "forged" not in " ".join(chk.counts)


def test_a_job_started_not_sealed_by_its_key_is_a_forgery_and_the_job_is_judged_by_the_next():
    a = Job("A")
    impostor = Job("A").start(sealed=True, key=Ed25519PrivateKey.generate())  # key declared, not its own seal
    evs = [impostor, a.start(), a.progress(1, sealed=True)]
    report = audit(pipeline_log(evs))
    chk = chains(report)
    assert report.passed, lines(chk.failures)
    (w,) = chk.warnings
    assert (w.seq, w.where) == (0, "events[0]@0") and "forged JobStarted" in w.what


def test_copies_of_the_jobs_own_events_are_not_forgeries():
    """The idle client's seal record (an event sent again, now sealed), a resent unsealed copy,
    and a copy carrying a bad signature: the content is the job's, so nothing is forged."""
    a, _b, evs = scenario()
    p3 = a.progress(3)
    sealed_again = replace(p3, signature=seal(p3.hash, a.key))
    garbage = replace(evs[2], signature="00" * 64)
    report = audit(pipeline_log(evs + [p3, sealed_again, evs[6], garbage]))
    chk = chains(report)
    assert report.passed and not chk.warnings and not chk.failures, lines(chk.failures + chk.warnings)
    assert "unsealed tail (awaiting a seal)" not in chk.counts
