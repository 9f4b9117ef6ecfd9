"""What the fold stage gives its outbox for one call of ``Stage.process``: every emission of the
batch in the order the one-at-a-time oracle of ``test_fold_batch.py`` publishes them, then the
dirty cohorts' commitments (when the batch has a manifest), then one cut (what the call sent is
one ticket, waited for by the next call or a settle); the dead letters of what could not be
folded; the position moved past every record. (Issue 27 tried producing each
record's emissions as soon as it was folded, so that the flush waited for the last ones only:
the wait went, but the rate did not move, and an all-stage worker lost 5–10 % to librdkafka's many
small requests: docs/benchmarks.md, eighteenth round.)"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from streams.referee.referee import Referee
from streams.testing.cohort import generate_cohorts
from streams.worker.outbox import Ticket
from streams.worker.stages import FoldStage, RawRecord

from tests.unit.test_fold_batch import CODEC, T0, batched, damaged_log


class RecordingOutbox:
    """What the stage asked of the outbox, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def emit(self, em) -> None:
        self.calls.append(("emit", em))

    def dead_letter(self, record, original_headers=None) -> None:
        self.calls.append(("dead", record["error_kind"]))

    def cut(self) -> Ticket:
        self.calls.append(("cut",))
        self.ticket = Ticket()
        return self.ticket

    async def wait(self, ticket) -> None:
        self.calls.append(("wait", ticket))


def stage() -> tuple[FoldStage, RecordingOutbox]:
    outbox = RecordingOutbox()
    settings = SimpleNamespace(topics=SimpleNamespace(by_cohort="lineage.by-cohort", events="lineage.events"))
    fold = FoldStage(settings, CODEC, Referee(), outbox, asyncio.Lock())  # type: ignore[arg-type]
    fold.input.assign(0, 0)
    return fold, outbox


def diverging_log() -> list[bytes]:
    """EventBatch records of one cohort's events with divergences (their manifests make the call
    publish commitments), one undecodable event among them (a dead letter)."""
    dicts = list(generate_cohorts(jobs=12, cohort_size=6, steps=300, seed=3, prefix="d", t0=T0,
                                  divergence_rate=0.5))
    values = [CODEC.encode_event(d) for d in dicts]
    values.insert(50, b"\x00\x01not an event")
    out = []
    for start in range(0, len(values), 64):
        events = [{"partition": 0, "offset": start + i, "value": v} for i, v in enumerate(values[start:start + 64])]
        out.append(CODEC.encode_record("EventBatch", {"cohort_id": "c-d", "events": events}))
    return out


def records(values: list[bytes]) -> list[RawRecord]:
    return [RawRecord("lineage.by-cohort", 0, k, b"c", v, T0 + k, lambda: []) for k, v in enumerate(values)]


@pytest.mark.parametrize("log", [damaged_log, diverging_log])
def test_one_cut_after_the_same_records_in_the_same_order(log):
    values = log()
    fold, outbox = stage()
    asyncio.run(fold.process(records(values)))
    published, rejects = batched(values)  # every emission at the end, in order (the oracle)
    emits = [c[1] for c in outbox.calls if c[0] == "emit"]
    commitments = [em for em in emits if em.record == "LineageCommitment"]
    if any(em.topic == "manifests" for em in published):
        assert commitments  # a batch with a manifest publishes the dirty cohorts' commitments
    assert emits[:len(published)] == published
    assert emits[len(published):] == commitments  # after every emission of the batch
    assert outbox.calls[-1] == ("cut",) and outbox.calls.count(("cut",)) == 1
    assert fold.pending is not None and ("wait", outbox.ticket) not in outbox.calls  # waited for later
    asyncio.run(fold.settle())
    assert outbox.calls[-1] == ("wait", outbox.ticket) and fold.pending is None
    assert sum(1 for c in outbox.calls if c[0] == "dead") == len(rejects)
    assert fold.input.position[0] == len(values)  # (moved in memory; committed once flushed)
