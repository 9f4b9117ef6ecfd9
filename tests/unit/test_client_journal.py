"""The client's journal (snapshot + write-ahead log) and the chain it keeps across restarts.

The clients here talk to no broker (``127.0.0.1:1`` refuses every connection): every event stays
unacknowledged in the journal, which is what a crash before delivery looks like.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from streams.client import ClientError, JobClient
from streams.client.journal import JOURNAL_FILE, WAL_FILE, Journal, JournalState, WalEntry, atomic_write
from streams.codec import Codec
from streams.core.chain import GENESIS, chain_hash, verify_link
from streams.core.events import parse_event

NOWHERE = "127.0.0.1:1"
CODEC = Codec()


def client(tmp_path, job="A", **kw):
    kw.setdefault("fsync", False)
    return JobClient(job, "c1", "base-model", journal_dir=tmp_path, bootstrap=NOWHERE, follow_control=False, **kw)


def wal_events(directory):
    out = []
    for line in (directory / WAL_FILE).read_bytes().splitlines(keepends=True):
        e = WalEntry.from_line(line)
        assert e is not None
        out.append(parse_event(CODEC.decode_event(e.value)))
    return out


def assert_chain(events):
    prev = None
    for i, ev in enumerate(events):
        assert ev.seq == i
        expected = GENESIS if i == 0 else prev
        assert verify_link(ev, expected) is None, (i, ev)
        assert ev.hash == chain_hash(ev.prev_hash, ev)
        prev = ev.hash


def test_events_carry_seq_incarnation_and_a_verifying_chain(tmp_path):
    c = client(tmp_path)
    try:
        assert c.seq == -1 and c.head_hash is None
        first = c.start(base_checkpoint_id=None, config_hash="cfg")
        assert first.prev_hash == GENESIS and first.seq == 0
        c.progress(1, 0, 2.5, grad_norm=1.0, lr=1e-4)
        c.progress(2, 0, float("nan"))
        c.progress(3, 0, 7)  # an int loss is hashed as the double the processor decodes
        ck = tmp_path / "A-3.bin"
        ck.write_bytes(b"w" * 1000)
        h = c.checkpoint_written("A-3", ck, 3, 0)
        c.consumed("B-1", 3, "MERGE")
        c.diverged(3, "manual", "loss spike")
        c.rolled_back("A-3", 3)
        c.progress(4, 0, 1.0)
        c.finished("SUCCEEDED", "A-3")
        assert c.seq == 9 and c.next_seq == 10 and c.incarnation == 1
        assert c.pending() == 10
    finally:
        c.close(timeout=0)
    events = wal_events(tmp_path)
    assert [type(e).__name__ for e in events] == [
        "JobStarted", "Progress", "Progress", "Progress", "CheckpointWritten", "CheckpointConsumed",
        "DivergenceReported", "RolledBack", "Progress", "JobFinished"]
    assert [e.incarnation for e in events] == [0] * 7 + [1] * 3
    assert_chain(events)
    assert math.isnan(events[2].loss) and events[3].loss == 7.0
    assert events[4].content_hash == h and events[4].uri == ck.resolve().as_uri()
    ts = [e.ts for e in events]
    assert ts == sorted(ts)


def test_restart_continues_seq_incarnation_and_chain(tmp_path):
    c = client(tmp_path)
    c.start()
    for s in range(5):
        c.progress(s, 0, 1.0)
    c.rolled_back(None, 0, command_id="cmd-1")
    head, seq = c.head_hash, c.seq
    assert c.close(timeout=0) == 7  # nothing delivered: all kept in the journal

    c2 = client(tmp_path)
    try:
        assert (c2.seq, c2.head_hash, c2.incarnation) == (seq, head, 1)
        assert c2.applied_commands == ["cmd-1"]
        assert c2.start() is None            # already started: emits nothing
        assert c2.seq == seq
        assert c2.pending() == 7             # the unacknowledged events are sent again
        ev = c2.progress(6, 0, 0.5)
        assert ev.seq == seq + 1 and ev.prev_hash == head and ev.incarnation == 1
        with pytest.raises(ClientError):
            c2.rolled_back(None, 0, command_id="cmd-1")  # applied at most once
    finally:
        c2.close(timeout=0)
    events = wal_events(tmp_path)
    assert len(events) == 8
    assert_chain(events)


def test_crash_with_a_wal_ahead_of_the_snapshot(tmp_path):
    """The snapshot is rewritten lazily; the WAL is authoritative past it."""
    c = client(tmp_path)
    c.start()
    snap = json.loads((tmp_path / JOURNAL_FILE).read_text())
    c.progress(1, 0, 1.0)
    c.progress(2, 0, 1.0)
    head = c.head_hash
    # simulate SIGKILL: no close(), the snapshot as it was after start
    c._delivery.close(timeout=0)
    c._journal.close()
    atomic_write(tmp_path / JOURNAL_FILE, json.dumps(snap).encode())
    c2 = client(tmp_path)
    try:
        assert c2.seq == 2 and c2.head_hash == head
        c2.progress(3, 0, 1.0)
    finally:
        c2.close(timeout=0)
    assert_chain(wal_events(tmp_path))


def test_torn_last_line_is_cut_off(tmp_path):
    c = client(tmp_path)
    c.start()
    c.progress(1, 0, 1.0)
    c.close(timeout=0)
    with open(tmp_path / WAL_FILE, "ab") as fh:
        fh.write(b"0badc0de {\"seq\": 2, \"trunc")  # died mid-append
    c2 = client(tmp_path)
    try:
        assert c2.seq == 1
        c2.progress(2, 0, 1.0)
    finally:
        c2.close(timeout=0)
    assert_chain(wal_events(tmp_path))


def test_corrupt_line_fails_its_crc():
    e = WalEntry(3, 0, "ab" * 32, 5, "Progress", b"\x01\x02", None)
    line = e.to_line()
    assert WalEntry.from_line(line) == e
    bad = line.replace(b'"seq":3', b'"seq":4')
    assert WalEntry.from_line(bad) is None
    assert WalEntry.from_line(line[:-1]) is None


def test_snapshot_is_written_atomically(tmp_path, monkeypatch):
    j = Journal(tmp_path, "A", "c1", "m", fsync=False)
    j.state.next_seq = 0
    before = (tmp_path / JOURNAL_FILE).read_bytes()
    calls = []
    real_replace = os.replace

    def failing_replace(src, dst):
        calls.append((src, dst))
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", failing_replace)
    j.state.incarnation = 5
    with pytest.raises(OSError):
        j.save()
    monkeypatch.setattr(os, "replace", real_replace)
    assert (tmp_path / JOURNAL_FILE).read_bytes() == before  # the old snapshot is intact
    assert calls and str(calls[0][0]).endswith(".tmp")
    j.close()


def test_compaction_keeps_only_unacknowledged_entries(tmp_path):
    j = Journal(tmp_path, "A", "c1", "m", fsync=False, compact_at=4)
    entries = [WalEntry(i, 0, f"{i:064x}", i, "Progress", bytes([i])) for i in range(6)]
    for e in entries:
        j.append(e)
    assert j.needs_compaction(pending=2)
    j.compact(acked_seq=3, unacked=entries[4:])
    j.close()
    j2 = Journal(tmp_path, "A", "c1", "m", fsync=False)
    try:
        assert j2.state.next_seq == 6 and j2.state.acked_seq == 3
        assert [e.seq for e in j2.unacked] == [4, 5]
    finally:
        j2.close()


def test_a_journal_belongs_to_one_job_and_one_process(tmp_path):
    c = client(tmp_path)
    try:
        with pytest.raises(ClientError, match="in use"):
            client(tmp_path)
    finally:
        c.close(timeout=0)
    with pytest.raises(ClientError, match="belongs to job 'A'"):
        client(tmp_path, job="B")


def test_invalid_arguments_emit_nothing(tmp_path):
    c = client(tmp_path)
    try:
        with pytest.raises(ClientError, match="start"):
            c.progress(1, 0, 1.0)
        c.start()
        with pytest.raises(ClientError, match="mode"):
            c.consumed("B-1", 1, "STEAL")
        with pytest.raises(ClientError, match="step"):
            c.progress("ten", 0, 1.0)
        with pytest.raises(ClientError, match="status"):
            c.finished("MAYBE")
        with pytest.raises(ClientError):
            c.progress(2**70, 0, 1.0)  # does not fit the Avro long
        assert c.seq == 0
    finally:
        c.close(timeout=0)


def test_buffer_full_blocks_then_raises(tmp_path):
    c = client(tmp_path, buffer_max=3, buffer_timeout=0.3)
    try:
        c.start()
        c.progress(1, 0, 1.0)
        c.progress(2, 0, 1.0)
        with pytest.raises(ClientError, match="not acknowledged"):
            c.progress(3, 0, 1.0)
        assert c.seq == 2 and c.pending() == 3
    finally:
        c.close(timeout=0)


def test_state_round_trip():
    st = JournalState("A", "c1", "m", started=True, next_seq=4, incarnation=1, head_hash="ff" * 32,
                      applied_commands=["x"], halt={"command_id": "h", "reason": "LEDGER_GAP"},
                      control_topic="t", control_positions={0: 3, 5: 9})
    assert JournalState.from_json(json.loads(json.dumps(st.to_json()))) == st
