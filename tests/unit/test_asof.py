"""``as_of``: what the referee knew at a moment, against answers computed by hand.

The expected values below were worked out by reading the events of the public vectors
(``../shared/scenarios``), not by running the code under test:

01_seed_example (SPEC §12), every event 1 s apart, ts = 1760000000000 + line * 1000:
  line   1-3   JobStarted A, B, C (cohort c1, no base)
  line   4-51  A Progress steps 10..480 (seq 1..48)
  line  52     A CheckpointWritten A-480 (seq 49)
  line  53-92  B Progress steps 10..400 (seq 1..40)
  line  93     B consumes A-480 MERGE at step 400 (seq 41)
  line  94-123 C Progress steps 10..300 (seq 1..30)
  line 124     C consumes A-480 PBT_EXPLOIT at step 300 (seq 31)
  line 125     A Progress step 500, loss NaN (seq 50)          -> A diverges, onset 500
  line 126     A-500 (seq 51); 127/128 A steps 510/520; 129 A-520 (seq 54)
  line 130-139 B steps 410..500; 140 B-500 (seq 52); 141/142 B steps 510/520
  line 143     B consumes A-520 REFERENCE at step 520 (seq 55)  -> B contaminated
  line 144/145 B steps 530/540; 146 B-540 (seq 58); 147/148 B 550/560; 149 B-560 (seq 61)
  line 150-179 C steps 310..600; 180 C-600 (seq 62)
"""

from __future__ import annotations

import hashlib
import json

import pytest
from click.testing import CliRunner
from rich.console import Console

from streams.files.archive import LogRecord
from streams.cli.asof_view import render_as_of
from streams.cli.main import cli
from streams.codec import Codec
from streams.audit.analyze import analyze_file
from streams.audit.asof import as_of, iso_utc, load_jsonl_log
from streams.audit.log import AuditLog, load, parse_time

from .vectors import scenarios_dir

T0 = 1760000000000  # 2025-10-09T08:53:20Z
# SPEC §10: incident id of root (A, 0, 500) = SHA-256 of b"A\x000\x00500\x00"
INCIDENT_A = "a7441e344acbdfb8bc5d454f00cdf9bbf434f469e813e5aedf9fa5a6414bf0f5"


def at(line: int) -> int:
    """The ts of line ``line`` of 01/06/08 (one event per second from T0 + 1 s)."""
    return T0 + line * 1000


def vector(name: str) -> str:
    return str(scenarios_dir() / f"{name}.jsonl")


@pytest.fixture(scope="module")
def seed_log() -> AuditLog:
    return load(vector("01_seed_example"))


def jobs(answer) -> list[tuple]:
    return [(j["job_id"], j["cohort_id"], j["incarnation"], j["last_step"], j["status"], j["last_seq"],
             j["last_event_ts"]) for j in answer["jobs"]]


def plans(answer) -> list[tuple]:
    return [(p["job_id"], p["incarnation"], p["action"], p["target_checkpoint_id"], p["target_step"],
             p["incident_ids"]) for p in answer["plans"]]


def incidents(answer) -> list[tuple]:
    return [(i["incident_id"], i["verdict"], (i["root"]["job_id"], i["root"]["incarnation"], i["root"]["onset_step"]),
             [(c["job_id"], c["incarnation"], c["via_checkpoint_id"]) for c in i["contaminated"]],
             i["secondary_divergences"]) for i in answer["incidents"]]


def test_incident_id_is_the_spec_hash():
    assert hashlib.sha256(b"A\x000\x00500\x00").hexdigest() == INCIDENT_A


# ------------------------------------------------------------------ 01_seed_example, moments


def test_before_the_first_event_nothing_is_known(seed_log):
    a = as_of(seed_log, T0 + 999)
    assert a["as_of_ms"] == 1760000000999
    assert a["as_of"] == "2025-10-09T08:53:20.999Z"
    assert a["events_folded"] == 0
    assert a["jobs"] == []
    assert a["tainted_checkpoints"] == [] and a["plans"] == [] and a["incidents"] == []
    assert a["halts"] == [] and a["unresolved_sources"] == []
    assert a["commands_issued"] is None
    assert any("no control topic" in n for n in a["notes"])
    assert any("before the first event" in n for n in a["notes"])
    json.dumps(a)  # serialisable


def test_before_the_divergence(seed_log):
    """Line 124: C has just taken A-480; A's NaN (line 125) is not known yet."""
    a = as_of(seed_log, at(124))
    assert a["as_of"] == "2025-10-09T08:55:24.000Z"
    assert a["events_folded"] == 124
    assert jobs(a) == [
        ("A", "c1", 0, 480, "RUNNING", 49, 1760000052000),
        ("B", "c1", 0, 400, "RUNNING", 41, 1760000093000),
        ("C", "c1", 0, 300, "RUNNING", 31, 1760000124000),
    ]
    assert a["tainted_checkpoints"] == []
    assert a["plans"] == []
    assert a["incidents"] == []
    assert a["halts"] == [] and a["unresolved_sources"] == []


def test_one_millisecond_before_the_divergence_is_still_clean(seed_log):
    a = as_of(seed_log, at(125) - 1)
    assert a["events_folded"] == 124
    assert a["plans"] == [] and a["incidents"] == []


def test_at_the_divergence_event(seed_log):
    """Line 125 (A's NaN at step 500): A diverged at 500, its plan is ROLLBACK to A-480; no
    checkpoint at or after the onset exists yet, so nothing is tainted."""
    a = as_of(seed_log, at(125))
    assert a["events_folded"] == 125
    assert jobs(a)[0] == ("A", "c1", 0, 500, "RUNNING", 50, 1760000125000)
    assert a["tainted_checkpoints"] == []
    assert plans(a) == [("A", 0, "ROLLBACK", "A-480", 480, [INCIDENT_A])]
    assert incidents(a) == [(INCIDENT_A, "INTERNAL", ("A", 0, 500), [], [])]


def test_after_the_tainted_checkpoints_are_written(seed_log):
    """Line 129: A-500 and A-520 are tainted (T1); B took only A-480 (before the onset): clean."""
    a = as_of(seed_log, at(129))
    assert a["events_folded"] == 129
    assert a["tainted_checkpoints"] == ["A-500", "A-520"]
    assert plans(a) == [("A", 0, "ROLLBACK", "A-480", 480, [INCIDENT_A])]
    assert incidents(a) == [(INCIDENT_A, "INTERNAL", ("A", 0, 500), [], [])]
    assert jobs(a) == [
        ("A", "c1", 0, 520, "RUNNING", 54, 1760000129000),
        ("B", "c1", 0, 400, "RUNNING", 41, 1760000093000),
        ("C", "c1", 0, 300, "RUNNING", 31, 1760000124000),
    ]


def test_after_b_consumes_the_tainted_checkpoint(seed_log):
    """Line 143: B consumed A-520 (seq 55): B's last checkpoint before that is B-500."""
    a = as_of(seed_log, at(143))
    assert a["events_folded"] == 143
    assert jobs(a) == [
        ("A", "c1", 0, 520, "RUNNING", 54, 1760000129000),
        ("B", "c1", 0, 520, "RUNNING", 55, 1760000143000),
        ("C", "c1", 0, 300, "RUNNING", 31, 1760000124000),
    ]
    assert a["tainted_checkpoints"] == ["A-500", "A-520"]  # B-540 not written yet
    assert plans(a) == [
        ("A", 0, "ROLLBACK", "A-480", 480, [INCIDENT_A]),
        ("B", 0, "ROLLBACK", "B-500", 500, [INCIDENT_A]),
    ]
    assert incidents(a) == [(INCIDENT_A, "INTERNAL", ("A", 0, 500), [("B", 0, "A-520")], [])]


def test_after_b_writes_past_the_consumption(seed_log):
    """Line 149: B-540 and B-560 are tainted (T2 through A-520)."""
    a = as_of(seed_log, at(149))
    assert a["tainted_checkpoints"] == ["A-500", "A-520", "B-540", "B-560"]
    assert [p[0] for p in plans(a)] == ["A", "B"]


def test_at_the_end_equals_analyze(seed_log):
    a = as_of(seed_log, at(180))
    assert a["events_folded"] == 180
    assert jobs(a) == [
        ("A", "c1", 0, 520, "RUNNING", 54, 1760000129000),
        ("B", "c1", 0, 560, "RUNNING", 61, 1760000149000),
        ("C", "c1", 0, 600, "RUNNING", 62, 1760000180000),
    ]
    assert a["tainted_checkpoints"] == ["A-500", "A-520", "B-540", "B-560"]
    assert plans(a) == [
        ("A", 0, "ROLLBACK", "A-480", 480, [INCIDENT_A]),
        ("B", 0, "ROLLBACK", "B-500", 500, [INCIDENT_A]),
    ]
    final = analyze_file(vector("01_seed_example")).result
    for key in ("plans", "tainted_checkpoints", "incidents", "halts", "alerts"):
        assert a[key] == final[key], key
    assert any("at or after the last event" in n for n in a["notes"])
    # any later time: the same answer
    later = as_of(seed_log, at(10_000))
    assert {k: v for k, v in later.items() if k not in ("as_of_ms", "as_of")} == \
        {k: v for k, v in a.items() if k not in ("as_of_ms", "as_of")}


def test_iso_time(seed_log):
    assert parse_time("2025-10-09T08:55:43Z") == 1760000143000
    assert parse_time("2025-10-09T10:55:43+02:00") == 1760000143000
    assert parse_time("2025-10-09T08:55:43") == 1760000143000  # no zone: UTC
    assert iso_utc(1760000143000) == "2025-10-09T08:55:43.000Z"
    a = as_of(seed_log, parse_time("2025-10-09T08:55:43Z"))
    assert a["as_of"] == "2025-10-09T08:55:43.000Z"
    assert [p[0] for p in plans(a)] == ["A", "B"]


def test_out_of_order_vector_gives_the_same_moments(seed_log):
    """05 holds the events of 01 in another line order: "known at T" goes by time, not by line."""
    other = load(vector("05_out_of_order"))
    for line in (0, 124, 125, 129, 143, 149, 180):
        a, b = as_of(seed_log, at(line)), as_of(other, at(line))
        for key in ("events_folded", "jobs", "tainted_checkpoints", "plans", "incidents", "halts"):
            assert a[key] == b[key], (line, key)


# ------------------------------------------------------------------ 08: rollbacks and incarnations


def test_rollback_moments():
    """08_rollback_incarnations: A diverges at 500 (line 53), writes A-520 (56); B takes A-520 at
    seq 53 (line 109) after B-510, writes B-560 (115); A rolls back to A-480 (line 116, inc 1);
    C writes C-400 (167), then restores B-560 (line 168, inc 1), writes C-600-i1 (173)."""
    log = load(vector("08_rollback_incarnations"))

    a = as_of(log, at(115))
    assert a["tainted_checkpoints"] == ["A-520", "B-560"]
    assert plans(a) == [
        ("A", 0, "ROLLBACK", "A-480", 480, [INCIDENT_A]),
        ("B", 0, "ROLLBACK", "B-510", 510, [INCIDENT_A]),
    ]

    a = as_of(log, at(116))  # A rolled back past the onset: its plan is over
    assert plans(a) == [("B", 0, "ROLLBACK", "B-510", 510, [INCIDENT_A])]
    ja = a["jobs"][0]
    assert (ja["job_id"], ja["incarnation"], ja["last_step"], ja["resumed_step"], ja["last_seq"]) == \
        ("A", 1, None, 480, 54)

    a = as_of(log, at(167))  # C has a clean history so far
    assert [p[0] for p in plans(a)] == ["B"]
    jc = a["jobs"][2]
    assert (jc["job_id"], jc["incarnation"], jc["last_step"], jc["resumed_step"], jc["last_seq"]) == \
        ("C", 0, 400, None, 42)
    assert incidents(a) == [(INCIDENT_A, "INTERNAL", ("A", 0, 500), [("B", 0, "A-520")], [])]

    a = as_of(log, at(168))  # C restored tainted B-560: its base is tainted
    assert plans(a) == [
        ("B", 0, "ROLLBACK", "B-510", 510, [INCIDENT_A]),
        ("C", 1, "RESTART_FROM_SCRATCH", None, None, [INCIDENT_A]),
    ]
    assert incidents(a) == [(INCIDENT_A, "INTERNAL", ("A", 0, 500), [("B", 0, "A-520"), ("C", 1, "B-560")], [])]
    jc = a["jobs"][2]
    assert (jc["incarnation"], jc["last_step"], jc["resumed_step"]) == (1, None, 560)
    assert a["tainted_checkpoints"] == ["A-520", "B-560"]

    a = as_of(log, at(173))
    assert a["tainted_checkpoints"] == ["A-520", "B-560", "C-600-i1"]


# ------------------------------------------------------------------ 06: unresolved so far


def test_unresolved_source_is_not_a_halt_at_t():
    """06_guard_untraceable: B consumes 'ghost-42' (seq 6, line 19), which nobody ever writes;
    B reports a divergence at 130 (line 29) after writing B-100 (line 25)."""
    log = load(vector("06_guard_untraceable"))
    a = as_of(log, at(19))
    assert a["halts"] == []
    assert [(u["job_id"], u["checkpoint_id"], u["incarnation"], u["seq"], u["mode"], u["since_ts"])
            for u in a["unresolved_sources"]] == [("B", "ghost-42", 0, 6, "MERGE", 1760000019000)]
    assert [j["status"] for j in a["jobs"]] == ["RUNNING", "RUNNING"]

    a = as_of(log, at(29))
    inc_b = hashlib.sha256(b"B\x000\x00130\x00").hexdigest()
    assert incidents(a) == [(inc_b, "INDETERMINATE", ("B", 0, 130), [], [])]
    assert plans(a) == [("B", 0, "ROLLBACK", "B-100", 100, [inc_b])]

    # at the end: still only unresolved (analyze halts it because the log ended)
    a = as_of(log, at(41))
    assert a["halts"] == []
    assert [u["checkpoint_id"] for u in a["unresolved_sources"]] == ["ghost-42"]
    assert analyze_file(vector("06_guard_untraceable")).result["halts"] == \
        [{"job_id": "B", "reason": "UNTRACEABLE_SOURCE",
          "detail": "seq 6 consumed 'ghost-42', which no CheckpointWritten recorded"}]


def test_grace_period_halts_what_stayed_unresolved():
    log = load(vector("06_guard_untraceable"))
    a = as_of(log, at(23), grace_ms=5000)  # 4 s after the consumption
    assert a["halts"] == []
    a = as_of(log, at(24), grace_ms=5000)  # 5 s after
    assert [(h["job_id"], h["reason"]) for h in a["halts"]] == [("B", "UNTRACEABLE_SOURCE")]
    assert [j["status"] for j in a["jobs"]] == ["RUNNING", "HALTED:UNTRACEABLE_SOURCE"]
    assert [u["checkpoint_id"] for u in a["unresolved_sources"]] == ["ghost-42"]


# ------------------------------------------------------------------ control topic, processor clock

def _rollback(codec, cid, job, action, target, step, issued, supersedes=None):
    return codec.encode_record("RollbackCommand", {
        "command_id": cid, "job_id": job, "cohort_id": "c1", "incarnation": 0, "action": action,
        "target_checkpoint_id": target, "target_step": step, "incident_ids": [INCIDENT_A],
        "supersedes": supersedes, "issued_ts": issued, "commitment_root": None})


def test_commands_issued_from_the_control_topic(seed_log):
    codec = Codec()
    log = AuditLog(records={"events": list(seed_log.topic("events"))}, source="test")
    halt = codec.encode_record("HaltCommand", {
        "command_id": "h1", "job_id": "C", "cohort_id": "c1", "reason": "LEDGER_GAP",
        "detail": "made up", "seq": 7, "issued_ts": at(140)})
    cleared = codec.encode_record("PlanCleared", {
        "command_id": "x1", "job_id": "A", "cohort_id": "c1", "incarnation": 1,
        "supersedes": "r-A", "reason": "the job's current ancestry is clean", "issued_ts": at(170)})
    # partition 0: A's command, C's halt, A's clear; partition 1: B's command (issued in between)
    for rec in (LogRecord("control", 0, 0, at(125) + 7, "A",
                          _rollback(codec, "r-A", "A", "ROLLBACK", "A-480", 480, at(125))),
                LogRecord("control", 0, 1, at(140) + 7, "C", halt),
                LogRecord("control", 0, 2, at(170) + 7, "A", cleared),
                LogRecord("control", 1, 0, at(143) + 7, "B",
                          _rollback(codec, "r-B", "B", "ROLLBACK", "B-500", 500, at(143))),
                LogRecord("control", 1, 1, at(150), "B", b"\x00garbage")):
        log.add(rec)

    assert as_of(log, at(124))["commands_issued"] == []
    a = as_of(log, at(143))
    assert [(c["record"], c["command_id"], c["job_id"], c["action"], c["target_checkpoint_id"],
             c["target_step"], c["reason"], c["issued_ts"]) for c in a["commands_issued"]] == [
        ("RollbackCommand", "r-A", "A", "ROLLBACK", "A-480", 480, None, 1760000125000),
        ("HaltCommand", "h1", "C", "HALT", None, None, "LEDGER_GAP", 1760000140000),
        ("RollbackCommand", "r-B", "B", "ROLLBACK", "B-500", 500, None, 1760000143000),
    ]
    a = as_of(log, at(180))
    assert [(c["command_id"], c["action"], c["supersedes"]) for c in a["commands_issued"]] == [
        ("r-A", "ROLLBACK", None), ("h1", "HALT", None), ("r-B", "ROLLBACK", None), ("x1", "CLEAR", "r-A")]
    assert any("did not decode" in n for n in a["notes"])
    json.dumps(a)


def test_processor_clock_from_the_input_topic(seed_log):
    """With lineage.by-cohort, "known at T" is what the processor had folded by T: here every
    event reaches the processor 500 ms after its own ts."""
    codec = Codec()
    log = AuditLog(records={"events": list(seed_log.topic("events"))}, source="test")
    for i, rec in enumerate(seed_log.topic("events")):
        batch = codec.encode_record("EventBatch", {"cohort_id": "c1", "events": [
            {"partition": rec.partition, "offset": rec.offset, "value": rec.value}]})
        log.add(LogRecord("input", 0, i, rec.timestamp + 500, "c1", batch))

    a = as_of(log, at(125))  # the NaN happened, but the processor had not folded it yet
    assert a["clock"] == "processor"
    assert a["events_folded"] == 124 and a["plans"] == []
    a = as_of(log, at(125) + 500)
    assert a["events_folded"] == 125
    assert plans(a) == [("A", 0, "ROLLBACK", "A-480", 480, [INCIDENT_A])]
    assert jobs(a)[0] == ("A", "c1", 0, 500, "RUNNING", 50, 1760000125000)  # event time of the last event


# ------------------------------------------------------------------ rendering and CLI


def test_render_as_of_tables(seed_log):
    console = Console(record=True, width=160)
    render_as_of(console, as_of(seed_log, at(143)))
    text = console.export_text()
    for needle in ("As of 2025-10-09T08:55:43.000Z", "Jobs", "RUNNING", "A-500, A-520", "Incidents",
                   "B/0 via A-520", "ROLLBACK", "B-500", "no control topic"):
        assert needle in text, needle
    console = Console(record=True, width=160)
    render_as_of(console, as_of(seed_log, T0))
    assert "No job had reported anything yet." in console.export_text()


def test_cli_analyze_as_of_json():
    result = CliRunner().invoke(cli, ["analyze", vector("01_seed_example"), "--as-of", "1760000143000", "--json"])
    assert result.exit_code == 0, result.output
    a = json.loads(result.output)
    assert a["as_of"] == "2025-10-09T08:55:43.000Z" and a["events_folded"] == 143
    assert plans(a) == [
        ("A", 0, "ROLLBACK", "A-480", 480, [INCIDENT_A]),
        ("B", 0, "ROLLBACK", "B-500", 500, [INCIDENT_A]),
    ]
    assert a["tainted_checkpoints"] == ["A-500", "A-520"]
    assert [(j["job_id"], j["last_step"]) for j in a["jobs"]] == [("A", 520), ("B", 520), ("C", 300)]
    assert a["commands_issued"] is None


def test_cli_analyze_as_of_iso_and_rich():
    result = CliRunner().invoke(cli, ["analyze", vector("01_seed_example"), "--as-of", "2025-10-09T08:55:24Z"])
    assert result.exit_code == 0, result.output
    assert "124" in result.output and "No plan." in result.output


def test_cli_analyze_as_of_grace_and_errors():
    runner = CliRunner()
    result = runner.invoke(cli, ["analyze", vector("06_guard_untraceable"), "--as-of", str(at(24)),
                                 "--grace-seconds", "5", "--json"])
    assert result.exit_code == 0, result.output
    assert [h["reason"] for h in json.loads(result.output)["halts"]] == ["UNTRACEABLE_SOURCE"]
    result = runner.invoke(cli, ["analyze", vector("01_seed_example"), "--as-of", "yesterday"])
    assert result.exit_code == 2 and "neither milliseconds" in result.output
    result = runner.invoke(cli, ["analyze", vector("01_seed_example"), "--grace-seconds", "5"])
    assert result.exit_code == 2 and "only applies with --as-of" in result.output


def test_cli_analyze_as_of_skip_invalid(tmp_path):
    lines = open(vector("01_seed_example"), encoding="utf-8").read().splitlines()
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines[:130] + ["{not json"] + lines[130:]) + "\n", encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(cli, ["analyze", str(path), "--as-of", str(at(143)), "--json"])
    assert result.exit_code == 1
    result = runner.invoke(cli, ["analyze", str(path), "--as-of", str(at(143)), "--json", "--skip-invalid"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["events_folded"] == 143
    log, skipped = load_jsonl_log(str(path), skip_invalid=True)
    assert len(skipped) == 1 and skipped[0].line == 131 and len(log.topic("events")) == 180


def test_cli_analyze_as_of_reads_an_archive(tmp_path, seed_log):
    """An audit archive (.avro) with lineage.control: the commands issued by T are listed; an
    archive whose control topic was read but is empty lists none (not null)."""
    from streams.files.archive import write_archive

    codec = Codec()
    control = [LogRecord("control", 0, 0, at(125), "A",
                         _rollback(codec, "r-A", "A", "ROLLBACK", "A-480", 480, at(125)))]
    path = tmp_path / "audit.avro"
    write_archive(str(path), list(seed_log.topic("events")) + control,
                  {"topics": {"events": "lineage.events", "control": "lineage.control"}})
    result = CliRunner().invoke(cli, ["analyze", str(path), "--as-of", str(at(125)), "--json"])
    assert result.exit_code == 0, result.output
    a = json.loads(result.output)
    assert a["events_folded"] == 125
    assert [(c["command_id"], c["action"], c["target_checkpoint_id"]) for c in a["commands_issued"]] == \
        [("r-A", "ROLLBACK", "A-480")]
    assert as_of(load(str(path)), at(124))["commands_issued"] == []

    empty = tmp_path / "empty-control.avro"
    write_archive(str(empty), list(seed_log.topic("events")),
                  {"topics": {"events": "lineage.events", "control": "lineage.control"}})
    assert as_of(load(str(empty)), at(180))["commands_issued"] == []
