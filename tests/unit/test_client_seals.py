"""The job client seals its events (streams.client.sealing, SPEC revision 3), checked with the core.

The clients here talk to no broker (``127.0.0.1:1``): every record the client hands its delivery
— events and seal records, in order, the exact bytes — is captured, decoded with the codec and
folded through :class:`streams.core.decide.Lineage`, whose seal gate holds an unsealed event of
a keyed job until a seal covers it. What is checked is what the processor would do with them.
"""

from __future__ import annotations

import os
import stat
import time

import pytest

from streams.client import ClientError, JobClient
from streams.client import job as job_mod
from streams.client.delivery import Delivery
from streams.client.sealing import JOB_KEY_ENV, JOB_KEY_FILE, SealSchedule
from streams.codec import Codec
from streams.core.chain import chain_hash
from streams.core.decide import Lineage
from streams.core.events import JobStarted, parse_event
from streams.core.seals import check_seal, load_public_key, public_key_hex
from streams.signing import generate_key, save_private_key

NOWHERE = "127.0.0.1:1"
CODEC = Codec()
#: a seal_ms no test reaches: the timer and the time rule never fire, the count rule decides
NEVER = 1e9


class Recording(Delivery):
    """The real delivery, recording every value handed to it, in order."""

    sent: list[bytes] = []

    def send(self, seq, value, headers=None):
        Recording.sent.append(value)
        super().send(seq, value, headers)

    def send_seal(self, seq, value, headers=None):
        Recording.sent.append(value)
        super().send_seal(seq, value, headers)


@pytest.fixture(autouse=True)
def recording(monkeypatch):
    Recording.sent = []
    monkeypatch.setattr(job_mod, "Delivery", Recording)
    monkeypatch.delenv(JOB_KEY_ENV, raising=False)
    return Recording.sent


def client(tmp_path, **kw):
    kw.setdefault("fsync", False)
    kw.setdefault("seal_ms", NEVER)
    return JobClient("A", "c1", "base-model", journal_dir=tmp_path, bootstrap=NOWHERE, follow_control=False, **kw)


def events(values):
    return [parse_event(CODEC.decode_event(v)) for v in values]


def fold_all(lineage, evs):
    results = [lineage.fold(ev) for ev in evs]
    refused = [r for res in results for r in res.refused]
    assert not refused, refused
    return results


def crash(c):
    """SIGKILL as far as the journal can tell: no seal, no flush, no snapshot."""
    c._sealer_stop.set()
    c._delivery.close(timeout=0)
    c._journal.close()


# -- the policy -------------------------------------------------------------------------------------


def test_policy_seals_all_but_progress_and_progress_by_count_or_age():
    p = SealSchedule(every=3, ms=100)
    assert p.wants_seal("JobStarted", 0) and p.wants_seal("CheckpointWritten", 0)
    p.emitted(True, 0)
    assert not p.wants_seal("Progress", 10)
    p.emitted(False, 10)
    assert not p.wants_seal("Progress", 20)
    p.emitted(False, 20)
    assert p.wants_seal("Progress", 30)            # the third of a run: at most `every` per seal
    p.emitted(True, 30)
    assert p.unsealed == 0 and p.oldest is None
    p.emitted(False, 40)
    assert not p.wants_seal("Progress", 139)
    assert p.wants_seal("Progress", 140)           # the oldest unsealed is `ms` old
    assert p.wants_seal("DivergenceReported", 41)  # never waits


def test_policy_idle_seal_is_due_only_with_unsealed_events_after_ms_of_quiet():
    p = SealSchedule(every=32, ms=100)
    assert not p.idle_due(1e6)
    p.emitted(True, 0)
    assert not p.idle_due(1e6)                     # the head is sealed
    p.emitted(False, 10)
    p.emitted(False, 50)
    assert not p.idle_due(149) and p.idle_due(150)  # quiet since the last one
    p.head_sealed()
    assert not p.idle_due(1e6)


@pytest.mark.parametrize("kw", [{"every": 0}, {"ms": 0}])
def test_policy_rejects_nonsense(kw):
    with pytest.raises(ClientError):
        SealSchedule(**kw)


# -- the client's events through the core -----------------------------------------------------------


def test_a_sealed_job_folds_every_event_once_sealed(tmp_path, recording):
    c = client(tmp_path, seal_every=4)
    try:
        started = c.start()
        assert started.public_key == c.public_key and len(c.public_key) == 64
        for i in range(1, 11):
            c.progress(i, 0, 1.0 / i)
        ck = tmp_path / "A-10.bin"
        ck.write_bytes(b"w" * 100)
        c.checkpoint_written("A-10", ck, 10, 0)
        for i in range(11, 14):
            c.progress(i, 0, 0.1)
        evs = events(recording)
        # JobStarted, every 4th Progress and the checkpoint are sealed; the rest are not
        assert [e.signature is not None for e in evs] == (
            [True] + [False, False, False, True] * 2 + [False, False, True] + [False] * 3)
        key = load_public_key(c.public_key)
        for e in evs:
            assert e.hash == chain_hash(e.prev_hash, e)  # the signature is not hashed
            if e.signature is not None:
                assert check_seal(e, key) is None
        lin = Lineage()
        fold_all(lin, evs[:2])
        assert lin.seals.holding == 1                   # the first Progress waits for a seal
        res = fold_all(lin, evs[2:5])
        assert lin.seals.holding == 0 and len(res[-1].released) == 3
        fold_all(lin, evs[5:])
        assert lin.seals.holding == 3                   # the last three Progress, unsealed so far
        assert c.stats()["events_sealed"] == 4 and c.stats()["seal_records"] == 0
        c.flush(timeout=0)                              # seals the head: nothing stays unsealed
        assert c.stats()["seal_records"] == 1
        (record,) = events(recording[len(evs):])
        assert record.seq == evs[-1].seq and record.hash == evs[-1].hash and record.signature
        res = fold_all(lin, [record])
        # the record folds as the head; the two before it are released; the unsealed head is
        # dropped as its duplicate
        assert res[0].accepted and len(res[0].released) == 2 and lin.seals.holding == 0
        assert lin.state.jobs["A"].next_seq == c.next_seq == 15
        # the seal record is the head again: folding it a second time changes nothing
        assert fold_all(lin, [record])[0].duplicate
    finally:
        c.close(timeout=0)


def test_an_idle_job_sends_a_seal_record_that_releases_its_held_events(tmp_path, recording):
    c = client(tmp_path, seal_every=1000, seal_ms=20)
    try:
        c.start()
        c.progress(1, 0, 1.0)
        c.progress(2, 0, 1.0)
        deadline = time.monotonic() + 30
        while c.stats()["seal_records"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert c.stats()["seal_records"] >= 1           # the timer sealed the quiet head
        lin = Lineage()
        fold_all(lin, events(recording))
        assert lin.seals.holding == 0
        assert lin.state.jobs["A"].next_seq == 3
    finally:
        c.close(timeout=0)


def test_a_restart_keeps_the_key_and_seals_the_head_left_unsealed(tmp_path, recording):
    c = client(tmp_path)
    c.start()
    c.progress(1, 0, 1.0)
    c.progress(2, 0, 1.0)
    pub = c.public_key
    crash(c)                                            # dies with two unsealed Progress
    first = len(recording)
    key_file = tmp_path / JOB_KEY_FILE
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    c2 = client(tmp_path)
    try:
        assert c2.public_key == pub and c2.start() is None
        assert c2.stats()["seal_records"] == 1          # the head, sealed at once
        c2.progress(3, 0, 1.0)
        c2.diverged(3, "loss", "nan")
    finally:
        c2.close(timeout=0)
    evs = events(recording)
    resent = evs[first:]
    # the unacknowledged events again (same bytes), then the head sealed, then the new events
    assert [(e.seq, e.signature is not None) for e in resent] == [
        (0, True), (1, False), (2, False), (2, True), (3, False), (4, True)]
    lin = Lineage()
    fold_all(lin, evs[:first])
    assert lin.seals.holding == 2                       # what the first process left unsealed
    fold_all(lin, resent)
    assert lin.seals.holding == 0
    assert lin.state.jobs["A"].next_seq == 5 and lin.state.jobs["A"].public_key == pub


def test_a_restart_after_everything_was_compacted_still_seals_the_head(tmp_path, recording):
    c = client(tmp_path)
    c.start()
    c.progress(1, 0, 1.0)
    crash(c)
    # as if the broker had acknowledged everything and the WAL was compacted: the head stays
    c2 = client(tmp_path)
    c2._journal.compact(c2.seq, ())
    crash(c2)
    c3 = client(tmp_path)
    try:
        assert c3.stats()["seal_records"] == 1
    finally:
        c3.close(timeout=0)
    record = events(recording)[-1]
    assert (record.seq, record.signature is not None) == (1, True)


def test_a_job_that_declared_a_key_cannot_go_on_without_it(tmp_path):
    c = client(tmp_path)
    c.start()
    c.close(timeout=0)
    with pytest.raises(ClientError, match="job_key=False"):
        client(tmp_path, job_key=False)
    with pytest.raises(ClientError, match="not the key the job declared"):
        client(tmp_path, job_key=generate_key())
    (tmp_path / JOB_KEY_FILE).unlink()
    with pytest.raises(ClientError, match="missing"):
        client(tmp_path)


def test_job_key_false_is_an_unsealed_job_and_stays_one(tmp_path, recording):
    c = client(tmp_path, job_key=False)
    try:
        assert c.start().public_key is None and c.public_key is None
        c.diverged(1, "loss", "nan")
        assert c.stats()["sealed"] is False
    finally:
        c.close(timeout=0)
    assert not (tmp_path / JOB_KEY_FILE).exists()
    assert all(e.signature is None for e in events(recording))
    c2 = client(tmp_path)                               # the default does not key a started job
    try:
        assert c2.public_key is None
    finally:
        c2.close(timeout=0)


def test_a_given_key_a_key_file_and_the_environment(tmp_path, monkeypatch, recording):
    key = generate_key()
    c = client(tmp_path / "a", job_key=key)
    try:
        ev = c.start()
        assert isinstance(ev, JobStarted) and ev.public_key == public_key_hex(key)
    finally:
        c.close(timeout=0)
    assert not (tmp_path / "a" / JOB_KEY_FILE).exists()
    path = save_private_key(generate_key(), tmp_path / "job.pem")
    monkeypatch.setenv(JOB_KEY_ENV, str(path))
    c = client(tmp_path / "b")
    try:
        from streams.signing import load_private_key
        assert c.public_key == public_key_hex(load_private_key(path))
    finally:
        c.close(timeout=0)
    with pytest.raises(ClientError, match="job key"):
        client(tmp_path / "c", job_key=tmp_path / "nothing.pem")
