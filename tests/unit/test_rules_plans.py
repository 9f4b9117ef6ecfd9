"""SPEC §7, rollback plans: taint point, ROLLBACK, RESTART_FROM_BASE / _FROM_SCRATCH, QUARANTINE.

``seed()`` is SPEC §12's job A (incident IA, onset 500; A-480 clean, A-500/A-520 tainted).
Plan tuples are (action, incarnation, target_checkpoint_id, target_step, incident_ids).
"""

from __future__ import annotations

from streams.core.decide import PlanChanged

from .core_builders import IA, Cohort, analyze, cid, content, decisions, iid, plan_tuple, plans, seed

NAN = float("nan")


def plan_of(events, job, **cfg):
    p = plans(analyze(events, **cfg)).get(job)
    return plan_tuple(p) if p else None


def worked_example() -> Cohort:
    """SPEC §12 with B-500 written between B's two consumptions."""
    return (seed().start("B").consume("B", "A-480", 400).ckpt("B", "B-500", 500)
            .consume("B", "A-520", 520).ckpt("B", "B-540", 540).ckpt("B", "B-560", 560)
            .start("C").consume("C", "A-480", 400).ckpt("C", "C-600", 600))


def test_worked_example_rollbacks():
    out = analyze(worked_example().events)
    ps = plans(out)
    assert sorted(ps) == ["A", "B"]  # C consumed only A-480, before the onset
    assert plan_tuple(ps["A"]) == ("ROLLBACK", 0, "A-480", 480, (IA,))
    assert plan_tuple(ps["B"]) == ("ROLLBACK", 0, "B-500", 500, (IA,))
    assert ps["A"]["command_id"] == cid([IA], "A", 0, "ROLLBACK", "A-480")
    assert ps["B"]["command_id"] == cid([IA], "B", 0, "ROLLBACK", "B-500")
    assert out["tainted_checkpoints"] == ["A-500", "A-520", "B-540", "B-560"]


def test_restart_from_base_with_null_base():
    c = Cohort().start("A").progress("A", 100, loss=NAN).ckpt("A", "A-150", 150)
    assert plan_of(c.events, "A") == ("RESTART_FROM_BASE", 0, None, None, (iid("A", 0, 100),))


def test_restart_from_base_to_a_clean_checkpoint_of_another_job():
    """B started from A-480 (clean) and diverged with no checkpoint of its own: restart from
    A-480. Reading: SPEC does not say whether ``target_step`` applies here (it is another job's
    step); only ``target_checkpoint_id`` is asserted."""
    c = seed().start("B", base="A-480").progress("B", 600, loss=NAN)
    p = plans(analyze(c.events))["B"]
    ib = iid("B", 0, 600)
    assert (p["action"], p["target_checkpoint_id"], p["incident_ids"]) == ("RESTART_FROM_BASE", "A-480", [ib])
    assert p["command_id"] == cid([ib], "B", 0, "RESTART_FROM_BASE", "A-480")


def test_restart_from_base_after_restoring_another_jobs_clean_checkpoint():
    """B incarnation 1 restored A-480 (another job's, clean): that is its base."""
    c = seed().start("B").rollback("B", "A-480", 480).progress("B", 600, loss=NAN)
    p = plans(analyze(c.events))["B"]
    assert (p["action"], p["incarnation"], p["target_checkpoint_id"], p["incident_ids"]) == (
        "RESTART_FROM_BASE", 1, "A-480", [iid("B", 1, 600)])


def test_restart_from_base_to_an_unresolved_checkpoint():
    c = Cohort().start("B", base="X-missing").progress("B", 600, loss=NAN)
    p = plans(analyze(c.events))["B"]
    assert (p["action"], p["target_checkpoint_id"]) == ("RESTART_FROM_BASE", "X-missing")


def test_restart_from_scratch_when_the_base_is_tainted():
    c = seed().start("B", base="A-520").ckpt("B", "B-600", 600)
    assert plan_of(c.events, "B") == ("RESTART_FROM_SCRATCH", 0, None, None, (IA,))


def test_restart_from_scratch_after_rollback_to_a_tainted_base():
    c = seed().start("B", base="A-520").ckpt("B", "B-600", 600).rollback("B", None)
    assert plan_of(c.events, "B") == ("RESTART_FROM_SCRATCH", 1, None, None, (IA,))


def test_quarantine_lists_tainted_checkpoints_of_every_incarnation():
    c = (seed().start("B").ckpt("B", "B-500", 500).consume("B", "A-520", 520).ckpt("B", "B-540", 540)
         .rollback("B", "B-500", 500).consume("B", "A-520", 520, mode="REFERENCE").ckpt("B", "B-600", 600)
         .finish("B"))
    p = plans(analyze(c.events))["B"]
    assert plan_tuple(p) == ("QUARANTINE", 1, None, None, (IA,))
    assert p["quarantined_checkpoint_ids"] == ["B-540", "B-600"]
    assert p["command_id"] == cid([IA], "B", 1, "QUARANTINE", None)


def test_finished_job_whose_current_incarnation_is_clean_gets_no_plan():
    """Reading: QUARANTINE replaces the plan of a job that would get one; B's current
    incarnation (restored to clean B-500) has no taint point, so B gets none even though its
    incarnation-0 checkpoint B-540 is tainted."""
    c = (seed().start("B").ckpt("B", "B-500", 500).consume("B", "A-520", 520).ckpt("B", "B-540", 540)
         .rollback("B", "B-500", 500).ckpt("B", "B-600", 600).finish("B"))
    out = analyze(c.events)
    assert "B" not in plans(out)
    assert "B-540" in out["tainted_checkpoints"]


def test_no_plan_once_rolled_back_past_the_contamination():
    c = worked_example().rollback("A", "A-480", 480).rollback("B", "B-500", 500)
    out = analyze(c.events)
    assert out["plans"] == []
    assert [i["incident_id"] for i in out["incidents"]] == [IA]


def test_one_plan_per_job_from_several_incidents():
    """B takes C's tainted C-400 first, then A's A-520: one plan, back to B-100, both incidents."""
    c = (seed().start("C").ckpt("C", "C-300", 300).progress("C", 350, loss=NAN).ckpt("C", "C-400", 400)
         .start("B").ckpt("B", "B-100", 100).consume("B", "C-400", 150).ckpt("B", "B-200", 200)
         .consume("B", "A-520", 250).ckpt("B", "B-600", 600))
    ic = iid("C", 0, 350)
    out = analyze(c.events)
    assert [p["job_id"] for p in out["plans"]] == ["A", "B", "C"]
    assert plan_tuple(plans(out)["B"]) == ("ROLLBACK", 0, "B-100", 100, tuple(sorted([IA, ic])))


def test_divergence_reported_beyond_the_last_progress_still_rolls_back():
    """Onset 500 > every reported step: the taint point is the end of the incarnation."""
    c = Cohort().start("A").progress("A", 300).ckpt("A", "A-300", 300).progress("A", 400).ckpt("A", "A-400", 400)
    c.diverge("A", 500)
    out = analyze(c.events)
    assert plan_tuple(plans(out)["A"]) == ("ROLLBACK", 0, "A-400", 400, (iid("A", 0, 500),))
    assert out["tainted_checkpoints"] == []


def test_taint_margin_moves_the_taint_point():
    """margin 20: A-480 (≥ 480) is the taint point → no checkpoint before it → restart."""
    assert plan_of(seed().events, "A", taint_margin=20) == ("RESTART_FROM_BASE", 0, None, None, (IA,))


def test_t3_checkpoint_is_a_taint_point():
    c = seed().start("C").ckpt("C", "C-600", 600).ckpt("C", "C-700", 700, content_hash=content("A-520"))
    assert plan_of(c.events, "C") == ("ROLLBACK", 0, "C-600", 600, (IA,))


def test_ancestry_through_own_restore_uses_only_checkpoints_before_the_cut():
    """B restored B-300 (B-500, B-520 are past the cut), then took A-520: back to B-300."""
    c = (seed().start("B").ckpt("B", "B-300", 300).ckpt("B", "B-500", 500).ckpt("B", "B-520", 520)
         .rollback("B", "B-300", 300).consume("B", "A-520", 520).ckpt("B", "B-600", 600))
    assert plan_of(c.events, "B") == ("ROLLBACK", 1, "B-300", 300, (IA,))


def test_taint_point_in_an_earlier_incarnation_of_the_ancestry():
    """B took A-520 in incarnation 0, then restored its tainted B-540: back to B-300."""
    c = (seed().start("B").ckpt("B", "B-300", 300).consume("B", "A-520", 520).ckpt("B", "B-540", 540)
         .rollback("B", "B-540", 540).ckpt("B", "B-600", 600))
    assert plan_of(c.events, "B") == ("ROLLBACK", 1, "B-300", 300, (IA,))


def test_restoring_own_tainted_checkpoint_rolls_back_before_the_onset():
    c = seed().rollback("A", "A-520", 520)
    assert plan_of(c.events, "A") == ("ROLLBACK", 1, "A-480", 480, (IA,))


def test_new_divergence_after_a_clean_rollback_has_its_own_plan():
    """A restored A-480 (clean), wrote A-550-i1, diverged at 600: only the new incident."""
    c = seed().rollback("A", "A-480", 480).ckpt("A", "A-550-i1", 550).progress("A", 600, loss=NAN)
    assert plan_of(c.events, "A") == ("ROLLBACK", 1, "A-550-i1", 550, (iid("A", 1, 600),))


def test_changed_plan_supersedes_the_old_command():
    """NaN at 500 → back to A-480; a report of onset 470 taints A-480 → back to A-460, a new
    command naming the old one."""
    c = (Cohort().start("A").ckpt("A", "A-460", 460).ckpt("A", "A-480", 480).progress("A", 500, loss=NAN)
         .diverge("A", 470))
    per_event = decisions(c.events)
    first = [d for d in per_event[3] if isinstance(d, PlanChanged)]
    old_cmd = cid([iid("A", 0, 500)], "A", 0, "ROLLBACK", "A-480")
    assert [(d.plan["target_checkpoint_id"], d.plan["command_id"], d.supersedes) for d in first] == [
        ("A-480", old_cmd, None)]
    second = [d for d in per_event[4] if isinstance(d, PlanChanged)]
    new_cmd = cid([iid("A", 0, 470)], "A", 0, "ROLLBACK", "A-460")
    assert [(d.plan["target_checkpoint_id"], d.plan["command_id"], d.supersedes) for d in second] == [
        ("A-460", new_cmd, old_cmd)]


def test_same_plan_same_command_no_new_decision():
    """A redelivered event changes nothing: no PlanChanged."""
    c = seed()
    per_event = decisions(c.events + [c.events[3]])
    assert not [d for d in per_event[-1] if isinstance(d, PlanChanged)]


# ---------------------------------------------------------------------- RolledBack.from_scratch (revision 2)

def _tainted_base() -> Cohort:
    """B started from A-520 (tainted, IA) and wrote B-600: planned RESTART_FROM_SCRATCH."""
    return seed().start("B", base="A-520").progress("B", 600).ckpt("B", "B-600", 600)


def test_a_restart_from_scratch_leaves_the_job_clean():
    """B obeys RESTART_FROM_SCRATCH with from_scratch: incarnation 1 consumed nothing (not even
    A-520), so B-700 is clean, B gets no plan and only incarnation 0 is contaminated."""
    c = _tainted_base().scratch("B").progress("B", 700).ckpt("B", "B-700", 700)
    out = analyze(c.events)
    assert "B" not in plans(out)
    assert out["tainted_checkpoints"] == ["A-500", "A-520", "B-600"]
    assert [(x["job_id"], x["incarnation"]) for x in out["incidents"][0]["contaminated"]] == [("B", 0)]


def test_a_null_restore_without_from_scratch_reconsumes_the_tainted_base_and_is_planned_again():
    """The same acknowledgement as a plain null restore (from_scratch false, explicit or left
    out): it re-consumes A-520, B incarnation 1 is contaminated via A-520, B-700 is tainted and
    the plan is RESTART_FROM_SCRATCH again, for incarnation 1."""
    for flag in (False, None):
        c = _tainted_base().rollback("B", None, from_scratch=flag).progress("B", 700).ckpt("B", "B-700", 700)
        out = analyze(c.events)
        assert plan_of(c.events, "B") == ("RESTART_FROM_SCRATCH", 1, None, None, (IA,))
        assert "B-700" in out["tainted_checkpoints"]
        assert [(x["job_id"], x["incarnation"], x["via_checkpoint_id"])
                for x in out["incidents"][0]["contaminated"]] == [("B", 0, "A-520"), ("B", 1, "A-520")]


def test_after_a_restart_from_scratch_the_base_is_the_pretrained_model():
    """Tainted again after the restart (a MERGE of A-520) with no checkpoint before it: the base
    of incarnation 1 is the pretrained model, clean, so RESTART_FROM_BASE with a null target,
    not RESTART_FROM_SCRATCH. With a clean checkpoint before the consumption: ROLLBACK to it."""
    c = _tainted_base().scratch("B").consume("B", "A-520", 650).ckpt("B", "B-700", 700)
    assert plan_of(c.events, "B") == ("RESTART_FROM_BASE", 1, None, None, (IA,))
    c = _tainted_base().scratch("B").ckpt("B", "B-640", 640).consume("B", "A-520", 650).ckpt("B", "B-700", 700)
    assert plan_of(c.events, "B") == ("ROLLBACK", 1, "B-640", 640, (IA,))


def test_a_restart_from_scratch_is_the_base_of_the_incarnations_restored_from_it():
    """Incarnation 1 restarted from scratch and was tainted before its first checkpoint;
    incarnation 2 restored incarnation 1's B-700: the ancestry starts from the pretrained model
    (RESTART_FROM_BASE, null). Had incarnation 1 been a plain null restore, its base would be the
    tainted A-520 (RESTART_FROM_SCRATCH)."""
    c = (_tainted_base().scratch("B").consume("B", "A-520", 650).ckpt("B", "B-700", 700)
         .rollback("B", "B-700", 700).ckpt("B", "B-800", 800))
    assert plan_of(c.events, "B") == ("RESTART_FROM_BASE", 2, None, None, (IA,))
    c = (_tainted_base().rollback("B", None).ckpt("B", "B-700", 700)
         .rollback("B", "B-700", 700).ckpt("B", "B-800", 800))
    assert plan_of(c.events, "B") == ("RESTART_FROM_SCRATCH", 2, None, None, (IA,))


def test_a_restart_from_scratch_is_no_attribution_evidence():
    """B diverges after the restart from scratch: INTERNAL (its ancestry consumed nothing) and a
    RESTART_FROM_BASE to the pretrained model; after a plain null restore the re-consumed A-520
    makes the same divergence EXTERNAL, a secondary of IA."""
    out = analyze(_tainted_base().scratch("B").progress("B", 100).progress("B", 200, loss=NAN).events)
    ib = iid("B", 1, 200)
    assert sorted((i["root"]["job_id"], i["verdict"]) for i in out["incidents"]) == [("A", "INTERNAL"),
                                                                                  ("B", "INTERNAL")]
    assert plan_tuple(plans(out)["B"]) == ("RESTART_FROM_BASE", 1, None, None, (ib,))
    out = analyze(_tainted_base().rollback("B", None).progress("B", 100).progress("B", 200, loss=NAN).events)
    assert [i["root"]["job_id"] for i in out["incidents"]] == ["A"]
    assert out["incidents"][0]["secondary_divergences"] == [{"job_id": "B", "incarnation": 1, "onset_step": 200}]
    assert plan_tuple(plans(out)["B"]) == ("RESTART_FROM_SCRATCH", 1, None, None, (IA,))


def test_the_command_is_acknowledged_by_the_restart_from_scratch():
    """The RESTART_FROM_SCRATCH command of B, acknowledged by RolledBack(from_scratch, command_id):
    the plan is cleared (PlanChanged to None superseding it)."""
    c = _tainted_base()
    cmd = cid([IA], "B", 0, "RESTART_FROM_SCRATCH", None)
    c.scratch("B", command_id=cmd)
    last = [d for d in decisions(c.events)[-1] if isinstance(d, PlanChanged)]
    assert [(d.job_id, d.plan, d.supersedes) for d in last] == [("B", None, cmd)]
