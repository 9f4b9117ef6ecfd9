"""A real JobClient seals its events on a real broker (SPEC revision 3, streams.client.sealing).

What lands on ``lineage.events`` is read back, decoded with the codec and folded through the
core's :class:`~streams.core.decide.Lineage` (the seal gate is in ``Lineage.fold``): every event
of the sealed job folds, none is left held, none is refused — also across a restart of the
client on the same journal directory, which goes on with the same key.
"""

from __future__ import annotations

import uuid

import pytest

from streams.client import JobClient
from streams.client.sealing import JOB_KEY_ENV
from streams.codec import Codec
from streams.core.decide import Lineage
from streams.core.events import parse_event
from streams.kafka.reader import read_to_end
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics

CODEC = Codec()


@pytest.fixture
def topics(kafka_bootstrap, monkeypatch):
    monkeypatch.delenv(JOB_KEY_ENV, raising=False)
    t = TopicNames.from_env(f"seal{uuid.uuid4().hex[:8]}.")
    ensure_topics(kafka_bootstrap, standard_topics(t, 1))
    return t


def client(kafka_bootstrap, topics, jdir, **kw):
    return JobClient("S", "c1", "base-model", journal_dir=jdir, bootstrap=kafka_bootstrap, topics=topics,
                     follow_control=False, fsync=False, **kw)


def fold_topic(kafka_bootstrap, topics):
    """The events on the topic, in order, and the Lineage that folded them."""
    events = [parse_event(CODEC.decode_event(m.value)) for m in read_to_end(kafka_bootstrap, topics.events)]
    lin = Lineage()
    refused = [r for ev in events for r in lin.fold(ev).refused]
    assert refused == []
    return events, lin


def train(c, steps, first=0):
    for i in range(first, first + steps):
        c.progress(i, 0, 1.0 / (i + 1))


def test_a_sealed_job_folds_whole_and_a_restart_goes_on_with_its_key(kafka_bootstrap, topics, tmp_path):
    jdir = tmp_path / "S"
    c = client(kafka_bootstrap, topics, jdir, seal_every=8)
    try:
        c.start()
        pub = c.public_key
        train(c, 20)
        ck = tmp_path / "S-20.bin"
        ck.write_bytes(b"weights" * 100)
        c.checkpoint_written("S-20", ck, 20, 0)
        train(c, 5, 21)                        # left unsealed: close() seals the head
        assert c.close(30) == 0
        stats = c.stats()
    finally:
        c.close(0)
    assert stats["events_sealed"] >= 4 and stats["seal_records"] >= 1
    events, lin = fold_topic(kafka_bootstrap, topics)
    assert lin.seals.holding == 0
    job = lin.state.jobs["S"]
    assert job.public_key == pub and job.next_seq == 27
    assert any(e.signature is None for e in events)          # not every event is signed

    c2 = client(kafka_bootstrap, topics, jdir, seal_every=8)
    try:
        assert c2.public_key == pub and c2.start() is None    # the same key, the same job
        train(c2, 10, 30)
        c2.diverged(39, "loss", "spike")
        train(c2, 3, 40)
        assert c2.flush(30) == 0
        assert c2.stats()["events_sealed"] >= 2
    finally:
        c2.close(30)
    events, lin = fold_topic(kafka_bootstrap, topics)
    assert lin.seals.holding == 0
    assert lin.state.jobs["S"].next_seq == 41
    last = events[-1]
    assert last.seq == 40 and last.signature is not None     # the head, sealed by close()


def test_an_unsealed_job_still_folds(kafka_bootstrap, topics, tmp_path):
    c = client(kafka_bootstrap, topics, tmp_path / "S", job_key=False)
    try:
        c.start()
        train(c, 5)
        assert c.flush(30) == 0
    finally:
        c.close(30)
    events, lin = fold_topic(kafka_bootstrap, topics)
    assert all(e.signature is None for e in events) and lin.state.jobs["S"].next_seq == 6
