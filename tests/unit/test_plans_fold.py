"""The fold of lineage.control into the plans and halts in force (no Kafka)."""

from __future__ import annotations

import json

import pytest

from streams.codec import Codec, DecodeError
from streams.control.fold import ControlState, fold_control
from streams.operator_commands.release import release_command_id
from streams.core.ids import command_id, hash_parts


def rollback(job: str, target: str | None, step: int | None, incidents=("i2", "i1"),
             action: str = "ROLLBACK", incarnation: int = 0, supersedes: str | None = None):
    cid = command_id(incidents, job, incarnation, action, target)
    return ("RollbackCommand", {
        "command_id": cid, "job_id": job, "cohort_id": "c1", "incarnation": incarnation,
        "action": action, "target_checkpoint_id": target, "target_step": step,
        "incident_ids": list(incidents), "supersedes": supersedes, "issued_ts": 1,
        "commitment_root": None, "type": "RollbackCommand"})


def quarantine(job: str, checkpoints=("B-600", "B-560"), incidents=("i1",), incarnation: int = 0):
    return ("QuarantineNotice", {
        "command_id": command_id(incidents, job, incarnation, "QUARANTINE", None), "job_id": job,
        "cohort_id": "c1", "incarnation": incarnation, "incident_ids": list(incidents),
        "quarantined_checkpoint_ids": list(checkpoints), "supersedes": None, "issued_ts": 2,
        "commitment_root": None, "type": "QuarantineNotice"})


def cleared(job: str, supersedes: str, incarnation: int = 1):
    return ("PlanCleared", {
        "command_id": hash_parts(("CLEAR", job, incarnation, supersedes)), "job_id": job,
        "cohort_id": "c1", "incarnation": incarnation, "supersedes": supersedes,
        "reason": "ancestry clean", "issued_ts": 3, "type": "PlanCleared"})


def halt(job: str, reason: str, detail: str = "seq 3 missing"):
    return ("HaltCommand", {
        "command_id": hash_parts((reason, job)), "job_id": job, "cohort_id": "c1",
        "reason": reason, "detail": detail, "seq": None, "issued_ts": 4, "type": "HaltCommand"})


def test_empty_topic_has_no_plan_and_no_halt() -> None:
    state = fold_control([])
    assert state.to_dict() == {"plans": [], "halts": []}
    assert (state.records, state.undecodable, state.ignored) == (0, 0, 0)


def test_rollback_command_is_the_plan_in_the_spec_shape() -> None:
    name, rec = rollback("A", "A-480", 480)
    assert fold_control([(name, rec)]).to_dict()["plans"] == [{
        "job_id": "A", "incarnation": 0, "action": "ROLLBACK", "target_checkpoint_id": "A-480",
        "target_step": 480, "incident_ids": ["i1", "i2"], "command_id": rec["command_id"]}]


def test_a_later_command_supersedes_the_earlier_one() -> None:
    first = rollback("A", "A-480", 480, incidents=("i1",))
    second = rollback("A", None, None, incidents=("i1", "i3"), action="RESTART_FROM_SCRATCH",
                      supersedes=first[1]["command_id"])
    plans = fold_control([first, second]).to_dict()["plans"]
    assert len(plans) == 1
    assert plans[0]["action"] == "RESTART_FROM_SCRATCH"
    assert plans[0]["command_id"] == second[1]["command_id"]
    assert (plans[0]["target_checkpoint_id"], plans[0]["target_step"]) == (None, None)
    assert plans[0]["incident_ids"] == ["i1", "i3"]


def test_last_record_wins_even_if_it_repeats_an_older_command() -> None:
    a, b = rollback("A", "A-480", 480), rollback("A", "A-400", 400)
    assert fold_control([a, b, a]).to_dict()["plans"][0]["target_checkpoint_id"] == "A-480"


def test_plan_cleared_means_no_plan_and_a_later_command_counts_again() -> None:
    cmd = rollback("A", "A-480", 480)
    clear = cleared("A", cmd[1]["command_id"])
    assert fold_control([cmd, clear]).to_dict()["plans"] == []
    again = rollback("A", "A-640", 640, incarnation=1)
    plans = fold_control([cmd, clear, again]).to_dict()["plans"]
    assert [(p["job_id"], p["incarnation"], p["target_checkpoint_id"]) for p in plans] == [("A", 1, "A-640")]


def test_plan_cleared_of_a_job_without_plan_is_harmless() -> None:
    assert fold_control([cleared("Z", "x" * 64)]).to_dict() == {"plans": [], "halts": []}


def test_quarantine_notice_is_a_quarantine_plan() -> None:
    name, rec = quarantine("B")
    assert fold_control([(name, rec)]).to_dict()["plans"] == [{
        "job_id": "B", "incarnation": 0, "action": "QUARANTINE", "target_checkpoint_id": None,
        "target_step": None, "incident_ids": ["i1"], "command_id": rec["command_id"],
        "quarantined_checkpoint_ids": ["B-560", "B-600"]}]


def test_quarantine_supersedes_a_rollback_of_the_same_job() -> None:
    plans = fold_control([rollback("B", "B-500", 500), quarantine("B")]).to_dict()["plans"]
    assert [p["action"] for p in plans] == ["QUARANTINE"]


def test_jobs_are_independent_and_sorted_whatever_the_interleaving() -> None:
    records = [rollback("C", "C-1", 1), halt("B", "LEDGER_GAP"), rollback("A", "A-2", 2),
               quarantine("B"), halt("A", "UNREGISTERED", "no JobStarted")]
    out = fold_control(records).to_dict()
    assert [p["job_id"] for p in out["plans"]] == ["A", "B", "C"]
    assert [h["job_id"] for h in out["halts"]] == ["A", "B"]
    shuffled = [records[i] for i in (4, 2, 0, 3, 1)]  # keeps each job's own order
    assert fold_control(shuffled).to_dict() == out


def test_halt_then_release_then_halt_again() -> None:
    h = halt("X", "UNTRACEABLE_SOURCE", "X-9 never written")
    assert fold_control([h]).to_dict()["halts"] == [
        {"job_id": "X", "reason": "UNTRACEABLE_SOURCE", "detail": "X-9 never written"}]
    released = halt("X", "RELEASE", "released by operator alice")
    assert fold_control([h, released]).to_dict()["halts"] == []
    again = halt("X", "CHAIN_BROKEN", "hash mismatch at seq 7")
    assert fold_control([h, released, again]).to_dict()["halts"] == [
        {"job_id": "X", "reason": "CHAIN_BROKEN", "detail": "hash mismatch at seq 7"}]


def test_the_last_halt_reason_is_the_one_in_force() -> None:
    out = fold_control([halt("X", "LEDGER_GAP"), halt("X", "UNREGISTERED", "d")]).to_dict()
    assert out["halts"] == [{"job_id": "X", "reason": "UNREGISTERED", "detail": "d"}]


def test_a_halt_does_not_touch_the_plan_and_a_release_does_not_clear_it() -> None:
    out = fold_control([rollback("A", "A-1", 1), halt("A", "LEDGER_GAP"), halt("A", "RELEASE")]).to_dict()
    assert [p["job_id"] for p in out["plans"]] == ["A"]
    assert out["halts"] == []


def test_undecodable_and_malformed_records_are_counted_not_fatal() -> None:
    codec = Codec()
    items = [rollback("A", "A-1", 1)]
    for junk in (b"", b"\x00\x01", b"garbage", codec.encode_event({
            "type": "JobStarted", "job_id": "A", "seq": 0, "incarnation": 0, "ts": 1,
            "cohort_id": "c", "base_model": "m", "base_checkpoint_id": None, "config_hash": None})):
        try:
            items.append(codec.decode_record(junk))
        except DecodeError as exc:
            items.append(exc)
    items.append(None)
    items.append(("RollbackCommand", {"job_id": "A"}))  # decodes to something malformed
    items.append(("Alert", {"alert_id": "a", "kind": "HALT", "message": "m", "ts": 1}))
    state = fold_control(items)
    assert state.undecodable == 6
    assert state.ignored == 1
    assert state.records == len(items)
    assert state.undecodable_reasons["MALFORMED"] == 1
    assert sum(state.undecodable_reasons.values()) == 6
    assert [p["target_checkpoint_id"] for p in state.to_dict()["plans"]] == ["A-1"]


def test_codec_round_trip_of_every_control_record_folds_the_same() -> None:
    codec = Codec()
    records = [rollback("A", "A-480", 480), rollback("A", "A-400", 400), quarantine("B"),
               rollback("C", "C-1", 1), cleared("C", "c" * 64), halt("D", "LEDGER_GAP"),
               halt("E", "CONFLICTING_DUPLICATE"), halt("E", "RELEASE")]
    decoded = [codec.decode_record(codec.encode_record(n, r)) for n, r in records]
    assert fold_control(decoded).to_dict() == fold_control(records).to_dict()
    out = fold_control(decoded).to_dict()
    assert [p["job_id"] for p in out["plans"]] == ["A", "B"]
    assert [h["job_id"] for h in out["halts"]] == ["D"]
    json.dumps(out, sort_keys=True)  # JSON-ready


def test_incremental_state_equals_the_batch_fold() -> None:
    records = [rollback("A", "A-1", 1), halt("B", "LEDGER_GAP"), quarantine("A")]
    state = ControlState()
    for name, rec in records:
        state.add(name, rec)
    assert state.to_dict() == fold_control(records).to_dict()


@pytest.mark.parametrize("ts", [0, 1760000000000])
def test_release_command_id_is_the_spec_hash(ts: int) -> None:
    import hashlib

    raw = b"RELEASE\x00" + b"X\x00" + str(ts).encode() + b"\x00"
    assert release_command_id("X", ts) == hashlib.sha256(raw).hexdigest()
