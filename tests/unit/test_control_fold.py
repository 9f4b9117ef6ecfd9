"""The one fold of lineage.control (streams.control) as each of its users reads it: the worker's
takeover (command ids, last plan records), the job client's decide, and the client's own
encoding of the events it emits (no broker)."""

from __future__ import annotations

import pytest

from streams.client import ClientError, JobClient
from streams.client.journal import WAL_FILE, WalEntry
from streams.codec import Codec
from streams.control import ControlState, JobControl, JobView, command_from_record, decide, fold_control
from streams.core.events import event_to_dict, parse_event
from streams.kafka.settings import BOOTSTRAP_ENV, KafkaSettings

CODEC = Codec()


def record(kind: str, cid: str, job: str = "A", inc: int = 0, supersedes: str | None = None,
           reason: str = "LEDGER_GAP") -> tuple[str, dict]:
    rec: dict = {"command_id": cid, "job_id": job, "cohort_id": None, "issued_ts": 1}
    if kind == "RollbackCommand":
        rec.update(incarnation=inc, action="ROLLBACK", target_checkpoint_id=f"{job}-1", target_step=1,
                   incident_ids=["i1"], supersedes=supersedes, commitment_root=None)
    elif kind == "QuarantineNotice":
        rec.update(incarnation=inc, incident_ids=["i1"], quarantined_checkpoint_ids=["q"],
                   supersedes=supersedes, commitment_root=None)
    elif kind == "PlanCleared":
        rec.update(incarnation=inc, supersedes=supersedes or "x", reason="clean")
    else:
        rec.update(reason=reason, detail="d", seq=None)
    return CODEC.decode_record(CODEC.encode_record(kind, rec))


def command(*args, **kw):
    return command_from_record(*record(*args, **kw))


def test_the_last_plan_record_is_in_force_and_every_earlier_one_superseded() -> None:
    job = JobControl()
    for c in (command("RollbackCommand", "r1"), command("HaltCommand", "h1"),
              command("RollbackCommand", "r2", supersedes="r1")):
        job.add(c)
    assert job.plan is not None and job.plan.command_id == "r2" and job.plan_at == 2
    assert [job.superseded(at) for at in (0, 2)] == [True, False]
    job.add(command("PlanCleared", "p1", supersedes="r2"))
    assert job.plan is None and job.last_plan.command_id == "p1"
    assert job.halted and job.halt.command_id == "h1" and job.halt_changed_at == 1


def test_command_ids_include_the_superseded_ones_and_last_plans_name_the_record() -> None:
    state = fold_control([record("RollbackCommand", "r2", supersedes="r1"),
                          record("HaltCommand", "h1", job="B"),
                          record("PlanCleared", "p1", job="C", supersedes="c0"),
                          record("HaltCommand", "rel", job="B", reason="RELEASE")])
    assert state.command_ids == {"r1", "r2", "h1", "p1", "c0", "rel"}
    assert state.last_plans == {"A": ("RollbackCommand", "r2"), "C": ("PlanCleared", "p1")}
    assert state.halts == {} and list(state.plans) == ["A"]


def test_halts_and_plans_are_looked_up_by_job() -> None:
    state = ControlState()
    for name, rec in (record("HaltCommand", "h1", job="X", reason="CHAIN_BROKEN"),
                      record("QuarantineNotice", "q1", job="Y")):
        state.add(name, rec)
    assert state.halts.get("X") == {"job_id": "X", "reason": "CHAIN_BROKEN", "detail": "d"}
    assert state.halts.get("Y") is None and state.plans["Y"]["action"] == "QUARANTINE"


def test_a_job_starting_halted_is_released_once_and_applied_halts_do_not_count() -> None:
    job = JobControl(halted=True, applied={"h1"})
    job.add(command("HaltCommand", "h1"))            # already applied: not counted again
    job.add(command("HaltCommand", "rel", reason="RELEASE"))
    job.add(command("HaltCommand", "h1"))
    assert not job.halted and job.halt_changed_at == 1


def test_decide_acts_on_the_fold_s_effective_plan_and_halt_change() -> None:
    batch = [command("RollbackCommand", "r1"), command("HaltCommand", "h1"), command("HaltCommand", "h2"),
             command("QuarantineNotice", "q1")]
    out = decide(JobView(0, set(), False), batch)
    assert [(c.command_id, c.outcome) for c in out] == [
        ("r1", "superseded"), ("h1", "halt"), ("h2", "no-change"), ("q1", "quarantine")]


def test_an_emitted_event_is_encoded_as_its_checked_dict(tmp_path) -> None:
    """One conversion: the dict the client builds is checked (parse_event) and encoded itself;
    the bytes are those of the event's own dict, ints given for doubles included."""
    c = JobClient("A", "c1", "m", journal_dir=tmp_path, bootstrap="127.0.0.1:1", follow_control=False,
                  fsync=False)
    try:
        c.start()
        ev = c.progress(3, 0, 2, grad_norm=1, lr=None)
        c.rolled_back(None, 0, from_scratch=True)
    finally:
        c.close(timeout=0)
    entries = [WalEntry.from_line(line) for line in (tmp_path / WAL_FILE).read_bytes().splitlines(keepends=True)]
    for e in entries:
        assert e.value == CODEC.encode_event(event_to_dict(parse_event(CODEC.decode_event(e.value))))
    assert isinstance(ev.loss, float) and ev.hash == entries[1].hash


def test_the_client_takes_kafka_settings_or_servers(tmp_path, monkeypatch) -> None:
    settings = KafkaSettings("127.0.0.1:1", client_id="job-a")
    c = JobClient("A", "c1", "m", journal_dir=tmp_path / "a", bootstrap=settings, follow_control=False,
                  fsync=False)
    try:
        assert c.kafka is settings and c.bootstrap == "127.0.0.1:1"
        assert c._delivery.conf["client.id"] == "job-a"
    finally:
        c.close(timeout=0)
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    with pytest.raises(ClientError, match="no Kafka bootstrap servers"):
        JobClient("A", "c1", "m", journal_dir=tmp_path / "b", follow_control=False)


def test_a_superseded_command_published_again_does_not_come_back_into_force() -> None:
    """A worker that took a partition over while the old owner's outputs were in flight re-folded
    from before a QuarantineNotice and published the RollbackCommand it supersedes once more
    (seen in the fault suite, a broker paused past the session timeout): the copy changes nothing,
    for the plans in force, the worker's last plan records and a job's decide alike."""
    trail = [record("RollbackCommand", "r1"), record("QuarantineNotice", "q1", supersedes="r1"),
             record("RollbackCommand", "r1")]
    state = fold_control(trail)
    assert state.plans["A"]["command_id"] == "q1" and state.plans["A"]["action"] == "QUARANTINE"
    assert state.last_plans == {"A": ("QuarantineNotice", "q1")}
    assert state.command_ids == {"r1", "q1"}
    out = decide(JobView(0, set(), False), [command_from_record(*r) for r in trail])
    assert [(c.command_id, c.outcome) for c in out] == [("r1", "superseded"), ("q1", "quarantine"),
                                                        ("r1", "superseded")]
    out = decide(JobView(0, {"r1"}, False), [command_from_record(*r) for r in trail[1:]])
    assert [(c.command_id, c.outcome) for c in out] == [("q1", "quarantine"), ("r1", "duplicate")]
    # a copy of the plan in force, never superseded, is still the plan in force
    again = fold_control([record("RollbackCommand", "r1"), record("RollbackCommand", "r1")])
    assert again.plans["A"]["command_id"] == "r1"
