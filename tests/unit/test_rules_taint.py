"""SPEC §5, taint rules T1–T3, contamination, UNRECORDED_SHARING and the fixpoint.

``seed()`` is SPEC §12's job A (see core_builders): onset 500, A-480 clean, A-500/A-520 tainted.
"""

from __future__ import annotations

import pytest

from streams.core.decide import IncidentChanged

from .core_builders import (IA, Cohort, analyze, by_jobs, contaminated, content, decisions, iid, incident,
                            secondaries, seed, sharing)

TAINTING_MODES = ["INIT", "MERGE", "DISTILL", "PBT_EXPLOIT", "REFERENCE", "REPLAY", "OTHER"]


def tainted(events, **cfg):
    return analyze(events, **cfg)["tainted_checkpoints"]


# ---------------------------------------------------------------------- T1

@pytest.mark.parametrize("margin,expected", [
    (0, ["A-500", "A-520"]),
    (19, ["A-500", "A-520"]),          # 480 < 500 - 19
    (20, ["A-480", "A-500", "A-520"]),  # 480 >= 500 - 20
])
def test_t1_taint_margin(margin, expected):
    assert tainted(seed().events, taint_margin=margin) == expected


def test_t1_is_by_step_not_by_seq():
    """A-500 is written before the NaN Progress that reveals the onset: still step >= 500."""
    c = Cohort().start("A").ckpt("A", "A-490", 490).ckpt("A", "A-500", 500).progress("A", 500, loss=float("nan"))
    assert tainted(c.events) == ["A-500"]


# ---------------------------------------------------------------------- T2

def test_t2_taints_only_checkpoints_after_the_consumption_seq():
    c = seed().start("B").ckpt("B", "B-400", 400).consume("B", "A-520", 520).ckpt("B", "B-540", 540)
    assert tainted(c.events) == ["A-500", "A-520", "B-540"]


def test_t2_consuming_a_clean_checkpoint_does_not_taint():
    c = seed().start("B").consume("B", "A-480", 400).ckpt("B", "B-540", 540)
    assert tainted(c.events) == ["A-500", "A-520"]


def test_t2_base_checkpoint_is_a_consumption():
    c = seed().start("B", base="A-520").ckpt("B", "B-540", 540).start("C", base="A-480").ckpt("C", "C-540", 540)
    assert tainted(c.events) == ["A-500", "A-520", "B-540"]


def test_t2_restore_is_a_consumption():
    c = seed().start("B").ckpt("B", "B-100", 100).rollback("B", "A-520", 520).ckpt("B", "B-600", 600)
    assert tainted(c.events) == ["A-500", "A-520", "B-600"]


def test_t2_rollback_to_null_reconsumes_the_base():
    """B's base is A-520; RolledBack(null) re-consumes it, so incarnation 1's B-600 is tainted."""
    c = seed().start("B", base="A-520").rollback("B", None).ckpt("B", "B-600", 600)
    assert tainted(c.events) == ["A-500", "A-520", "B-600"]


def test_t2_does_not_cross_into_a_clean_incarnation():
    """B (no base) is tainted in incarnation 0; RolledBack(null) starts clean: B-600 clean."""
    c = (seed().start("B").consume("B", "A-520", 520).ckpt("B", "B-540", 540)
         .rollback("B", None).ckpt("B", "B-600", 600))
    assert tainted(c.events) == ["A-500", "A-520", "B-540"]


@pytest.mark.parametrize("mode", TAINTING_MODES)
def test_t2_every_mode_but_eval_only_taints(mode):
    c = seed().start("B").consume("B", "A-520", 520, mode=mode).ckpt("B", "B-540", 540)
    out = analyze(c.events)
    assert out["tainted_checkpoints"] == ["A-500", "A-520", "B-540"]
    assert contaminated(out, IA) == [("B", 0, "A-520")]


def test_eval_only_never_taints_nor_contaminates():
    c = seed().start("B").consume("B", "A-520", 520, mode="EVAL_ONLY").ckpt("B", "B-540", 540)
    out = analyze(c.events)
    assert out["tainted_checkpoints"] == ["A-500", "A-520"]
    assert contaminated(out, IA) == []
    assert [p["job_id"] for p in out["plans"]] == ["A"]


# ---------------------------------------------------------------------- contamination

def test_contamination_lists_first_consumption_and_path():
    """B first consumes A-500 then A-520 → via A-500; C consumes B's tainted B-540 → path A, B, C."""
    c = (seed().start("B").consume("B", "A-500", 500).consume("B", "A-520", 520).ckpt("B", "B-540", 540)
         .start("C").consume("C", "B-540", 540).ckpt("C", "C-600", 600))
    out = analyze(c.events)
    assert contaminated(out, IA) == [("B", 0, "A-500"), ("C", 0, "B-540")]
    paths = {x["job_id"]: x["path"] for x in incident(out, IA)["contaminated"]}
    assert paths == {"B": ["A", "B"], "C": ["A", "B", "C"]}


def test_contamination_includes_a_later_incarnation_of_the_root_job():
    """A restores its own tainted A-520: A incarnation 1 is contaminated via A-520."""
    c = seed().rollback("A", "A-520", 520).ckpt("A", "A-600", 600)
    out = analyze(c.events)
    assert contaminated(out, IA) == [("A", 1, "A-520")]
    assert out["tainted_checkpoints"] == ["A-500", "A-520", "A-600"]


# ---------------------------------------------------------------------- T3

def test_t3_content_alias_taints_and_counts_as_a_consumption():
    """C-700 copies A-520's bytes (later ts, other job) without recording it: T3 taints C-700,
    T2 (consumption at C-700's seq) taints C-800, C is contaminated via A-520, and an
    UNRECORDED_SHARING alert names C-700. C-650 precedes the alias and stays clean."""
    c = (seed().start("C").ckpt("C", "C-650", 650)
         .ckpt("C", "C-700", 700, content_hash=content("A-520")).ckpt("C", "C-800", 800))
    out = analyze(c.events)
    assert out["tainted_checkpoints"] == ["A-500", "A-520", "C-700", "C-800"]
    assert contaminated(out, IA) == [("C", 0, "A-520")]
    assert sharing(out) == [("C", "C-700")]


def test_t3_same_job_does_not_alias():
    """A, rolled back to A-480, writes A-600 with A-520's bytes: same job, no T3."""
    c = seed().rollback("A", "A-480", 480).ckpt("A", "A-600", 600, content_hash=content("A-520"))
    out = analyze(c.events)
    assert out["tainted_checkpoints"] == ["A-500", "A-520"]
    assert sharing(out) == []


def test_t3_later_or_equal_ts_does_not_alias():
    """C-early has A-520's bytes but is written before A-520 (smaller ts); C-same at the same ts."""
    c = seed(Cohort().start("C").ckpt("C", "C-early", 100, content_hash=content("A-520")))
    ts520 = c.last.ts
    c.ckpt("C", "C-same", 200, content_hash=content("A-520"), ts=ts520)
    for events in (c.events, by_jobs(c.events, ["A", "C"])):
        out = analyze(events)
        assert out["tainted_checkpoints"] == ["A-500", "A-520"]
        assert sharing(out) == []


def test_t3_aliased_checkpoint_is_the_earliest_tainted_copy():
    """A-520 (earliest) and D-copy (later, T3 from A-520) hold the same bytes: C-700 aliases A-520."""
    h = content("A-520")
    c = seed().start("D").ckpt("D", "D-copy", 10, content_hash=h).start("C").ckpt("C", "C-700", 700, content_hash=h)
    out = analyze(c.events)
    assert out["tainted_checkpoints"] == ["A-500", "A-520", "C-700", "D-copy"]
    assert contaminated(out, IA) == [("C", 0, "A-520"), ("D", 0, "A-520")]
    assert sharing(out) == [("C", "C-700"), ("D", "D-copy")]
    assert {a["checkpoint_id"]: a.get("aliased_checkpoint_id") for a in out["alerts"]} == {
        "C-700": "A-520", "D-copy": "A-520"}


@pytest.mark.parametrize("mode", ["EVAL_ONLY", "MERGE"])
def test_recorded_consumption_of_the_content_suppresses_unrecorded_sharing(mode):
    """C read A-520 (any mode, EVAL_ONLY included) before writing its bytes: T3 still taints
    C-700, but the sharing was recorded, so no alert."""
    c = seed().start("C").consume("C", "A-520", 520, mode=mode).ckpt("C", "C-700", 700, content_hash=content("A-520"))
    out = analyze(c.events)
    assert "C-700" in out["tainted_checkpoints"]
    assert contaminated(out, IA) == [("C", 0, "A-520")]
    assert sharing(out) == []


def test_unrecorded_sharing_when_the_consumption_is_not_earlier_in_the_same_incarnation():
    """C-700: consumption recorded only in incarnation 0 → alert; C-800: consumption of its
    content comes after it → alert; C-900: consumption of other content (A-480) → alert."""
    h = content("A-520")
    c = (seed().start("C").consume("C", "A-520", 520, mode="EVAL_ONLY").rollback("C", None)
         .ckpt("C", "C-700", 700, content_hash=h)
         .start("D").ckpt("D", "D-800", 800, content_hash=h).consume("D", "A-520", 520, mode="EVAL_ONLY")
         .start("E").consume("E", "A-480", 480, mode="EVAL_ONLY").ckpt("E", "E-900", 900, content_hash=h))
    assert sharing(analyze(c.events)) == [("C", "C-700"), ("D", "D-800"), ("E", "E-900")]


# ---------------------------------------------------------------------- fixpoint

def _chain() -> Cohort:
    """A → B (MERGE A-520) → C (copy of B-540's bytes, T3) → D (DISTILL from C-700)."""
    return (seed().start("B").consume("B", "A-520", 520).ckpt("B", "B-540", 540)
            .start("C").ckpt("C", "C-700", 700, content_hash=content("B-540"))
            .start("D").consume("D", "C-700", 700, mode="DISTILL").ckpt("D", "D-800", 800))


@pytest.mark.parametrize("order", [["A", "B", "C", "D"], ["D", "C", "B", "A"], ["B", "D", "A", "C"]])
def test_taint_is_a_fixpoint_whatever_the_arrival_order(order):
    """Consumers arrive before the consumed checkpoint exists or is known tainted: same answer."""
    out = analyze(by_jobs(_chain().events, order))
    assert out["tainted_checkpoints"] == ["A-500", "A-520", "B-540", "C-700", "D-800"]
    assert contaminated(out, IA) == [("B", 0, "A-520"), ("C", 0, "B-540"), ("D", 0, "C-700")]
    assert sharing(out) == [("C", "C-700")]


def test_incident_opened_then_widened():
    """Decisions: A's NaN opens the incident; B writing after consuming A-520 widens it."""
    c = seed().start("B").consume("B", "A-520", 520).ckpt("B", "B-540", 540)
    per_event = decisions(c.events)
    changes = [(d.change, d.incident_id) for ds in per_event for d in ds if isinstance(d, IncidentChanged)]
    assert changes[0] == ("OPENED", IA)
    assert [(d.change, d.incident_id) for d in per_event[3] if isinstance(d, IncidentChanged)] == [("OPENED", IA)]
    last = [d for d in per_event[-1] if isinstance(d, IncidentChanged)]
    assert [(d.change, d.incident_id) for d in last] == [("WIDENED", IA)]
    assert "B-540" in last[0].view["tainted_checkpoints"]


def test_alias_via_checkpoint_is_tainted_by_the_incident_that_lists_it():
    """A-520 (IA, earliest) and D-copy (D's own incident ID by T1, plus IA by T3) hold the same
    bytes; C-700 copies them later. SPEC §5 (revision 2): C counts as having consumed *every*
    aliased checkpoint, A-520 and D-copy, and C-700 carries the union {IA, ID}; each incident
    lists C via the first aliased checkpoint (ts, then id) that carries it: IA via A-520, ID via
    D-copy (never via A-520, which ID did not taint)."""
    h = content("A-520")
    c = (seed().start("D").progress("D", 10, loss=float("nan")).ckpt("D", "D-copy", 20, content_hash=h)
         .start("C").ckpt("C", "C-700", 700, content_hash=h))
    out = analyze(c.events)
    assert contaminated(out, IA) == [("C", 0, "A-520"), ("D", 0, "A-520")]
    assert contaminated(out, iid("D", 0, 10)) == [("C", 0, "D-copy")]


# ---------------------------------------------------------------------- T3 is the union (revision 2)

ID = iid("D", 0, 10)


def _two_incident_copies() -> Cohort:
    """A-520 (IA) and D-copy hold the same bytes; D-copy, written later by D, carries ID (T1: D's
    loss is NaN at step 10) and IA (T3 from A-520). C writes C-650 (clean), then C-700 with those
    bytes without recording a consumption, then C-800."""
    h = content("A-520")
    return (seed().start("D").progress("D", 10, loss=float("nan")).ckpt("D", "D-copy", 20, content_hash=h)
            .start("C").progress("C", 600).ckpt("C", "C-650", 650).ckpt("C", "C-700", 700, content_hash=h)
            .ckpt("C", "C-800", 800))


@pytest.mark.parametrize("order", [None, ["C", "D", "A"], ["D", "C", "A"], ["C", "A", "D"]])
def test_t3_union_of_two_aliased_checkpoints_of_different_incidents(order):
    """Whatever the arrival order: C-700 counts as consuming A-520 and D-copy (in that order of
    ts), carries both roots, and T2 passes both on to C-800; C is listed in both incidents, each
    via the first aliased checkpoint carrying it; C's plan names both incidents; one alert."""
    events = _two_incident_copies().events
    out = analyze(events if order is None else by_jobs(events, order))
    assert out["tainted_checkpoints"] == ["A-500", "A-520", "C-700", "C-800", "D-copy"]
    assert contaminated(out, IA) == [("C", 0, "A-520"), ("D", 0, "A-520")]
    assert contaminated(out, ID) == [("C", 0, "D-copy")]
    paths = {x["job_id"]: x["path"] for x in incident(out, ID)["contaminated"]}
    assert paths == {"C": ["D", "C"]}
    p = {p["job_id"]: p for p in out["plans"]}["C"]
    assert (p["action"], p["target_checkpoint_id"], p["incident_ids"]) == ("ROLLBACK", "C-650", sorted([IA, ID]))
    assert sharing(out) == [("C", "C-700"), ("D", "D-copy")]
    assert {a["checkpoint_id"]: a["aliased_checkpoint_id"] for a in out["alerts"]} == {
        "C-700": "A-520", "D-copy": "A-520"}


def test_t3_union_is_attribution_evidence_for_every_aliased_incident():
    """C diverges after writing the copy: EXTERNAL, attributed to both incidents, secondary in both."""
    c = _two_incident_copies().progress("C", 900, loss=float("nan"))
    out = analyze(c.events)
    assert sorted((i["root"]["job_id"], i["verdict"]) for i in out["incidents"]) == [("A", "INTERNAL"),
                                                                                  ("D", "INTERNAL")]
    assert secondaries(out, IA) == [("C", 0, 900)]
    assert secondaries(out, ID) == [("C", 0, 900)]


def test_t3_via_is_the_first_aliased_checkpoint_by_ts_then_id():
    """E-1 and F-1 (same bytes, same ts, both tainted by IA through a MERGE of A-520) are both
    earlier than C-1, which copies them: C is contaminated via E-1 (ts tie, smaller id), even
    when F-1 is folded first; the alert names E-1 too."""
    h = "ab" * 32
    c = seed().start("E").start("F").consume("E", "A-520", 520).consume("F", "A-520", 520)
    c.ckpt("F", "F-1", 600, content_hash=h)
    c.ckpt("E", "E-1", 600, content_hash=h, ts=c.last.ts)
    c.start("C").ckpt("C", "C-1", 700, content_hash=h)
    for events in (c.events, by_jobs(c.events, ["C", "F", "E", "A"])):
        out = analyze(events)
        assert contaminated(out, IA) == [("C", 0, "E-1"), ("E", 0, "A-520"), ("F", 0, "A-520")]
        assert {a["checkpoint_id"]: a["aliased_checkpoint_id"] for a in out["alerts"]} == {"C-1": "E-1"}


def test_t3_an_aliased_checkpoint_tainted_later_widens_the_copy():
    """C-700 copies G-1 (clean when written); G's consumption of A-520 is recorded later, but
    before G-1 by seq: G-1, then C-700 by T3, then C-800 by T2 are tainted; C via G-1."""
    h = "cd" * 32
    c = (seed().start("G").consume("G", "A-520", 520).ckpt("G", "G-1", 600, content_hash=h)
         .start("C").ckpt("C", "C-700", 700, content_hash=h).ckpt("C", "C-800", 800))
    out = analyze(by_jobs(c.events, ["C", "G", "A"]))
    assert out["tainted_checkpoints"] == ["A-500", "A-520", "C-700", "C-800", "G-1"]
    assert contaminated(out, IA) == [("C", 0, "G-1"), ("G", 0, "A-520")]


# ---------------------------------------------------------------------- the root's own incident (revision 2)

def test_the_root_is_contaminated_when_its_tainted_weights_come_back_through_another_job():
    """B merges A-520 and writes B-540; A (still the diverged incarnation) merges B-540 back: A
    incarnation 0 is listed in its own incident via B-540, path A, B, A. Its verdict stays
    INTERNAL (a divergence is never attributed to its own incident) and its plan is unchanged."""
    c = (seed().start("B").consume("B", "A-520", 520).ckpt("B", "B-540", 540)
         .consume("A", "B-540", 530).ckpt("A", "A-560", 560))
    out = analyze(c.events)
    assert contaminated(out, IA) == [("A", 0, "B-540"), ("B", 0, "A-520")]
    paths = {(x["job_id"], x["incarnation"]): x["path"] for x in incident(out, IA)["contaminated"]}
    assert paths == {("A", 0): ["A", "B", "A"], ("B", 0): ["A", "B"]}
    assert incident(out, IA)["verdict"] == "INTERNAL"
    p = {p["job_id"]: p for p in out["plans"]}["A"]
    assert (p["action"], p["target_checkpoint_id"], p["incident_ids"]) == ("ROLLBACK", "A-480", [IA])


def test_the_root_is_contaminated_through_a_content_copy_of_its_own_checkpoint():
    """B copies A-520's bytes unrecorded (B-copy); A later writes A-600 with those bytes: T3
    (B-copy is another job's earlier tainted checkpoint; A-520 is A's own and does not alias), so
    A incarnation 0 is listed via B-copy, and A-600 raises UNRECORDED_SHARING."""
    h = content("A-520")
    c = seed().start("B").ckpt("B", "B-copy", 100, content_hash=h).ckpt("A", "A-600", 600, content_hash=h)
    out = analyze(c.events)
    assert contaminated(out, IA) == [("A", 0, "B-copy"), ("B", 0, "A-520")]
    assert sharing(out) == [("A", "A-600"), ("B", "B-copy")]


def test_the_root_is_not_contaminated_by_its_own_divergence_or_an_eval_only_read():
    """T1 alone is not a consumption; an EVAL_ONLY read of B-540 never contaminates."""
    c = (seed().start("B").consume("B", "A-520", 520).ckpt("B", "B-540", 540)
         .consume("A", "B-540", 530, mode="EVAL_ONLY"))
    assert contaminated(analyze(c.events), IA) == [("B", 0, "A-520")]


def test_the_root_reading_its_own_tainted_checkpoint_back_is_contaminated():
    """Reading: SPEC §5 defines contamination as consuming a checkpoint tainted by the incident,
    so the diverged incarnation merging its own A-520 (no other job involved) is listed too, via
    A-520; its path is just the root."""
    c = seed().consume("A", "A-520", 530, mode="REPLAY").ckpt("A", "A-540", 540)
    out = analyze(c.events)
    assert contaminated(out, IA) == [("A", 0, "A-520")]
    assert incident(out, IA)["contaminated"][0]["path"] == ["A"]
    assert incident(out, IA)["verdict"] == "INTERNAL"
