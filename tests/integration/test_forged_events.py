"""Forged events on a real broker: a running worker folds only what a job's key vouches for, and
the audit names the forgery, not the genuine event (issue 13, signed events).

Two keyed jobs of one cohort write sealed events with a plain producer (as the job client would:
key = job id, the event's headers): A writes checkpoints A-1 and A-2, B consumes A-1. Then another
producer (anyone who may write ``lineage.events``) writes a ``DivergenceReported`` for A at A's
next seq, chained correctly onto A's head, (a) unsealed and (b) sealed by a key that is not A's.
Then A's genuine events with those seqs arrive, sealed.

What must hold: both forgeries are on ``lineage.dlq`` as ``FORGED_EVENT`` at their events
positions, the reason naming A and the seq; no command and no incident for A or B (the forgery
would have rolled B back); A's genuine events are folded (the worker's ``/jobs``) and not
dead-lettered; ``export`` + ``audit`` of the topics PASSes and its ``chains`` check names each
forgery at its offset as dead-lettered, and nothing at the genuine event's. Then the real thing:
A's own sealed divergence rolls B back.

Cost: one worker, two jobs, about 15 s on the 2-core machine (the worker's start, three round
trips through it, the wait for quiescence, the export and the audit).
"""

from __future__ import annotations

import uuid

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.audit.run import audit
from streams.audit.export import export
from streams.audit.log import load_archive
from streams.codec import Codec
from streams.core.events import event_to_dict
from streams.core.seals import FORGED
from streams.kafka.reader import read_to_end
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.testing.sealed import SealedJob
from streams.devtools.worker_process import WorkerProcess, wait_quiescent
from tests.integration.waits import until

CODEC = Codec()


class Writer(SealedJob):
    """A job of this test: its Progress sealed unless told otherwise, its divergence a NaN."""

    def progress(self, step: int, sealed: bool = True):
        return super().progress(step, sealed=sealed)

    def diverged(self, onset: int, sealed: bool = True, key=None, advance: bool = True):
        return super().diverged(onset, sealed, key, advance, reason="nan")


def produce(bootstrap: str, topics: TopicNames, events) -> list[tuple[int, int]]:
    """Write ``events`` to lineage.events with a fresh plain producer; their (partition, offset)."""
    p = KafkaSettings(bootstrap).producer()
    at: dict[int, tuple[int, int]] = {}
    for i, ev in enumerate(events):
        def done(err, msg, i=i):
            assert err is None, err
            at[i] = (msg.partition(), msg.offset())
        d = event_to_dict(ev)
        p.produce(topics.events, key=ev.job_id.encode(), value=CODEC.encode_event(d),
                  headers=CODEC.headers.event(d["type"]), on_delivery=done)
    assert p.flush(30) == 0
    return [at[i] for i in range(len(events))]


def records(bootstrap: str, topic: str) -> list[tuple[object, dict]]:
    """(message, decoded record) of every record of ``topic``."""
    return [(m, CODEC.decode_record(m.value)[1]) for m in read_to_end(bootstrap, topic) if m.value]


def commands(bootstrap: str, topics: TopicNames) -> list[dict]:
    return [v for _m, v in records(bootstrap, topics.control) if v.get("job_id") in ("A", "B")]


@pytest.fixture
def pipeline(kafka_bootstrap, tmp_path):
    prefix = f"fe{uuid.uuid4().hex[:8]}."
    topics = TopicNames.from_env(prefix)
    ensure_topics(kafka_bootstrap, standard_topics(topics, 2))
    app_id = f"tt-{prefix.rstrip('.')}"
    w = WorkerProcess(kafka_bootstrap, prefix, app_id, tmp_path / "worker", 2,
                      extra_args=["--commit-interval", "0.2", "--grace-seconds", "3", "--loglevel", "warn"]).start()
    try:
        w.wait_ready()
        yield topics, app_id, w
    finally:
        w.kill()


def job_state(w: WorkerProcess, job_id: str) -> dict | None:
    return next((j for j in w.get("/jobs")["jobs"] if j["job_id"] == job_id), None)


def folded_to(w: WorkerProcess, job_id: str, seq: int) -> bool:
    j = job_state(w, job_id)
    return j is not None and j["last_seq"] >= seq


def test_forged_events_are_dead_lettered_trigger_nothing_and_the_audit_names_them(
        pipeline, kafka_bootstrap, tmp_path):
    topics, app_id, w = pipeline
    a, b = Writer("A"), Writer("B")
    produce(kafka_bootstrap, topics, [a.start(), b.start(), a.progress(1), a.checkpoint(1), b.consumed("A-1"),
                                      a.progress(2), a.checkpoint(2), b.progress(1)])
    until(lambda: folded_to(w, "A", 4) and folded_to(w, "B", 2), what="both jobs' sealed events folded")

    # another producer: A's next seq, chained onto A's head, unsealed / sealed by a stranger's key
    unsealed = a.diverged(0, sealed=False, advance=False)
    wrong_key = a.diverged(0, key=Ed25519PrivateKey.generate(), advance=False)
    forged_at = produce(kafka_bootstrap, topics, [unsealed, wrong_key])
    genuine = [a.progress(3), a.progress(4, sealed=False), a.checkpoint(4)]
    genuine_at = produce(kafka_bootstrap, topics, genuine)
    until(lambda: folded_to(w, "A", genuine[-1].seq), what="A's genuine events folded")

    def dead() -> dict[tuple[int, int], dict]:
        return {(v["original_partition"], v["original_offset"]): v for _m, v in records(kafka_bootstrap, topics.dlq)}

    letters = until(lambda: (d := dead()) and all(p in d for p in forged_at) and d, what="both forgeries dead-lettered")
    for pos, ev in zip(forged_at, (unsealed, wrong_key)):
        v = letters[pos]
        assert v["error_kind"] == FORGED and "'A'" in v["reason"] and f"seq {ev.seq}" in v["reason"], v
    assert "does not verify" in letters[forged_at[1]]["reason"]
    assert not any(p in letters for p in genuine_at)
    assert commands(kafka_bootstrap, topics) == []
    assert w.get("/incidents")["incidents"] == [] and w.get("/plans")["plans"] == []
    assert not any(True for _ in read_to_end(kafka_bootstrap, topics.manifests))
    assert job_state(w, "A")["halted"] is None and job_state(w, "B")["halted"] is None

    # the real thing: A's own sealed divergence taints A-1, so B (which consumed it) rolls back
    produce(kafka_bootstrap, topics, [a.diverged(1)])
    until(lambda: any(c.get("job_id") == "B" and c.get("action") for c in commands(kafka_bootstrap, topics)),
          what="the RollbackCommand of B")

    wait_quiescent(kafka_bootstrap, app_id, topics)
    archive = tmp_path / "log.avro"
    export(kafka_bootstrap, topics, str(archive))
    report = audit(load_archive(str(archive)))
    assert report.passed, [f.line() for c in report.checks for f in c.failures]
    chk = report.check("chains")
    named = {f.where: f for f in chk.warnings}
    for (part, off), why in zip(forged_at, ("the job sealed other content", "seal does not verify")):
        f = named[f"events[{part}]@{off}"]
        assert (f.job_id, f.seq) == ("A", unsealed.seq) and "forged DivergenceReported" in f.what, f.what
        assert why in f.what and "dead-lettered" in f.what, f.what
    assert len(chk.warnings) == 2 and chk.counts["forged, dead-lettered"] == 2
    assert not any(f"events[{p}]@{o}" in f.line() for p, o in genuine_at for c in report.checks
                   for f in c.failures + c.warnings)
    assert {p["job_id"] for p in report.final_state["plans"]} >= {"B"}
