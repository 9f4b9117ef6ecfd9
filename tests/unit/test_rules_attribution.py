"""SPEC §6, attribution: INTERNAL, EXTERNAL, INDETERMINATE, recomputed as evidence arrives.

``seed()`` is SPEC §12's job A (incident IA, onset 500; A-520 tainted, A-480 clean).
"""

from __future__ import annotations

from streams.core.decide import IncidentChanged

from .core_builders import (IA, Cohort, analyze, by_jobs, contaminated, content, decisions, halts, iid, plans,
                            roots, secondaries, seed)

NAN = float("nan")
IC = iid("C", 0, 350)


def with_c(c: Cohort) -> Cohort:
    """An independent root: C diverges at 350 (INTERNAL); C-300 clean, C-400 tainted."""
    return c.start("C").ckpt("C", "C-300", 300).progress("C", 350, loss=NAN).ckpt("C", "C-400", 400)


def test_internal_root():
    out = analyze(seed().events)
    assert roots(out) == [("A", 0, 500, "INTERNAL")]
    assert out["incidents"][0]["incident_id"] == IA


def test_external_is_secondary_in_the_right_incident_and_opens_none():
    """B consumed C's tainted C-400 (not A's) before its onset 300: EXTERNAL to IC only."""
    c = with_c(seed()).start("B").consume("B", "C-400", 200).progress("B", 300, loss=NAN)
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL"), ("C", 0, 350, "INTERNAL")]
    assert iid("B", 0, 300) not in [i["incident_id"] for i in out["incidents"]]
    assert secondaries(out, IC) == [("B", 0, 300)]
    assert secondaries(out, IA) == []


def test_external_attributed_to_every_incident_that_tainted_a_consumption():
    c = with_c(seed()).start("B").consume("B", "C-400", 200).consume("B", "A-520", 210).progress("B", 300, loss=NAN)
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL"), ("C", 0, 350, "INTERNAL")]
    assert secondaries(out, IC) == [("B", 0, 300)]
    assert secondaries(out, IA) == [("B", 0, 300)]


def test_indeterminate_when_a_pre_onset_source_is_unresolved():
    c = seed().start("B").consume("B", "A-480", 100).consume("B", "X-missing", 200).progress("B", 300, loss=NAN)
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL"), ("B", 0, 300, "INDETERMINATE")]
    assert halts(out) == [("B", "UNTRACEABLE_SOURCE")]


def test_tainted_beats_unresolved():
    c = seed().start("B").consume("B", "X-missing", 100).consume("B", "A-520", 200).progress("B", 300, loss=NAN)
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL")]
    assert secondaries(out, IA) == [("B", 0, 300)]


def test_unresolved_eval_only_does_not_make_it_indeterminate():
    c = Cohort().start("B").consume("B", "X-missing", 100, mode="EVAL_ONLY").progress("B", 300, loss=NAN)
    out = analyze(c.events)
    assert roots(out) == [("B", 0, 300, "INTERNAL")]
    assert halts(out) == [("B", "UNTRACEABLE_SOURCE")]


def test_consumption_after_the_first_progress_at_onset_does_not_count():
    """B reports step 350 (≥ onset 300), then consumes A-520, then reports onset 300: the
    consumption is after the cut → INTERNAL; B is still contaminated by IA, so its one plan
    names both incidents."""
    c = (seed().start("B").progress("B", 200).progress("B", 350).consume("B", "A-520", 350)
         .diverge("B", 300))
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL"), ("B", 0, 300, "INTERNAL")]
    assert plans(out)["B"]["incident_ids"] == sorted([IA, iid("B", 0, 300)])


def test_consumption_before_the_first_progress_at_onset_counts():
    c = (seed().start("B").progress("B", 200).consume("B", "A-520", 250).progress("B", 350)
         .diverge("B", 300))
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL")]
    assert secondaries(out, IA) == [("B", 0, 300)]


def test_every_consumption_counts_when_no_progress_reaches_the_onset():
    c = seed().start("B").progress("B", 100).consume("B", "A-520", 100).diverge("B", 600)
    assert secondaries(analyze(c.events), IA) == [("B", 0, 600)]


def test_late_evidence_turns_internal_into_external_and_merges():
    """B's events (consume A-520, NaN at 540) arrive before any of A's: B is first judged
    INTERNAL (own incident opened), then REATTRIBUTED into IA once A-520 is found tainted."""
    c = seed().start("B").consume("B", "A-520", 520).ckpt("B", "B-530", 530).progress("B", 540, loss=NAN)
    events = by_jobs(c.events, ["B", "A"])
    out = analyze(events)
    assert roots(out) == [("A", 0, 500, "INTERNAL")]
    assert secondaries(out, IA) == [("B", 0, 540)]
    ib = iid("B", 0, 540)
    changes = [d for ds in decisions(events) for d in ds if isinstance(d, IncidentChanged)]
    assert [(d.change, d.incident_id) for d in changes if d.incident_id == ib] == [
        ("OPENED", ib), ("REATTRIBUTED", ib)]
    re = next(d for d in changes if d.change == "REATTRIBUTED")
    assert re.merged_into == (IA,)


def test_ancestry_through_own_restore_sees_earlier_consumptions():
    """B incarnation 0 consumed an unresolved X before writing B-200; incarnation 1 restores
    B-200 and diverges: X is in its ancestry → INDETERMINATE. Restoring to the base instead
    (null) leaves nothing before → INTERNAL."""
    def run(restored):
        c = (Cohort().start("B").consume("B", "X-missing", 100).ckpt("B", "B-200", 200)
             .rollback("B", restored, 200).progress("B", 300, loss=NAN))
        return roots(analyze(c.events))
    assert run("B-200") == [("B", 1, 300, "INDETERMINATE")]
    assert run(None) == [("B", 1, 300, "INTERNAL")]


def test_ancestry_is_cut_just_after_the_restored_checkpoint():
    """X is consumed after B-200 in incarnation 0: not in incarnation 1's ancestry → INTERNAL."""
    c = (Cohort().start("B").ckpt("B", "B-200", 200).consume("B", "X-missing", 250)
         .rollback("B", "B-200", 200).progress("B", 300, loss=NAN))
    assert roots(analyze(c.events)) == [("B", 1, 300, "INTERNAL")]


def test_ancestry_tainted_consumption_makes_external():
    c = (seed().start("B").consume("B", "A-520", 520).ckpt("B", "B-540", 540)
         .rollback("B", "B-540", 540).progress("B", 560, loss=NAN))
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL")]
    assert secondaries(out, IA) == [("B", 1, 560)]


def test_later_incarnation_restoring_own_tainted_checkpoint_is_external_to_the_earlier_incident():
    """A incarnation 1 restores A-520 (tainted by A incarnation 0) and diverges at 600:
    EXTERNAL, secondary in IA (a different incident from its own)."""
    c = seed().rollback("A", "A-520", 520).progress("A", 600, loss=NAN)
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL")]
    assert secondaries(out, IA) == [("A", 1, 600)]


def test_never_attributed_to_its_own_incident():
    """A reports onset 500 (no Progress yet), writes A-520 (T1); B merges it and writes B-540;
    A merges B-540 before any Progress ≥ 500. B-540 is tainted only by A's own incident, so A
    stays INTERNAL (not EXTERNAL to itself)."""
    c = (Cohort().start("A").diverge("A", 500).ckpt("A", "A-520", 520)
         .start("B").consume("B", "A-520", 520).ckpt("B", "B-540", 540)
         .consume("A", "B-540", 530))
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL")]
    assert secondaries(out, IA) == []


def test_eval_only_consumption_is_no_attribution_evidence():
    c = seed().start("B").consume("B", "A-520", 520, mode="EVAL_ONLY").progress("B", 540, loss=NAN)
    assert roots(analyze(c.events)) == [("A", 0, 500, "INTERNAL"), ("B", 0, 540, "INTERNAL")]


def test_content_alias_is_attribution_evidence():
    """C-700 silently copies A-520 before C's onset 750: EXTERNAL to IA."""
    c = seed().start("C").ckpt("C", "C-700", 700, content_hash=content("A-520")).progress("C", 750, loss=NAN)
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL")]
    assert secondaries(out, IA) == [("C", 0, 750)]


def test_symptoms_of_symptoms_resolve_to_the_root():
    """A → B (EXTERNAL) → C consumed B's tainted B-540 and diverged: also secondary in IA."""
    c = (seed().start("B").consume("B", "A-520", 520).ckpt("B", "B-540", 540).progress("B", 545, loss=NAN)
         .start("C").consume("C", "B-540", 540).progress("C", 560, loss=NAN))
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL")]
    assert secondaries(out, IA) == [("B", 0, 545), ("C", 0, 560)]


def test_t1_of_an_external_divergence_carries_the_attributed_incidents():
    """B-600 (step 600, written before B's consumption of A-520) is tainted only by T1 of B's
    EXTERNAL divergence at 600, so its root is IA: D, which merged B-600, is contaminated by IA
    and its plan names IA alone."""
    c = (seed().start("B").ckpt("B", "B-600", 600).consume("B", "A-520", 600).progress("B", 600, loss=NAN)
         .start("D").consume("D", "B-600", 600).ckpt("D", "D-700", 700))
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 500, "INTERNAL")]
    assert contaminated(out, IA) == [("B", 0, "A-520"), ("D", 0, "B-600")]
    assert plans(out)["D"]["incident_ids"] == [IA]
    assert out["tainted_checkpoints"] == ["A-500", "A-520", "B-600", "D-700"]
