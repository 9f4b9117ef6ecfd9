"""``traintrace report``: the lineage model read off the folded state, its HTML and PNG, the CLI."""

from __future__ import annotations

import json
import re
import struct

import pytest
from click.testing import CliRunner

from streams.files.archive import LogRecord, write_archive
from streams.cli.main import cli
from streams.codec import Codec
from streams.core.cohorts import CohortLineage
from streams.core.events import event_to_dict, parse_event
from streams.audit.log import fold_order, load
from streams.core.project import aliased_checkpoints
from streams.report import ReportModel, build, lane_status, render_html, render_png, render_svg
from tests.unit.vectors import load_expected, load_lines, scenarios_dir, vector_names

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def vector(name: str) -> str:
    return str(scenarios_dir() / f"{name}.jsonl")


def model_of(name: str) -> ReportModel:
    return build(load(vector(name)))


def reference_fold(name: str) -> CohortLineage:
    """The fold ``analyze`` does, done independently of the report."""
    lineage = CohortLineage()
    for item in fold_order(load(vector(name))):
        if item.event is not None:
            lineage.fold(item.event)
    lineage.finish_input()
    lineage.final_state()
    return lineage


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


# ------------------------------------------------------------------------------------ the model


@pytest.mark.parametrize("name", vector_names())
def test_model_matches_the_folded_state(name):
    """For every vector: tainted checkpoints, consumption edges and rollback targets are the
    fold's own, cohort by cohort, and together they give the expected final state."""
    model = model_of(name)
    ref = reference_fold(name)
    expected = load_expected(name)
    assert sorted(model.cohorts) == sorted(ref.cohorts)
    tainted_all: set[str] = set()
    for cohort_id, cm in model.cohorts.items():
        eng = ref.cohorts[cohort_id]
        final = eng.final_state()
        assert cm.tainted_checkpoints == final["tainted_checkpoints"]
        tainted_all.update(cm.tainted_checkpoints)
        # one lane per job, one row per incarnation
        assert [ln.job_id for ln in cm.lanes] == sorted(eng.state.jobs)
        for ln in cm.lanes:
            assert [sp.number for sp in ln.incarnations] == sorted(eng.state.jobs[ln.job_id].incarnations)
            assert all(sp.start_step <= sp.end_step for sp in ln.incarnations)
        # edges = the state's consumptions (base, restore, consume), same source, mode and seq
        got = sorted((e.consumer_job_id, e.consumer_incarnation, e.seq, e.source_checkpoint_id, e.mode, e.kind)
                     for e in cm.edges if e.kind != "alias")
        want = sorted((job.job_id, inc.number, c.seq, c.checkpoint_id, c.mode, c.kind)
                      for job in eng.state.jobs.values() for inc in job.incarnations.values()
                      for c in inc.consumptions.values())
        assert got == want
        for e in cm.edges:
            src = eng.state.checkpoints.get(e.source_checkpoint_id)
            assert e.carries_taint == bool(e.tainting and src is not None and src.sources)
            assert e.tainting == (e.mode != "EVAL_ONLY")
        # aliases = the UNRECORDED_SHARING alerts, an edge from every aliased checkpoint (SPEC §5
        # T3: the copy counts as consuming each), the first of which the alert names
        alerts = [a for a in final["alerts"] if a["kind"] == "UNRECORDED_SHARING" and a.get("aliased_checkpoint_id")]
        assert sorted((e.consumer_job_id, e.source_checkpoint_id) for e in cm.edges if e.kind == "alias") == \
            sorted((a["job_id"], src.id) for a in alerts
                   for src in aliased_checkpoints(eng.state, eng.state.checkpoints[a["checkpoint_id"]]))
        for a in alerts:
            assert cm.checkpoint(a["checkpoint_id"]).aliased[0] == a["aliased_checkpoint_id"]
        # targets = the final plans' targets, and the target checkpoints are marked
        plans = {p["job_id"]: p for p in final["plans"]}
        assert cm.targets == {j: p["target_checkpoint_id"] for j, p in plans.items() if p["target_checkpoint_id"]}
        for job_id, ck_id in cm.targets.items():
            mark = cm.checkpoint(ck_id)
            if mark is not None:  # a RESTART_FROM_BASE target may be unrecorded
                assert job_id in mark.target_of
        assert {ln.job_id: (ln.plan or {}).get("action") for ln in cm.lanes if ln.plan} == \
            {j: p["action"] for j, p in plans.items()}
        # divergences: one mark per diverged incarnation, roots = the incidents' roots
        roots = {(i["root"]["job_id"], i["root"]["incarnation"], i["root"]["onset_step"]) for i in final["incidents"]}
        assert {(d.job_id, d.incarnation, d.onset_step) for d in cm.divergences if d.root} == roots
        assert cm.final == final
    assert sorted(tainted_all) == expected["tainted_checkpoints"]


def test_seed_example_model():
    """SPEC §12: A diverges at 500; B took A-520 (tainted) and A-480 (clean); C took A-480 only."""
    model = model_of("01_seed_example")
    assert list(model.cohorts) == ["c1"]
    assert model.events == 180 and model.origin == "jsonl"
    cm = model.cohorts["c1"]
    assert [ln.job_id for ln in cm.lanes] == ["A", "B", "C"]
    assert all(ln.rows == 1 for ln in cm.lanes)
    assert cm.tainted_checkpoints == ["A-500", "A-520", "B-540", "B-560"]
    assert {ck.checkpoint_id for ln in cm.lanes for ck in ln.checkpoints if not ck.tainted} >= {"A-480", "C-600"}
    edges = {(e.source_checkpoint_id, e.consumer_job_id): e for e in cm.edges}
    assert set(edges) == {("A-480", "B"), ("A-520", "B"), ("A-480", "C")}
    assert edges[("A-520", "B")].carries_taint and edges[("A-520", "B")].source_step == 520
    assert not edges[("A-480", "B")].carries_taint and edges[("A-480", "B")].consumer_step == 400
    assert not edges[("A-480", "C")].carries_taint
    assert cm.targets == {"A": "A-480", "B": "B-500"}
    assert cm.checkpoint("A-480").target_of == ["A"]
    [d] = cm.divergences
    assert (d.job_id, d.incarnation, d.onset_step, d.verdict, d.root) == ("A", 0, 500, "INTERNAL", True)
    assert d.incident_ids == [cm.final["incidents"][0]["incident_id"]]
    assert cm.rollbacks == []
    assert cm.lane("C").plan is None
    a = cm.lane("A").incarnations[0]
    assert (a.start_step, a.end_step, a.onset_step, a.abandoned_from) == (0, 520, 500, None)
    assert len(a.progress) == 51 and all(isinstance(loss, float) for _s, loss in a.progress)
    counts = cm.counts()
    assert counts["lanes"] == 3 and counts["consumptions"] == 3 and counts["tainting_consumptions"] == 1
    assert counts["incidents"] == 1 and counts["plans"] == 2 and counts["targets"] == 2


def test_rollback_incarnations_model():
    """08: A rolled back to its own A-480 (the rest of incarnation 0 is abandoned); C restarted
    from B-560, a tainted checkpoint of another job (all of C's incarnation 0 is abandoned)."""
    cm = model_of("08_rollback_incarnations").cohorts["c1"]
    a, b, c = cm.lane("A"), cm.lane("B"), cm.lane("C")
    assert (a.rows, b.rows, c.rows) == (2, 1, 2)
    a0, a1 = a.incarnations
    assert a0.in_ancestry and a0.abandoned_from == 480 and a1.abandoned_from is None
    assert a1.start_step == 480 and a1.start_kind == "restore"
    assert cm.checkpoint("A-520").abandoned and not cm.checkpoint("A-480").abandoned
    c0, c1 = c.incarnations
    assert not c0.in_ancestry and c0.fully_abandoned and c1.start_step == 560
    assert cm.checkpoint("C-300").abandoned and cm.checkpoint("C-400").abandoned
    rbs = {rb.job_id: rb for rb in cm.rollbacks}
    assert (rbs["A"].from_incarnation, rbs["A"].to_incarnation, rbs["A"].restored_checkpoint_id,
            rbs["A"].restored_job_id, rbs["A"].resumed_step, rbs["A"].from_step) == (0, 1, "A-480", "A", 480, 520)
    assert (rbs["C"].restored_checkpoint_id, rbs["C"].restored_job_id, rbs["C"].resumed_step) == ("B-560", "B", 560)
    restore = [e for e in cm.edges if e.kind == "restore"]
    assert {(e.source_checkpoint_id, e.consumer_job_id, e.consumer_incarnation, e.carries_taint) for e in restore} == \
        {("A-480", "A", 1, False), ("B-560", "C", 1, True)}
    assert cm.tainted_checkpoints == ["A-520", "B-560", "C-600-i1"]
    assert cm.targets == {"B": "B-510"}
    assert c.plan["action"] == "RESTART_FROM_SCRATCH" and a.plan is None


def test_from_scratch_model():
    """16: Y's restart from scratch is drawn as a restart from the pretrained model (a row that
    starts at step 0 like a job's first, no consumption edge, from_scratch on its rollback mark);
    Z's plain null restore re-consumes X-300 (an INIT edge of kind base into incarnation 1)."""
    cm = model_of("16_from_scratch").cohorts["c16"]
    rbs = {rb.job_id: rb for rb in cm.rollbacks}
    assert (rbs["Y"].from_scratch, rbs["Y"].restored_checkpoint_id, rbs["Y"].resumed_step) == (True, None, 0)
    assert rbs["Y"].restored_label == "pretrained model (from scratch)"
    assert (rbs["Z"].from_scratch, rbs["Z"].restored_label) == (False, "base")
    y1 = cm.lane("Y").incarnations[1]
    assert (y1.start_kind, y1.start_step, y1.in_ancestry) == ("scratch", 0, True)
    assert not cm.lane("Y").incarnations[0].in_ancestry
    into = {(e.consumer_job_id, e.consumer_incarnation): (e.source_checkpoint_id, e.kind, e.carries_taint)
            for e in cm.edges}
    assert ("Y", 1) not in into and into[("Z", 1)] == ("X-300", "base", True)
    assert cm.lane("Y").plan is None and cm.lane("Z").plan["action"] == "RESTART_FROM_SCRATCH"
    assert lane_status(cm.lane("Y"), cm.rollbacks)[0][0] == "restarted from scratch → pretrained base-7b (inc 1)"
    assert "(pretrained, from scratch)" in render_html(model_of("16_from_scratch"))


def test_every_aliased_checkpoint_is_an_alias_edge(tmp_path):
    """T3 union: C-700 copies A-520 (IA) and D-copy (ID): two alias edges, the mark lists both."""
    lines = [
        {"type": "JobStarted", "job_id": "A", "seq": 0, "incarnation": 0, "ts": 1, "cohort_id": "c",
         "base_model": "m", "base_checkpoint_id": None, "config_hash": None},
        {"type": "Progress", "job_id": "A", "seq": 1, "incarnation": 0, "ts": 2, "step": 500, "epoch": 0,
         "loss": float("nan"), "grad_norm": None, "lr": None},
        {"type": "CheckpointWritten", "job_id": "A", "seq": 2, "incarnation": 0, "ts": 3, "checkpoint_id": "A-520",
         "step": 520, "epoch": 0, "content_hash": "h", "uri": "u"},
        {"type": "JobStarted", "job_id": "D", "seq": 0, "incarnation": 0, "ts": 4, "cohort_id": "c",
         "base_model": "m", "base_checkpoint_id": None, "config_hash": None},
        {"type": "Progress", "job_id": "D", "seq": 1, "incarnation": 0, "ts": 5, "step": 10, "epoch": 0,
         "loss": float("nan"), "grad_norm": None, "lr": None},
        {"type": "CheckpointWritten", "job_id": "D", "seq": 2, "incarnation": 0, "ts": 6, "checkpoint_id": "D-copy",
         "step": 20, "epoch": 0, "content_hash": "h", "uri": "u"},
        {"type": "JobStarted", "job_id": "C", "seq": 0, "incarnation": 0, "ts": 7, "cohort_id": "c",
         "base_model": "m", "base_checkpoint_id": None, "config_hash": None},
        {"type": "CheckpointWritten", "job_id": "C", "seq": 1, "incarnation": 0, "ts": 8, "checkpoint_id": "C-700",
         "step": 700, "epoch": 0, "content_hash": "h", "uri": "u"},
    ]
    src = tmp_path / "t3.jsonl"
    src.write_text("".join(json.dumps(d) + "\n" for d in lines))
    cm = build(load(str(src))).cohorts["c"]
    assert sorted((e.source_checkpoint_id, e.consumer_job_id) for e in cm.edges if e.kind == "alias") == [
        ("A-520", "C"), ("A-520", "D"), ("D-copy", "C")]
    assert cm.checkpoint("C-700").aliased == ["A-520", "D-copy"] and cm.checkpoint("C-700").aliases == "A-520"
    assert "same content as A-520, D-copy" in render_html(build(load(str(src))))


def test_pbt_cohort_model():
    cm = model_of("14_pbt_cohort").cohorts["c31"]
    assert len(cm.lanes) == 10 and cm.lane("j31-002").rows == 3
    assert len(cm.divergences) == 9 and sum(d.root for d in cm.divergences) == 2
    assert {d.verdict for d in cm.divergences if not d.root} == {"EXTERNAL"}
    assert sum(1 for e in cm.edges if e.kind == "alias") == 3
    assert any(not e.tainting for e in cm.edges)  # EVAL_ONLY reads are edges too, never tainting
    assert all(not e.carries_taint for e in cm.edges if not e.tainting)
    assert len(cm.targets) == 7
    assert len(cm.rollbacks) == 8


# --------------------------------------------------------------------------- HTML, SVG and PNG


_EXTERNAL_REF = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.I)
_NON_LOCAL_URL = re.compile(r"""url\(\s*["']?(?!#)""", re.I)  # url(#clip) is the SVG's own


def assert_self_contained(page: str) -> None:
    assert not _EXTERNAL_REF.search(page)
    assert not _NON_LOCAL_URL.search(page)
    low = page.lower()
    for needle in ("<script", "<link", "@import", "<img", "<iframe", "<object", "<embed"):
        assert needle not in low, needle


def test_html_is_self_contained_and_holds_the_summary():
    model = model_of("01_seed_example")
    page = render_html(model)
    assert page.startswith("<!DOCTYPE html>")
    assert_self_contained(page)
    assert page.count("<svg") == 1 and "</svg>" in page
    assert "<?xml" not in page and "<!DOCTYPE svg" not in page
    cm = model.cohorts["c1"]
    for inc in cm.final["incidents"]:
        assert inc["incident_id"] in page
    for ck in cm.tainted_checkpoints:
        assert f"<code>{ck}</code>" in page
    assert "ROLLBACK" in page and "A-480" in page and "B-500" in page
    assert "01_seed_example.jsonl" in page and "180 events" in page
    assert "Audit" not in page


def test_html_audit_block_and_several_cohorts():
    model = model_of("14_pbt_cohort")
    audit = {"passed": False, "checks": [{"name": "commitments", "passed": True, "detail": "12 roots"},
                                         {"name": "manifests", "passed": False, "detail": "v3 differs"}]}
    page = render_html(model, audit=audit, audit_path="out/audit.json", audit_href="audit.json")
    assert_self_contained(page)
    assert "FAILED" in page and "commitments" in page and "v3 differs" in page
    assert 'href="audit.json"' in page
    for inc in model.cohorts["c31"].final["incidents"]:
        assert inc["incident_id"] in page
    for a in model.cohorts["c31"].final["alerts"]:
        assert a["checkpoint_id"] in page


def test_html_audit_block_of_an_audit_report():
    """The shape ``traintrace audit --json`` writes (``AuditReport.as_dict()``): each check's
    verdict (PASS / FAIL / SKIPPED), counts, first failures and notes."""
    model = model_of("08_rollback_incarnations")
    check = {"title": "t", "warned": 0, "warnings": [], "notes": []}
    audit = {"source": "log.avro", "passed": False, "verdict": "FAIL", "events": 42, "seconds": 0.5, "checks": [
        {**check, "name": "chains", "verdict": "PASS", "passed": True, "checked": 42, "failed": 0, "failures": [],
         "notes": ["3 job(s), 42 event(s)"]},
        {**check, "name": "commands", "verdict": "FAIL", "passed": False, "checked": 4, "failed": 7,
         "failures": [{"what": "command differs", "job_id": "A", "seq": 9, "where": "control[0]@3",
                       "field": "target_checkpoint_id", "expected": "A-480", "found": "A-470"}] * 6},
        {**check, "name": "commitments", "verdict": "SKIPPED", "passed": True, "checked": 0, "failed": 0,
         "failures": [], "notes": ["the log has no commitments"]}]}
    page = render_html(model, audit=audit)
    block = page[page.index('<section class="audit'):]
    block = block[:block.index("</section>")]
    assert "FAILED" in block and "3 check(s), 1 passed, 1 failed, 1 skipped" in block
    assert '<span class="tag skip">SKIPPED</span>' in block and '<span class="tag fail">FAIL</span>' in block
    assert "<td>42</td>" in block and "<td>7</td>" in block
    assert "job A, seq 9, at control[0]@3: command differs — target_checkpoint_id: expected A-480, found A-470" \
        in block.replace("&#x27;", "'")
    assert "… 2 more failure(s)" in block and "the log has no commitments" in block
    assert_self_contained(page)

    cm = model.cohorts[model.order()[0]]
    png = render_png(cm, audit=audit)
    assert png.startswith(PNG_SIGNATURE) and png != render_png(cm)


def test_rollback_targets_of_a_finished_run_are_marked():
    """08: once the rollbacks are done the final plans are gone; the restored checkpoints are
    still drawn as the rollback targets."""
    cm = model_of("08_rollback_incarnations").cohorts["c1"]
    assert [(rb.job_id, rb.restored_checkpoint_id) for rb in cm.rollbacks] == [("A", "A-480"), ("C", "B-560")]
    assert cm.checkpoint("B-560").restored_by == ["C"] and not cm.checkpoint("B-560").is_target
    for rb in cm.rollbacks:
        if rb.restored_checkpoint_id:
            mark = cm.checkpoint(rb.restored_checkpoint_id)
            assert mark is not None and rb.job_id in mark.restored_by and mark.marked_target


def test_svg_inlines():
    cm = model_of("08_rollback_incarnations").cohorts["c1"]
    svg, info = render_svg(cm, summary=False)
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert 'width="100%"' in svg and "<metadata>" not in svg
    assert info.x_scale == "linear"


@pytest.mark.parametrize("name", ["01_seed_example", "08_rollback_incarnations", "14_pbt_cohort"])
def test_png(name):
    model = model_of(name)
    cohort = model.order()[0]
    data = render_png(model.cohorts[cohort], source=f"{name}.jsonl", events=model.events)
    assert data.startswith(PNG_SIGNATURE)
    w, h = png_size(data)
    assert 1000 <= w <= 2500 and 300 <= h <= 4000
    assert 10_000 < len(data) < 5_000_000


def test_threads_drawing_at_once_all_succeed():
    """The live page draws in a thread of its own while the demo draws its report: matplotlib is
    not thread-safe (without the drawing lock this failed ``FT_Load_Glyph``, "invalid outline",
    and mathtext parse errors on the legend's ``$?$`` marker, which vector 06 draws)."""
    import threading

    cm = next(c for c in model_of("06_guard_untraceable").cohorts.values() if any(not e.resolved for e in c.edges))
    start, errors = threading.Barrier(3), []

    def draw(k: int) -> None:
        start.wait()
        for i in range(5):
            try:
                (render_svg if (i + k) % 2 else render_png)(cm, source="06", events=1)
            except Exception as exc:  # noqa: BLE001 - the assertion names it
                errors.append(repr(exc))

    threads = [threading.Thread(target=draw, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def test_png_wildly_different_step_ranges_uses_a_symlog_axis(tmp_path):
    """A short job next to a very long one: the short one is kept readable."""
    lines = [
        {"type": "JobStarted", "job_id": "short", "seq": 0, "incarnation": 0, "ts": 1, "cohort_id": "c",
         "base_model": "m", "base_checkpoint_id": None, "config_hash": None},
        {"type": "JobStarted", "job_id": "long", "seq": 0, "incarnation": 0, "ts": 2, "cohort_id": "c",
         "base_model": "m", "base_checkpoint_id": None, "config_hash": None},
        {"type": "CheckpointWritten", "job_id": "short", "seq": 1, "incarnation": 0, "ts": 3, "checkpoint_id": "s-20",
         "step": 20, "epoch": 0, "content_hash": "a" * 64, "uri": "x"},
        {"type": "CheckpointWritten", "job_id": "long", "seq": 1, "incarnation": 0, "ts": 4,
         "checkpoint_id": "l-90000", "step": 90000, "epoch": 9, "content_hash": "b" * 64, "uri": "x"},
    ]
    path = tmp_path / "ranges.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    cm = build(load(str(path))).cohorts["c"]
    _svg, info = render_svg(cm)
    assert info.x_scale.startswith("symlog")
    assert render_png(cm).startswith(PNG_SIGNATURE)


# ------------------------------------------------------------------------ control topic (archive)


def _archive_with_commands(tmp_path, name: str = "01_seed_example") -> tuple[str, dict]:
    codec = Codec()
    recs = []
    for i, line in enumerate(load_lines(name)):
        ev = parse_event(line)
        recs.append(LogRecord("events", 0, i, ev.ts, ev.job_id, codec.encode_event(event_to_dict(ev))))
    plans = {p["job_id"]: p for p in reference_fold(name).cohorts["c1"].plans.values()}
    a = plans["A"]
    old = {"command_id": "f" * 64, "job_id": "A", "cohort_id": "c1", "incarnation": 0, "action": "RESTART_FROM_BASE",
           "target_checkpoint_id": None, "target_step": None, "incident_ids": a["incident_ids"], "supersedes": None,
           "issued_ts": 1, "commitment_root": None}
    new = {"command_id": a["command_id"], "job_id": "A", "cohort_id": "c1", "incarnation": 0, "action": "ROLLBACK",
           "target_checkpoint_id": "A-480", "target_step": 480, "incident_ids": a["incident_ids"],
           "supersedes": "f" * 64, "issued_ts": 2, "commitment_root": None}
    for off, value in enumerate((old, new)):
        recs.append(LogRecord("control", 0, off, value["issued_ts"], "A", codec.encode_record("RollbackCommand", value)))
    path = str(tmp_path / "log.avro")
    write_archive(path, recs, {"topics": {"events": "lineage.events", "control": "lineage.control"}})
    return path, a


def test_archive_commands_from_the_control_topic(tmp_path):
    path, plan_a = _archive_with_commands(tmp_path)
    model = build(load(path))
    assert model.origin == "archive" and model.control_records == 2 and model.events == 180
    cm = model.cohorts["c1"]
    assert cm.tainted_checkpoints == ["A-500", "A-520", "B-540", "B-560"]
    first, second = cm.commands
    assert (first["action"], first["in_force"], first["matches_plan"]) == ("RESTART_FROM_BASE", False, False)
    assert (second["action"], second["target_checkpoint_id"], second["in_force"], second["matches_plan"]) == \
        ("ROLLBACK", "A-480", True, True)
    page = render_html(model)
    assert_self_contained(page)
    assert "Commands issued on the control topic (2)" in page and "superseded" in page and "in force" in page


# ----------------------------------------------------------------------------------------- CLI


def invoke(*args: str):
    return CliRunner().invoke(cli, ["report", *args])


def test_cli_round_trip(tmp_path):
    out = tmp_path / "r" / "lineage.html"
    audit = tmp_path / "audit.json"
    audit.write_text(json.dumps({"passed": True, "checks": [{"name": "replay", "passed": True, "detail": "ok"}]}))
    result = invoke(vector("01_seed_example"), "--out", str(out), "--audit", str(audit), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["html"] == str(out) and summary["png"] == {"c1": str(tmp_path / "r" / "lineage.png")}
    assert summary["events"] == 180 and summary["audit"] == {"path": str(audit), "passed": True}
    c1 = summary["cohorts"]["c1"]
    assert (c1["lanes"], c1["tainted_checkpoints"], c1["consumptions"], c1["plans"], c1["incidents"]) == (3, 4, 3, 2, 1)
    page = out.read_text(encoding="utf-8")
    assert_self_contained(page)
    assert "PASSED" in page and 'href="../audit.json"' in page
    assert (tmp_path / "r" / "lineage.png").read_bytes().startswith(PNG_SIGNATURE)


def test_cli_png_per_cohort_and_cohort_choice(tmp_path):
    both = tmp_path / "both.jsonl"
    both.write_text((scenarios_dir() / "01_seed_example.jsonl").read_text()
                    + (scenarios_dir() / "14_pbt_cohort.jsonl").read_text())
    result = invoke(str(both), "--out", str(tmp_path / "all.html"), "--png", str(tmp_path / "lineage.png"), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["png"] == {"c1": str(tmp_path / "lineage-c1.png"), "c31": str(tmp_path / "lineage-c31.png")}
    assert summary["cohort_order"] == ["c31", "c1"]  # largest first
    page = (tmp_path / "all.html").read_text(encoding="utf-8")
    assert page.count("<svg") == 2 and 'id="cohort-c1"' in page and 'id="cohort-c31"' in page
    for p in summary["png"].values():
        assert open(p, "rb").read(8) == PNG_SIGNATURE

    result = invoke(str(both), "--cohort", "c1", "--out", str(tmp_path / "one.html"), "--no-png", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert list(summary["cohorts"]) == ["c1"] and summary["png"] == {}
    assert summary["cohort_order"] == ["c1"]
    assert (tmp_path / "one.html").read_text(encoding="utf-8").count("<svg") == 1


def test_cli_archive_source(tmp_path):
    path, _ = _archive_with_commands(tmp_path)
    result = invoke(path, "--out", str(tmp_path / "a.html"), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["origin"] == "archive" and summary["cohorts"]["c1"]["commands"] == 2


@pytest.mark.parametrize("setup, args, message", [
    (None, ["{tmp}/missing.jsonl"], "cannot read"),
    ("bad", ["{tmp}/bad.jsonl"], "bad.jsonl:2: field 'job_id'"),
    ("corrupt", ["{tmp}/corrupt.avro"], "corrupt.avro"),
    (None, ["{seed}", "--cohort", "nope"], "cohort 'nope' is not in"),
    ("badaudit", ["{seed}", "--audit", "{tmp}/audit.json"], "audit"),
])
def test_cli_errors_exit_2_with_one_line(tmp_path, setup, args, message):
    if setup == "bad":
        first = (scenarios_dir() / "01_seed_example.jsonl").read_text().splitlines()[0]
        (tmp_path / "bad.jsonl").write_text(first + "\n" + '{"type": "Progress", "seq": 1}\n')
    elif setup == "corrupt":
        (tmp_path / "corrupt.avro").write_bytes(b"Obj\x01" + b"\x00" * 40)
    elif setup == "badaudit":
        (tmp_path / "audit.json").write_text("[not json")
    args = [a.format(tmp=tmp_path, seed=vector("01_seed_example")) for a in args]
    result = invoke(*args, "--out", str(tmp_path / "x.html"))
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error:") and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "x.html").exists()


# ------------------------------------------------------------- dead letters, layout, the audit's signatures


def _log_with_dead_letters():
    """13_duplicates through the simulated pipeline (its conflicting duplicate is rejected by the
    fold and dead-lettered), plus one record on the events topic that does not decode."""
    from streams.testing.simulate import simulate_pipeline

    log = load(vector("13_duplicates"))
    n = len(log.topic("events"))
    log.add(LogRecord("events", 0, n, 1_760_000_000_000, "B", b"\x00junk"))
    return simulate_pipeline(log)


def test_dead_letters_are_listed(tmp_path):
    log = _log_with_dead_letters()
    model = build(log)
    rows = {d["original_offset"]: d for d in model.dead_letters}
    assert len(model.dead_letters) == len(log.topic("dlq")) == 2 and model.counts()["dead_letters"] == 2
    junk = rows[len(log.topic("events")) - 1]
    assert (junk["original_topic"], junk["original_partition"], junk["original_key"]) == ("lineage.events", 0, "B")
    assert junk["error_kind"] and junk["reason"] and junk["job_id"] is None
    dup = next(d for d in model.dead_letters if d["error_kind"] == "CONFLICTING_DUPLICATE")
    assert (dup["job_id"], dup["seq"], dup["type"]) == ("B", 3, "Progress") and "('B', seq 3)" in dup["reason"]

    page = render_html(model)
    assert_self_contained(page)
    assert '<a href="#dead-letters">2 dead letter(s)</a>' in page
    section = page[page.index('<section id="dead-letters">'):]
    section = section[:section.index("</section>")]
    assert "Dead letters (2)" in section
    for d in model.dead_letters:
        assert f"<td>{d['position']}</td>" in section
        assert f"<td>lineage.events[0]@{d['original_offset']}</td>" in section
        assert f"<td>{d['error_kind']}</td>" in section
    assert "B seq 3 Progress" in section and "CONFLICTING_DUPLICATE: a different event already holds" in section
    # an events file has no dead-letter topic: no section
    assert "dead-letters" not in render_html(model_of("01_seed_example"))

    # through the CLI, from an archive
    topics = ("events", "input", "control", "manifests", "commitments", "dlq")
    path = tmp_path / "log.avro"
    write_archive(str(path), [r for t in topics for r in log.topic(t)], {"topics": {t: f"lineage.{t}" for t in topics}})
    result = invoke(str(path), "--out", str(tmp_path / "r.html"), "--no-png", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["dead_letters"] == 2
    assert "Dead letters (2)" in (tmp_path / "r.html").read_text(encoding="utf-8")


def _css(page: str) -> str:
    return page[page.index("<style>") + 7:page.index("</style>")]


def test_layout_has_no_fixed_narrow_column_and_tables_scroll():
    """At a laptop's width the picture must not be squeezed into a column beside the tables:
    no width, flex basis or maximum width in pixels (outside a wide-window media query), the
    picture comes first at the page's width, and every table scrolls sideways in its own box
    with cells that do not wrap (ids stay whole)."""
    page = render_html(model_of("14_pbt_cohort"))
    css = _css(page)
    narrow = re.sub(r"@media[^{]*\{(?:[^{}]*\{[^{}]*\})*[^{}]*\}", "", css)  # the wide-window rules
    assert "@media (min-width: 2100px)" in css
    assert not re.search(r"(?<![\w-])(width|max-width|flex-basis)\s*:\s*[\d.]+px", narrow)
    assert not re.search(r"(?<![\w-])flex\s*:[^;}]*px", narrow)
    assert "<aside" not in page
    rule = lambda sel: re.search(re.escape(sel) + r"\s*\{([^}]*)\}", narrow).group(1)  # noqa: E731
    assert "display:block" in rule(".layout")
    assert "overflow-x:auto" in rule(".tscroll")
    assert "white-space:nowrap" in rule("th, td")
    assert "white-space:nowrap" in rule("code, .nw")
    # the figure first, then the panels; every table in a scrolling box
    section = page[page.index('<section id="cohort-c31">'):]
    assert section.index("<figure>") < section.index('<div class="panels">') < section.index("Incidents (")
    assert page.count("<table>") == page.count('<div class="tscroll"><table>') > 5
    # free text wraps between ids, never inside one
    assert ('<td class="wrap"><span class="nw">j31-000</span> → <span class="nw">j31-005</span> → '
            '<span class="nw">j31-000</span></td>') in page
    assert "word-break" not in css and "break-all" not in css


def test_audit_block_says_what_was_established_about_signatures(tmp_path):
    from streams.audit.run import audit as run_audit
    from streams.report import audit_summary
    from streams.signing import CommitmentSigner, generate_key, key_id
    from streams.testing.simulate import simulate_pipeline

    key = generate_key()
    log = simulate_pipeline(vector("01_seed_example"), CommitmentSigner(key))
    model = build(log)

    def block(audit: dict) -> str:
        page = render_html(model, audit=audit)
        b = page[page.index('<section class="audit'):]
        return b[:b.index("</section>")]

    unchecked = run_audit(log).as_dict()
    n = next(c for c in unchecked["checks"] if c["name"] == "commitments")["checked"]
    b = block(unchecked)
    assert '<span class="tag warn">signatures NOT checked</span>' in b
    assert (f"PASS — {n} commitments recompute; signatures NOT checked "
            f"(no <span class=\"nw\">--trusted-keys):</span> "
            f"{n} signed, 0 unsigned") in b
    assert "signatures verified" not in b
    line = audit_summary(unchecked)[0]
    assert "commitments PASS" in line and "(signatures NOT checked)" in line

    verified = run_audit(log, trusted_keys={key_id(key): key.public_key()}).as_dict()
    b = block(verified)
    assert f'<span class="tag pass">{n} verified</span>' in b and "NOT checked" not in b
    assert f"PASS — {n} commitments recompute, {n} signatures verified" in b
    assert f"({n} signatures verified)" in audit_summary(verified)[0]
