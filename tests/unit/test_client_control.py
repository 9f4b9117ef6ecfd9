"""Which control record a job applies (streams.control.obey) and how poll() applies it.

The poll() tests feed the client's queue directly (no broker): the fetcher's only job is to put
the job's decoded records there.
"""

from __future__ import annotations

import json

import pytest

from streams.client import (QUARANTINE_FILE, ClientError, ControlCommand, JobClient, JobView, Restored,
                            command_from_record, decide)
from streams.client.control import Fetched
from streams.codec import Codec

NOWHERE = "127.0.0.1:1"
CODEC = Codec()


def rollback(cid, inc=0, target="A-480", step=480, supersedes=None, action="ROLLBACK", job="A"):
    rec = {"command_id": cid, "job_id": job, "cohort_id": "c1", "incarnation": inc, "action": action,
           "target_checkpoint_id": target, "target_step": step, "incident_ids": ["i1"],
           "supersedes": supersedes, "issued_ts": 1, "commitment_root": None}
    # through the codec, as the fetcher sees it
    return command_from_record(*CODEC.decode_record(CODEC.encode_record("RollbackCommand", rec)))


def halt(cid, reason="UNTRACEABLE_SOURCE", job="A"):
    rec = {"command_id": cid, "job_id": job, "cohort_id": None, "reason": reason, "detail": "d",
           "seq": None, "issued_ts": 1}
    return command_from_record(*CODEC.decode_record(CODEC.encode_record("HaltCommand", rec)))


def cleared(cid, supersedes, inc=1):
    rec = {"command_id": cid, "job_id": "A", "cohort_id": None, "incarnation": inc, "supersedes": supersedes,
           "reason": "clean", "issued_ts": 1}
    return command_from_record(*CODEC.decode_record(CODEC.encode_record("PlanCleared", rec)))


def quarantine(cid, inc=0, ids=("A-500", "A-520")):
    rec = {"command_id": cid, "job_id": "A", "cohort_id": None, "incarnation": inc, "incident_ids": ["i1"],
           "quarantined_checkpoint_ids": list(ids), "supersedes": None, "issued_ts": 1,
           "commitment_root": None}
    return command_from_record(*CODEC.decode_record(CODEC.encode_record("QuarantineNotice", rec)))


def outcomes(view, *cmds):
    return [(c.command_id, c.outcome) for c in decide(view, cmds)]


def view(inc=0, applied=(), halted=False, finished=False):
    return JobView(inc, set(applied), halted, finished)


def test_command_from_record_fields():
    c = rollback("r1", target="A-480", step=480)
    assert isinstance(c, ControlCommand)
    assert (c.kind, c.action, c.incarnation, c.target_checkpoint_id, c.target_step, c.incident_ids) == (
        "RollbackCommand", "ROLLBACK", 0, "A-480", 480, ("i1",))
    assert halt("h").action == "UNTRACEABLE_SOURCE" and halt("r", "RELEASE").is_release
    assert quarantine("q").quarantined_checkpoint_ids == ("A-500", "A-520")
    assert command_from_record("Alert", {"command_id": "x"}) is None


def test_the_effective_command_wins_and_the_superseded_one_is_not_applied():
    assert outcomes(view(), rollback("r1"), rollback("r2", target="A-400", step=400, supersedes="r1")) == [
        ("r1", "superseded"), ("r2", "rollback")]


def test_plan_cleared_supersedes_everything_before():
    assert outcomes(view(), rollback("r1"), cleared("p1", "r1", inc=0)) == [("r1", "superseded"),
                                                                           ("p1", "cleared")]


def test_old_incarnation_is_ignored_and_future_is_not_applied():
    assert outcomes(view(inc=1), rollback("r1", inc=0)) == [("r1", "stale")]
    assert outcomes(view(inc=1), rollback("r2", inc=2)) == [("r2", "future")]
    assert outcomes(view(inc=1), rollback("r3", inc=1)) == [("r3", "rollback")]


def test_applied_once():
    assert outcomes(view(inc=0, applied={"r1"}), rollback("r1")) == [("r1", "duplicate")]
    assert outcomes(view(inc=0, applied={"q1"}), quarantine("q1")) == [("q1", "duplicate")]


def test_restart_actions_and_finished_jobs():
    assert outcomes(view(), rollback("s", action="RESTART_FROM_SCRATCH", target=None, step=None)) == [
        ("s", "rollback")]
    assert outcomes(view(finished=True), rollback("r1")) == [("r1", "finished")]
    assert outcomes(view(finished=True), quarantine("q1")) == [("q1", "quarantine")]


def test_halts_fold_to_the_last_and_act_on_changes_only():
    assert outcomes(view(), halt("h1")) == [("h1", "halt")]
    assert outcomes(view(halted=True), halt("h2")) == [("h2", "no-change")]
    assert outcomes(view(halted=True), halt("r1", "RELEASE")) == [("r1", "release")]
    assert outcomes(view(), halt("r1", "RELEASE")) == [("r1", "no-change")]
    # halted and released within one batch: nothing to do
    assert outcomes(view(), halt("h1"), halt("r1", "RELEASE")) == [("h1", "no-change"), ("r1", "no-change")]
    # a redelivered halt after its release does not halt again
    assert outcomes(view(applied={"h1", "r1"}), halt("h1")) == [("h1", "duplicate")]
    # plans and halts are independent
    assert outcomes(view(), halt("h1"), rollback("r1")) == [("h1", "halt"), ("r1", "rollback")]


# -- poll() on a client without a broker ------------------------------------------------------------


def make_client(tmp_path, **kw):
    return JobClient("A", "c1", "m", journal_dir=tmp_path, bootstrap=NOWHERE, follow_control=False,
                     fsync=False, **kw)


def feed(c, *cmds, positions=None):
    c._queue.put(Fetched(list(cmds), positions or {0: len(cmds)}))


def test_poll_applies_a_rollback_once_and_opens_the_next_incarnation(tmp_path):
    calls = []
    c = make_client(tmp_path, on_rollback=calls.append)
    try:
        c.start()
        c.progress(500, 0, float("nan"))
        feed(c, rollback("r1"), rollback("r2", target="A-400", step=400, supersedes="r1"))
        res = c.poll()
        assert [(x.command_id, x.outcome) for x in res] == [("r1", "superseded"), ("r2", "rollback")]
        assert [x.command_id for x in calls] == ["r2"]
        assert c.incarnation == 1 and c.seq == 2 and c.applied_commands == ["r2"]
        feed(c, rollback("r2", target="A-400", step=400, supersedes="r1"))  # redelivered
        assert [x.outcome for x in c.poll()] == ["duplicate"]
        assert len(calls) == 1 and c.seq == 2
        assert c._journal.state.control_positions == {0: 1}
    finally:
        c.close(timeout=0)
    # the journal remembers, across a restart
    c2 = make_client(tmp_path, on_rollback=calls.append)
    try:
        feed(c2, rollback("r2", target="A-400", step=400, supersedes="r1"))
        assert [x.outcome for x in c2.poll()] == ["duplicate"]
        assert len(calls) == 1
    finally:
        c2.close(timeout=0)


def test_rolled_back_event_fields(tmp_path):
    c = make_client(tmp_path, on_rollback=lambda cmd: None)
    try:
        c.start()
        feed(c, rollback("s1", action="RESTART_FROM_BASE", target=None, step=None))
        c.poll()
        from streams.client.journal import WAL_FILE, WalEntry
        from streams.core.events import parse_event
        last = WalEntry.from_line((tmp_path / WAL_FILE).read_bytes().splitlines(keepends=True)[-1])
        ev = parse_event(CODEC.decode_event(last.value))
        assert (type(ev).__name__, ev.restored_checkpoint_id, ev.resumed_step, ev.command_id, ev.incarnation) == (
            "RolledBack", None, 0, "s1", 1)
    finally:
        c.close(timeout=0)


def _last_event(tmp_path):
    from streams.client.journal import WAL_FILE, WalEntry
    from streams.core.events import parse_event
    last = WalEntry.from_line((tmp_path / WAL_FILE).read_bytes().splitlines(keepends=True)[-1])
    return parse_event(CODEC.decode_event(last.value))


def test_restart_from_scratch_is_acknowledged_from_scratch(tmp_path):
    """SPEC §4 revision 2: obeying RESTART_FROM_SCRATCH emits RolledBack with from_scratch true
    (no checkpoint restored, not even the base); RESTART_FROM_BASE to a null target does not."""
    c = make_client(tmp_path, on_rollback=lambda cmd: None)
    try:
        c.start(base_checkpoint_id="X-300")
        feed(c, rollback("s1", action="RESTART_FROM_SCRATCH", target=None, step=None))
        c.poll()
        ev = _last_event(tmp_path)
        assert (ev.restored_checkpoint_id, ev.resumed_step, ev.command_id, ev.incarnation, ev.from_scratch) == (
            None, 0, "s1", 1, True)
        feed(c, rollback("b1", inc=1, action="RESTART_FROM_BASE", target=None, step=None))
        c.poll()
        ev = _last_event(tmp_path)
        assert (ev.restored_checkpoint_id, ev.command_id, ev.incarnation, ev.from_scratch) == (None, "b1", 2, False)
        from streams.core.chain import verify_link
        assert verify_link(ev, ev.prev_hash) is None
    finally:
        c.close(timeout=0)


def test_the_rollback_callback_may_say_how_it_restored(tmp_path):
    """on_rollback returns a Restored: the RolledBack says that (here: a job that cannot reach the
    base checkpoint restarts from the pretrained model); any other return value is ignored."""
    c = make_client(tmp_path, on_rollback=lambda cmd: Restored(None, 0, from_scratch=True))
    try:
        c.start(base_checkpoint_id="X-300")
        feed(c, rollback("b1", action="RESTART_FROM_BASE", target="X-300", step=300))
        c.poll()
        ev = _last_event(tmp_path)
        assert (ev.restored_checkpoint_id, ev.resumed_step, ev.command_id, ev.from_scratch) == (None, 0, "b1", True)
    finally:
        c.close(timeout=0)
    c = make_client(tmp_path / "other", on_rollback=lambda cmd: "restored!")  # an old callback's value
    try:
        c.start()
        feed(c, rollback("r1"))
        c.poll()
        ev = _last_event(tmp_path / "other")
        assert (ev.restored_checkpoint_id, ev.resumed_step, ev.from_scratch) == ("A-480", 480, False)
    finally:
        c.close(timeout=0)


def test_manual_rolled_back_from_scratch(tmp_path):
    c = make_client(tmp_path)
    try:
        c.start()
        ev = c.rolled_back(None, 0, from_scratch=True)
        assert ev.from_scratch is True and ev.incarnation == 1
        with pytest.raises(ClientError):  # a restart from scratch restores no checkpoint
            c.rolled_back("A-480", 480, from_scratch=True)
        with pytest.raises(ClientError):
            c.rolled_back(None, 0, from_scratch="yes")
        assert c.incarnation == 1 and c.seq == 1  # nothing emitted by the refused calls
    finally:
        c.close(timeout=0)


def test_a_failing_rollback_callback_is_retried_at_the_next_poll(tmp_path):
    attempts = []

    def restore(cmd):
        attempts.append(cmd.command_id)
        if len(attempts) == 1:
            raise RuntimeError("disk busy")

    c = make_client(tmp_path, on_rollback=restore)
    try:
        c.start()
        feed(c, rollback("r1"))
        try:
            c.poll()
        except RuntimeError:
            pass
        assert c.incarnation == 0
        assert [x.outcome for x in c.poll()] == ["rollback"]
        assert attempts == ["r1", "r1"] and c.incarnation == 1
    finally:
        c.close(timeout=0)


def test_without_on_rollback_the_command_is_unhandled(tmp_path):
    c = make_client(tmp_path)
    try:
        c.start()
        feed(c, rollback("r1"))
        [res] = c.poll()
        assert res.outcome == "unhandled" and c.incarnation == 0
        c.rolled_back(res.target_checkpoint_id, res.target_step, res.command_id)
        assert c.incarnation == 1 and c.applied_commands == ["r1"]
    finally:
        c.close(timeout=0)


def test_halt_and_release(tmp_path):
    seen = []
    c = make_client(tmp_path, on_halt=lambda cmd: seen.append(("halt", cmd.reason)),
                    on_release=lambda cmd: seen.append(("release", cmd.command_id)))
    try:
        c.start()
        feed(c, halt("h1"))
        c.poll()
        assert c.halted and c.halt["reason"] == "UNTRACEABLE_SOURCE"
        assert c.wait_while_halted(timeout=0.3) is False
        feed(c, halt("rel", "RELEASE"))
        assert c.wait_while_halted(timeout=5) is True
        assert not c.halted and seen == [("halt", "UNTRACEABLE_SOURCE"), ("release", "rel")]
        feed(c, halt("h1"))  # redelivered
        c.poll()
        assert not c.halted
    finally:
        c.close(timeout=0)


def test_default_quarantine_writes_a_marker(tmp_path):
    c = make_client(tmp_path)
    try:
        c.start()
        c.finished()
        feed(c, quarantine("q1"))
        assert [x.outcome for x in c.poll()] == ["quarantine"]
        marker = json.loads((tmp_path / QUARANTINE_FILE).read_text())
        assert marker["quarantined_checkpoint_ids"] == ["A-500", "A-520"] and marker["command_id"] == "q1"
        feed(c, quarantine("q1"))
        assert [x.outcome for x in c.poll()] == ["duplicate"]
    finally:
        c.close(timeout=0)


def test_a_notice_published_again_with_a_longer_list_is_applied_again(tmp_path):
    """The referee re-sends a finished job's QuarantineNotice under its id when one more of its
    checkpoints is found tainted (streams.referee.referee): the marker then names it too, across
    a restart of the client; a late copy of the shorter version changes nothing."""
    calls = []
    c = make_client(tmp_path)
    try:
        c.start()
        c.finished()
        feed(c, quarantine("q1", ids=["A-500"]))
        assert [x.outcome for x in c.poll()] == ["quarantine"]
        feed(c, quarantine("q1", ids=["A-500", "A-520"]))
        assert [x.outcome for x in c.poll()] == ["quarantine"]
        marker = json.loads((tmp_path / QUARANTINE_FILE).read_text())
        assert marker["quarantined_checkpoint_ids"] == ["A-500", "A-520"]
        assert c.applied_commands == ["q1"]
    finally:
        c.close(timeout=0)
    again = make_client(tmp_path, on_quarantine=calls.append)
    try:
        feed(again, quarantine("q1", ids=["A-500"]), quarantine("q1", ids=["A-500", "A-520"]))
        assert [x.outcome for x in again.poll()] == ["duplicate", "duplicate"]
        feed(again, quarantine("q1", ids=["A-520", "A-540"]))
        assert [x.outcome for x in again.poll()] == ["quarantine"]
        assert [x.quarantined_checkpoint_ids for x in calls] == [("A-520", "A-540")]
        assert again._journal.state.quarantine == ["q1", ["A-500", "A-520", "A-540"]]
    finally:
        again.close(timeout=0)
