"""``traintrace demo --json`` against a real broker: the story's facts, not its timing.

The command runs as a user runs it (a subprocess, ``KAFKA_BOOTSTRAP_SERVERS`` naming the session
broker): real workers, six real training processes. With the default gate (``warn``) and one
worker: one INTERNAL incident rooted at j1, j2 contaminated via ``j1-110``, a rollback command for
j1 and j2 each acknowledged by a ``RolledBack`` carrying its ``command_id`` (checked in the
exported ``events.jsonl`` too), both jobs finished SUCCEEDED after restoring, j3–j6 untouched.
With ``--gate refuse`` and two workers: j2's client refuses the tainted checkpoint, so only j1 is
rolled back.

The audit trail: the workers sign their commitments with the key the demo generated into
``keys/``; the demo's export of its topics (``log.avro``) passes the audit with every commitment's
signature checked against that keyring (``audit.json``), ``lineage.html`` and ``lineage.png`` are
written, and ``traintrace audit log.avro --trusted-keys keys`` run by hand passes too.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from streams.demo.scenario import STEPS, expected
from streams.demo.leftovers import delete_run_topics
from streams.demo.story import check_story, expected_for

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 420  # the command itself takes seconds; generous for a loaded machine


def run_demo_cli(bootstrap: str, work_dir: Path, *args: str) -> tuple[dict[str, Any], subprocess.CompletedProcess]:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    proc = subprocess.run([sys.executable, "-m", "streams", "demo", "--json", "--work-dir", str(work_dir), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"demo exited {proc.returncode} without a JSON report:\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-3000:]}")
    return report, proc


def failed_checks(report: dict[str, Any]) -> str:
    return "; ".join(f"{c['check']}: {c['detail']}" for c in report["checks"] if not c["ok"])


@pytest.fixture(scope="module")
def warn_run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], Path, int]]:
    work = tmp_path_factory.mktemp("demo") / "run"
    report, proc = run_demo_cli(kafka_bootstrap, work)
    yield report, work, proc.returncode
    delete_run_topics(kafka_bootstrap, report)  # --work-dir keeps them; the broker may be shared


def rollbacks_of(report: dict[str, Any], job: str) -> list[dict[str, Any]]:
    return [c for c in report["commands"] if c["type"] == "RollbackCommand" and c["job_id"] == job]


def test_the_story_live(warn_run) -> None:
    report, work, rc = warn_run
    assert report["story_ok"], failed_checks(report)
    assert rc == 0
    exp = expected()
    assert report["expected"]["root"] == exp["root"]
    assert set(report) >= set(["incidents", "plans", "commands", "jobs", "timing", "expected",
                                     "story_ok", "work_dir"])

    # one INTERNAL incident rooted at the diverging job; j2 contaminated through j1-110
    [inc] = report["incidents"]
    assert inc["verdict"] == "INTERNAL"
    assert (inc["root"]["job_id"], inc["root"]["incarnation"], inc["root"]["onset_step"]) == ("j1", 0, 110)
    assert [(c["job_id"], c["incarnation"], c["via_checkpoint_id"]) for c in inc["contaminated"]] == \
        [("j2", 0, "j1-110")]
    assert "j1-110" in inc["tainted_checkpoints"]
    for s in inc["secondary_divergences"]:  # present only if j2 computed step 121 before its rollback
        assert (s["job_id"], s["incarnation"]) == ("j2", 0) and s["onset_step"] > 120

    # a rollback command for each affected job, acknowledged by a RolledBack with its command_id
    events = [json.loads(line) for line in (work / "events.jsonl").read_text().splitlines()]
    rolled = {(e["job_id"], e["seq"]): e for e in events if e["type"] == "RolledBack"}
    for job, plan in exp["rollbacks"].items():
        cmds = rollbacks_of(report, job)
        assert cmds, f"no rollback command for {job}"
        assert all((c["action"], c["target_checkpoint_id"], c["target_step"]) ==
                   (plan["action"], plan["target_checkpoint_id"], plan["target_step"]) for c in cmds)
        acked = [c for c in cmds if c["acknowledged_by_seq"] is not None]
        assert acked, f"no acknowledged command for {job}: {cmds}"
        for c in acked:
            ev = rolled[(job, c["acknowledged_by_seq"])]
            assert ev["command_id"] == c["command_id"]
            assert ev["restored_checkpoint_id"] == plan["target_checkpoint_id"]
            assert ev["resumed_step"] == plan["target_step"] and ev["incarnation"] == 1
        j = report["jobs"][job]
        assert j["status"] == "SUCCEEDED" and j["incarnation"] >= 1 and j["rolled_back"]
        assert j["final_step"] == STEPS and j["final_loss"] is not None
        assert plan["target_checkpoint_id"] in [r["checkpoint_id"] for r in j["restored"]]
    # every other rollback command was superseded or outrun by the acknowledged one
    for c in report["commands"]:
        if c["type"] == "RollbackCommand":
            assert c["status"] != "NOT ACKNOWLEDGED", c

    # the clean jobs are untouched
    for job in exp["clean"]:
        j = report["jobs"][job]
        assert (j["status"], j["incarnation"], j["rolled_back"], j["final_step"]) == \
            ("SUCCEEDED", 0, False, STEPS), (job, j)
        assert not [c for c in report["commands"] if c["job_id"] == job], job
    assert report["plans"]["halts"] == []
    assert not [e for e in events if e["type"] == "RolledBack" and e["job_id"] in exp["clean"]]
    consumed = {(job, ck, mode) for job, j in report["jobs"].items() for ck, mode, _step in j["consumed"]}
    assert set(map(tuple, exp["clean_consumptions"])) <= consumed
    assert ("j2", "j1-110", "PBT_EXPLOIT") in consumed

    # timing is reported (not asserted)
    assert report["timing"]["divergence_to_last_ack_s"] is not None
    assert report["timing"]["total_s"] > 0


def test_the_exported_log_analyzes_to_the_same_incident(warn_run) -> None:
    report, work, _rc = warn_run
    assert report["offline"]["equal"], report["offline"]
    proc = subprocess.run([sys.executable, "-m", "streams", "analyze", "--json", str(work / "events.jsonl")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    final = json.loads(proc.stdout)
    assert [x["incident_id"] for x in final["incidents"]] == [x["incident_id"] for x in report["incidents"]]
    assert final["halts"] == [] and final["plans"] == []  # every affected job rolled back past it
    assert (work / "report.json").is_file()
    assert sorted(p.name for p in (work / "logs").iterdir()) == [f"j{i}.log" for i in range(1, 7)]


def test_the_demo_log_is_audited_and_drawn(warn_run) -> None:
    report, work, _rc = warn_run
    au = report["audit"]
    assert au["error"] is None, au["error"]
    assert au["passed"] and au["verdict"] == "PASS", au
    checks = {c["name"]: c for c in au["checks"]}
    assert set(checks) == {"chains", "input", "commands", "manifests", "commitments", "snapshots", "deletions"}
    # (the snapshots check is skipped when the run ended before the workers' first round)
    assert all((c["verdict"] == "PASS" or (n == "snapshots" and c["verdict"] == "SKIPPED")) and c["failed"] == 0
               for n, c in checks.items()), checks
    # the commitments were checked, each one's signature against the demo's keyring
    assert checks["commitments"]["checked"] > 0
    assert au["signed_commitments"] == checks["commitments"]["checked"]
    assert au["trusted_keys"] == [au["key_id"]]
    assert checks["commands"]["checked"] > 0 and checks["manifests"]["checked"] > 0
    assert (work / "keys" / "processor.key").is_file() and (work / "keys" / f"processor-{au['key_id']}.pub").is_file()
    saved = json.loads((work / "audit.json").read_text())
    assert saved["passed"] is True
    assert {c["name"]: c["checked"] for c in saved["checks"]} == {n: c["checked"] for n, c in checks.items()}
    assert (work / "log.avro").read_bytes()[:4] == b"Obj\x01"

    png = (work / "lineage.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    page = (work / "lineage.html").read_text()
    assert "<svg" in page and "Audit:" in page and 'href="audit.json"' in page
    assert "j1-110" in page and "j1-100" in page and "j2-120" in page

    story = {c["check"]: c for c in report["checks"]}
    assert story["audit of the demo's log passes"]["ok"] and story["report written"]["ok"]
    wd = Path(report["work_dir"])  # resolved; plain characters, so the commands need no quoting
    assert au["commands"][0] == f"traintrace audit {wd / 'log.avro'} --trusted-keys {wd / 'keys'}"
    assert any(c.startswith(f"traintrace report {wd / 'log.avro'} --out ") for c in au["commands"])
    assert f"traintrace analyze {wd / 'events.jsonl'}" in au["commands"]

    # the first command, as a user runs it
    proc = subprocess.run([sys.executable, "-m", "streams", "audit", str(work / "log.avro"),
                           "--trusted-keys", str(work / "keys")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "AUDIT PASSED" in proc.stdout


def test_the_story_check_notices_a_wrong_run(warn_run) -> None:
    """check_story is not vacuous: an unacknowledged rollback, a touched clean job or a second
    incident each fail it."""
    report, _work, _rc = warn_run
    exp = expected_for("warn")
    assert all(c["ok"] for c in check_story(report, exp))

    r = copy.deepcopy(report)
    for c in r["commands"]:
        if c["job_id"] == "j2" and c["type"] == "RollbackCommand":
            c["acknowledged_by_seq"] = None
            c["status"] = "NOT ACKNOWLEDGED"
    bad = {c["check"] for c in check_story(r, exp) if not c["ok"]}
    assert {"j2 acknowledged", "every command acted on"} <= bad

    r = copy.deepcopy(report)
    r["jobs"]["j6"]["incarnation"] = 1
    assert "j6 untouched" in {c["check"] for c in check_story(r, exp) if not c["ok"]}

    r = copy.deepcopy(report)
    r["incidents"].append({**r["incidents"][0], "incident_id": "x" * 64})
    assert "one incident" in {c["check"] for c in check_story(r, exp) if not c["ok"]}

    # a failed audit, unsigned commitments, or a report not written
    r = copy.deepcopy(report)
    r["audit"]["passed"] = False
    assert "audit of the demo's log passes" in {c["check"] for c in check_story(r, exp) if not c["ok"]}
    r = copy.deepcopy(report)
    r["audit"]["signed_commitments"] = 0
    assert "audit of the demo's log passes" in {c["check"] for c in check_story(r, exp) if not c["ok"]}
    r = copy.deepcopy(report)
    r["audit"]["files"]["png_is_png"] = False
    assert "report written" in {c["check"] for c in check_story(r, exp) if not c["ok"]}


def test_gate_refuse_with_two_workers(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The refusing gate keeps j2 clean: it skips the exploit of the tainted j1-110, so only j1
    is rolled back (and two workers share the partitions)."""
    report, proc = run_demo_cli(kafka_bootstrap, tmp_path / "run", "--gate", "refuse", "--workers", "2")
    delete_run_topics(kafka_bootstrap, report)
    assert report["story_ok"], failed_checks(report)
    assert proc.returncode == 0
    assert report["workers"] == 2 and report["gate"] == "refuse"
    [inc] = report["incidents"]
    assert (inc["root"]["job_id"], inc["verdict"]) == ("j1", "INTERNAL")
    assert inc["contaminated"] == []
    j1_cmds = rollbacks_of(report, "j1")
    assert j1_cmds and all(c["target_checkpoint_id"] == "j1-100" for c in j1_cmds)
    assert any(c["acknowledged_by_seq"] is not None for c in j1_cmds)
    assert rollbacks_of(report, "j2") == []
    j2 = report["jobs"]["j2"]
    assert j2["refused"] == [["j1-110", "PBT_EXPLOIT", 120]]
    assert (j2["status"], j2["incarnation"], j2["rolled_back"]) == ("SUCCEEDED", 0, False)
    assert report["jobs"]["j1"]["incarnation"] >= 1 and report["jobs"]["j1"]["status"] == "SUCCEEDED"
    # two signing workers: the audit still passes with every commitment signed
    au = report["audit"]
    assert au["passed"] and au["signed_commitments"] > 0, au


def test_the_story_on_pytorch(kafka_bootstrap: str, tmp_path: Path) -> None:
    """``traintrace demo --framework torch`` (issue 15): the same story on real PyTorch, every
    checkpoint, load and rollback through ``streams.integrations.torch``; checked the same way."""
    pytest.importorskip("torch")
    work = tmp_path / "run"
    report, proc = run_demo_cli(kafka_bootstrap, work, "--framework", "torch")
    delete_run_topics(kafka_bootstrap, report)
    assert report["story_ok"], failed_checks(report)
    assert proc.returncode == 0 and report["framework"] == "torch"
    [inc] = report["incidents"]
    assert (inc["root"]["job_id"], inc["root"]["onset_step"], inc["verdict"]) == ("j1", 110, "INTERNAL")
    for job, plan in expected()["rollbacks"].items():
        assert plan["target_checkpoint_id"] in [r["checkpoint_id"] for r in report["jobs"][job]["restored"]]
    # the checkpoints are torch files in the cohort's store, the hashes recorded are theirs
    events = [json.loads(line) for line in (work / "events.jsonl").read_text().splitlines()]
    written = [e for e in events if e["type"] == "CheckpointWritten"]
    assert written and all(e["uri"].endswith(f"/torch/{e['checkpoint_id']}.pt") for e in written)
    from streams.client.hashing import hash_file

    for e in written[:5]:
        assert hash_file(e["uri"].removeprefix("file://")) == e["content_hash"]
    assert report["audit"]["passed"]


def test_the_demo_emits_openlineage_that_validates(warn_run, kafka_bootstrap: str, tmp_path: Path) -> None:
    """Issue 16: ``traintrace openlineage --once --transport file`` over the demo's topics; every
    event validates against the OpenLineage 2-0-2 schemas and traintrace's facet schemas, and
    the story is there (j1's divergence, the two rollback plans, the tainted checkpoint)."""
    pytest.importorskip("openlineage.client")
    from tests.unit.test_openlineage import assert_valid

    report, _work, _rc = warn_run
    out = tmp_path / "ol.jsonl"
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    proc = subprocess.run([sys.executable, "-m", "streams", "openlineage", "--once", "--transport", "file",
                           "--path", str(out), "--topic-prefix", report["topics"]["prefix"]],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert len(events) > 20
    assert_valid(events)
    facets = [(e["job"]["name"], k) for e in events for k in e["run"].get("facets", {})]
    assert ("j1", "traintrace_divergence") in facets
    assert {j for j, k in facets if k == "traintrace_plan"} >= {"j1", "j2"}
    tainted = {d["name"] for e in events for d in e.get("outputs", []) + e.get("inputs", [])
               if "traintrace_taint" in d.get("facets", {})}
    assert any(name.endswith("j1-110.npy") or name.endswith("j1-110") for name in tainted), sorted(tainted)[:5]
    ends = {(e["job"]["name"], e["eventType"]) for e in events if e["eventType"] in ("COMPLETE", "ABORT", "FAIL")}
    assert ("j1", "ABORT") in ends and ("j1", "COMPLETE") in ends and ("j6", "COMPLETE") in ends
