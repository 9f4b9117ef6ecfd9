"""One example of every event type and every agent record, in the canonical flat form.

Used by the codec's tests, the Kafka round-trip test and the benchmark; handy as documentation of
the shapes. Hash-like values are fake but well formed (64 hex digits).
"""

from __future__ import annotations

import hashlib
from typing import Any


def _h(*parts: object) -> str:
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()


ZERO_HASH = "0" * 64


def example_events() -> list[dict[str, Any]]:
    """A short job's life: one event of every type (with hash chain fields on some)."""
    base = {"job_id": "job-a", "incarnation": 0}
    return [
        {**base, "seq": 0, "ts": 1760000000000, "type": "JobStarted", "cohort_id": "c1",
         "base_model": "base-7b", "base_checkpoint_id": None, "config_hash": _h("cfg"),
         "prev_hash": ZERO_HASH, "hash": _h("job-a", 0), "public_key": _h("key")},
        {**base, "seq": 1, "ts": 1760000001000, "type": "Progress", "step": 10, "epoch": 0,
         "loss": 2.25, "grad_norm": 1.5, "lr": 1e-4, "prev_hash": _h("job-a", 0), "hash": _h("job-a", 1),
         "signature": _h("sig", 1) + _h("sig", 2)},
        {**base, "seq": 2, "ts": 1760000002000, "type": "Progress", "step": 20, "epoch": 0,
         "loss": float("nan"), "grad_norm": float("inf"), "lr": None},
        {**base, "seq": 3, "ts": 1760000003000, "type": "CheckpointWritten", "checkpoint_id": "job-a-20",
         "step": 20, "epoch": 0, "content_hash": _h("weights", 20), "uri": "s3://bucket/job-a/20.pt"},
        {**base, "seq": 4, "ts": 1760000004000, "type": "CheckpointConsumed",
         "source_checkpoint_id": "job-b-10", "step": 20, "mode": "PBT_EXPLOIT"},
        {**base, "seq": 5, "ts": 1760000005000, "type": "DivergenceReported", "onset_step": 20,
         "detector": "loss-nan", "reason": "loss is NaN"},
        {"job_id": "job-a", "incarnation": 1, "seq": 6, "ts": 1760000006000, "type": "RolledBack",
         "restored_checkpoint_id": None, "resumed_step": 0, "command_id": _h("cmd", 1),
         "from_scratch": True},
        # added in v8: progress without a loss (the job reported only an accuracy)
        {"job_id": "job-a", "incarnation": 1, "seq": 7, "ts": 1760000006500, "type": "Progress", "step": 5,
         "epoch": 0, "loss": None, "grad_norm": None, "lr": 1e-4},
        {"job_id": "job-a", "incarnation": 1, "seq": 8, "ts": 1760000007000, "type": "JobFinished",
         "status": "CANCELLED", "final_checkpoint_id": None},
        # added in v9: a deletion the referee allowed (SPEC §13), recorded as the job cleans up
        {"job_id": "job-a", "incarnation": 1, "seq": 9, "ts": 1760000008000, "type": "CheckpointDeleted",
         "checkpoint_id": "job-a-20"},
    ]


def example_records() -> list[dict[str, Any]]:
    """At least one record of every agent/processor record type, every field set, plus minimal
    ones (nullable fields null, empty lists)."""
    inc = _h("job-a", 0, 500)
    snap = [
        {"job_id": "job-a", "incarnation": 0, "last_step": 520, "status": "RUNNING"},
        {"job_id": "job-c", "incarnation": 2, "last_step": None, "status": "FINISHED"},
    ]
    return [
        {"type": "RollbackCommand", "command_id": _h("cmd", "a"), "job_id": "job-a", "cohort_id": "c1",
         "incarnation": 0, "action": "ROLLBACK", "target_checkpoint_id": "job-a-480", "target_step": 480,
         "incident_ids": [inc], "supersedes": _h("cmd", "old"), "issued_ts": 1760000100000,
         "commitment_root": _h("root"), "signature": bytes(range(1, 65)), "key_id": "0123456789abcdef"},
        {"type": "RollbackCommand", "command_id": _h("cmd", "b"), "job_id": "job-b", "cohort_id": None,
         "incarnation": 3, "action": "RESTART_FROM_SCRATCH", "target_checkpoint_id": None,
         "target_step": None, "incident_ids": [], "supersedes": None, "issued_ts": 0,
         "commitment_root": None, "signature": None, "key_id": None},
        {"type": "QuarantineNotice", "command_id": _h("q", "d"), "job_id": "job-d", "cohort_id": "c1",
         "incarnation": 0, "incident_ids": [inc], "quarantined_checkpoint_ids": ["job-d-600", "job-d-700"],
         "supersedes": None, "issued_ts": 1760000100001, "commitment_root": _h("root"),
         "signature": None, "key_id": None},
        {"type": "HaltCommand", "command_id": _h("halt", "x"), "job_id": "job-x", "cohort_id": "c1",
         "reason": "UNTRACEABLE_SOURCE", "detail": "consumed ghost-1, never written", "seq": 7,
         "issued_ts": 1760000100002, "signature": None, "key_id": None},
        {"type": "HaltCommand", "command_id": _h("halt", "y"), "job_id": "job-y", "cohort_id": None,
         "reason": "RELEASE", "detail": "released by operator", "seq": None, "issued_ts": 1760000100003,
         "signature": bytes(range(64, 128)), "key_id": "fedcba9876543210"},
        {"type": "Alert", "alert_id": _h("alert", 1), "kind": "UNRECORDED_SHARING", "cohort_id": "c1",
         "job_id": "job-c", "checkpoint_id": "job-c-700", "incident_id": inc,
         "message": "job-c-700 has the content of tainted job-a-520", "details": {"aliased": "job-a-520"},
         "ts": 1760000100004},
        {"type": "Alert", "alert_id": _h("alert", 2), "kind": "HALT", "cohort_id": None, "job_id": None,
         "checkpoint_id": None, "incident_id": None, "message": "", "details": {}, "ts": 0},
        {"type": "DivergenceManifest", "incident_id": inc, "version": 3, "cohort_id": "c1",
         "root": {"job_id": "job-a", "incarnation": 0, "onset_step": 500}, "verdict": "INTERNAL",
         "attributed_to": [],
         "contaminated": [{"job_id": "job-b", "incarnation": 0, "via_checkpoint_id": "job-a-520",
                           "path": ["job-a", "job-b"]}],
         "secondary_divergences": [{"job_id": "job-b", "incarnation": 0, "onset_step": 545}],
         "tainted_checkpoints": ["job-a-500", "job-a-520", "job-b-540"],
         "plans": [
             {"job_id": "job-a", "incarnation": 0, "action": "ROLLBACK", "target_checkpoint_id": "job-a-480",
              "target_step": 480, "incident_ids": [inc], "quarantined_checkpoint_ids": [],
              "command_id": _h("cmd", "a")},
             {"job_id": "job-d", "incarnation": 0, "action": "QUARANTINE", "target_checkpoint_id": None,
              "target_step": None, "incident_ids": [inc], "quarantined_checkpoint_ids": ["job-d-600"],
              "command_id": _h("q", "d")},
         ],
         "concurrency_snapshot": snap, "commitment_root": _h("root"), "ts": 1760000100005},
        {"type": "DivergenceManifest", "incident_id": _h("x", 0, 1), "version": 0, "cohort_id": None,
         "root": {"job_id": "job-x", "incarnation": 0, "onset_step": 1}, "verdict": "INDETERMINATE",
         "attributed_to": [], "contaminated": [], "secondary_divergences": [], "tainted_checkpoints": [],
         "plans": [], "concurrency_snapshot": [], "commitment_root": None, "ts": 0},
        {"type": "LineageCommitment", "cohort_id": "c1", "root": _h("root"), "tree_size": 2,
         "heads": [{"job_id": "job-a", "seq": 7, "hash": _h("job-a", 7)},
                   {"job_id": "job-c", "seq": 3, "hash": _h("job-c", 3)}],
         "snapshot": snap, "ts": 1760000100006, "signature": bytes(range(64)), "key_id": "processor-1",
         # log_root / log_size: added in v3
         "log_root": _h("log", 11), "log_size": 11, "input_partition": 2, "input_offset": 40,
         # added in v10: the C2SP checkpoint note (here with a fake signature)
         "checkpoint": "traintrace.example/c1\n11\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n"
                       "\u2014 traintrace.example AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"},
        {"type": "LineageCommitment", "cohort_id": "c2", "root": _h(), "tree_size": 0, "heads": [],
         "snapshot": [], "ts": 0, "signature": None, "key_id": None, "log_root": None, "log_size": None,
         "input_partition": None, "input_offset": None, "checkpoint": None},
        # added in v7
        {"type": "CohortSnapshot", "cohort_id": "c1", "partition": 2, "covers": 41, "input_offset": 40,
         "settled": False, "format": 1, "digest": _h("state"), "state": b"x\x9c\x03\x00\x00\x00\x00\x01",
         "ts": 1760000100008, "signature": bytes(range(64)), "key_id": "processor-1"},
        {"type": "CohortSnapshot", "cohort_id": "", "partition": 0, "covers": 0, "input_offset": None,
         "settled": True, "format": 1, "digest": _h(), "state": b"", "ts": 0, "signature": None, "key_id": None},
        {"type": "SnapshotRound", "partition": 2, "covers": 41, "cohorts": 7, "written": 3, "ts": 1760000100009},
        {"type": "DeadLetter", "original_topic": "lineage.events", "original_partition": 3,
         "original_offset": 123456789, "original_key": b"job-a", "original_value": b"\xc3\x01garbage",
         "reason": "UNKNOWN_FINGERPRINT: no known schema has fingerprint 67617262616765", "error_kind": "UNKNOWN_FINGERPRINT",
         "ts": 1760000100007},
        {"type": "DeadLetter", "original_topic": "lineage.events", "original_partition": 0,
         "original_offset": 0, "original_key": None, "original_value": b"", "reason": "EMPTY: no bytes",
         "error_kind": "EMPTY", "ts": 0},
        # added in v2
        {"type": "PlanCleared", "command_id": _h("clear", "job-b"), "job_id": "job-b", "cohort_id": "c1",
         "incarnation": 1, "supersedes": _h("cmd", "job-b"), "reason": "current ancestry is clean",
         "issued_ts": 1760000100008, "signature": None, "key_id": None},
        {"type": "CheckpointStatus", "checkpoint_id": "job-a-520", "job_id": "job-a", "cohort_id": "c1",
         "incarnation": 0, "step": 520, "content_hash": _h("weights", 520), "status": "TAINTED",
         "incident_ids": [inc], "ts": 1760000100009},
        {"type": "CheckpointStatus", "checkpoint_id": "job-a-480", "job_id": "job-a", "cohort_id": None,
         "incarnation": 0, "step": 480, "content_hash": _h("weights", 480), "status": "CLEAN",
         "incident_ids": [], "ts": 0},
        {"type": "EventBatch", "cohort_id": "c1",
         "events": [{"partition": 3, "offset": 17, "value": b"\xc3\x01" + bytes(8) + b"body"},
                    {"partition": 3, "offset": 18, "value": b""}], "tick_ms": None, "grace_ms": None,
         "settle_horizon_ms": None},
        {"type": "EventBatch", "cohort_id": "", "events": [], "tick_ms": None, "grace_ms": None,
         "settle_horizon_ms": None},
        {"type": "EventBatch", "cohort_id": "c1", "events": [], "tick_ms": 1760000123456, "grace_ms": 30000,
         "settle_horizon_ms": None},
        # added in v9
        {"type": "EventBatch", "cohort_id": "c1", "events": [], "tick_ms": 1760000123457, "grace_ms": 30000,
         "settle_horizon_ms": 600000},
        {"type": "RetentionNotice", "command_id": _h("retention", "job-a", 2), "job_id": "job-a", "cohort_id": "c1",
         "version": 2, "deletable": [{"checkpoint_id": "job-a-480", "reason": "superseded", "by": "job-a-500"},
                                     {"checkpoint_id": "job-a-520", "reason": "tainted", "by": None}],
         "kept": [{"checkpoint_id": "job-a-500", "reason": "needed", "by": None},
                  {"checkpoint_id": "job-a-540", "reason": "latest", "by": None}],
         "watermark_ms": 1760000123457, "settle_horizon_ms": 600000, "issued_ts": 1760000123457,
         "signature": bytes(range(2, 66)), "key_id": "0123456789abcdef"},
        {"type": "RetentionNotice", "command_id": _h("retention", "job-b", 1), "job_id": "job-b", "cohort_id": None,
         "version": 1, "deletable": [], "kept": [], "watermark_ms": 0, "settle_horizon_ms": 0, "issued_ts": 0,
         "signature": None, "key_id": None},
    ]


__all__ = ["ZERO_HASH", "example_events", "example_records"]
