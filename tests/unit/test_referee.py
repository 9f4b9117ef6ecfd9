"""The referee and the router without Kafka: what the live agents do, event by event."""

from __future__ import annotations

from streams.referee.referee import Referee
from streams.worker.router import RawRecord, Router
from streams.codec import Codec
from streams.core.cohorts import CohortLineage, CohortRouter
from streams.core.events import parse_event
from streams.testing.cohort import generate_cohorts

from .vectors import load_lines

CODEC = Codec()


def routed_events(lines):
    router = CohortRouter()
    for d in lines:
        ev = parse_event(d)
        yield router.route(ev), ev


def run(referee: Referee, pairs, publish=True, t0=1_000):
    out = []
    for i, (cohort, ev) in enumerate(pairs):
        out.extend(referee.handle(cohort, ev, t0 + i, publish=publish).emissions)
    return out


def effective(emissions):
    """Per job, the last control record among plans (what `traintrace plans` folds)."""
    plans = {}
    for em in emissions:
        if em.topic == "control" and em.record in ("RollbackCommand", "QuarantineNotice", "PlanCleared"):
            plans[em.key] = em
    return {j: em.value["command_id"] for j, em in plans.items() if em.record != "PlanCleared"}


def test_commands_are_the_plans_of_analyze():
    for name in ("01_seed_example", "08_rollback_incarnations", "09_quarantine_finished", "14_pbt_cohort"):
        lines = load_lines(name)
        ref = Referee()
        emissions = run(ref, routed_events(lines))
        offline = CohortLineage()
        offline.apply_many(parse_event(d) for d in lines)
        want = {p["job_id"]: p["command_id"] for p in offline.final_state()["plans"]}
        assert effective(emissions) == want, name


def test_no_command_id_twice():
    lines = load_lines("14_pbt_cohort")
    emissions = run(Referee(), routed_events(lines))
    ids = [em.value["command_id"] for em in emissions if em.topic == "control"]
    assert len(ids) == len(set(ids))


def test_replay_rebuilds_the_same_state_and_publishes_nothing_twice():
    """A worker that replays the first part (publish=False, as after an assignment) and then
    goes on emits exactly what a worker that saw everything emitted for the second part."""
    pairs = list(routed_events(load_lines("14_pbt_cohort")))
    cut = len(pairs) // 2
    whole = Referee()
    first = run(whole, pairs[:cut])
    second = run(whole, pairs[cut:], t0=1_000 + cut)

    recovered = Referee()
    recovered.published |= {em.value["command_id"] for em in first if em.topic == "control"}
    assert run(recovered, pairs[:cut], publish=False) == []
    again = run(recovered, pairs[cut:], t0=1_000 + cut)
    assert [(e.topic, e.key, e.record, e.value) for e in again] == [
        (e.topic, e.key, e.record, e.value) for e in second]
    assert recovered.final_state() == whole.final_state()


def test_redelivered_events_are_dropped_and_commands_not_repeated():
    pairs = list(routed_events(load_lines("01_seed_example")))
    ref = Referee()
    first = run(ref, pairs)
    again = run(ref, pairs)
    assert [e for e in again if e.topic == "control"] == []
    assert ref.stats.duplicates == len(pairs)
    assert len([e for e in first if e.record == "RollbackCommand"]) == 2


def test_manifest_versions_count_up_and_keep_the_onset_snapshot():
    pairs = list(routed_events(load_lines("14_pbt_cohort")))
    emissions = run(Referee(), pairs)
    versions = {}
    for em in emissions:
        if em.topic == "manifests":
            x = em.value["incident_id"]
            assert em.value["version"] == versions.get(x, 0) + 1
            versions[x] = em.value["version"]
            assert em.value["commitment_root"] and len(em.value["commitment_root"]) == 64
    assert versions
    first = {}
    for em in emissions:
        if em.topic == "manifests":
            first.setdefault(em.key, em.value["concurrency_snapshot"])
            assert em.value["concurrency_snapshot"] == first[em.key]


def test_every_emission_encodes():
    pairs = list(routed_events(load_lines("14_pbt_cohort")))
    ref = Referee()
    emissions = run(ref, pairs)
    emissions += ref.tick(10**12) + ref.commitments(10**12, force=True)
    for cohort in ref.due_ticks(10**12, 0):
        emissions += ref.clock_tick(cohort, 10**12, 0)
    for em in emissions:
        name, value = CODEC.decode_record(CODEC.encode_record(em.record, em.value))
        assert name == em.record


def test_grace_period_halts_through_a_tick_and_unacknowledged_alert():
    lines = load_lines("06_guard_untraceable")
    ref = Referee(ack_timeout_ms=5_000)
    run(ref, routed_events(lines), t0=0)
    assert ref.due_ticks(1_000, grace_ms=60_000) == []
    (cohort,) = ref.due_ticks(10**9, grace_ms=60_000)
    # the worker appends a tick record to the cohort's input; folding it halts
    halts = [e for e in ref.clock_tick(cohort, 10**9, 60_000) if e.record == "HaltCommand"]
    assert [(e.key, e.value["reason"], e.value["issued_ts"]) for e in halts] == [("B", "UNTRACEABLE_SOURCE", 10**9)]
    assert ref.due_ticks(2 * 10**9, grace_ms=60_000) == []  # halted: nothing more is due
    assert [e for e in ref.clock_tick(cohort, 2 * 10**9, 60_000) if e.record == "HaltCommand"] == []
    late = ref.tick(10**9)
    assert any(e.record == "Alert" and e.value["kind"] == "COMMAND_UNACKNOWLEDGED" for e in late)
    assert not [e for e in late if e.record == "HaltCommand"]


def test_router_dead_letters_bad_records_and_routes_by_cohort():
    lines = load_lines("07_ledger_gap_unregistered")
    records = [RawRecord("lineage.events", 0, i, d["job_id"].encode(), CODEC.encode_event(d))
               for i, d in enumerate(lines)]
    records += [
        RawRecord("lineage.events", 1, 0, b"x", b"\x7fgarbage"),
        RawRecord("lineage.events", 1, 1, b"x", b""),
        RawRecord("lineage.events", 1, 2, b"not-A", CODEC.encode_event(lines[0])),
    ]
    routed = Router(CODEC, {}).route(records, 5)
    assert sorted(routed.batches) == ["", "c1"]
    assert {len(v) for v in routed.batches.values()} and sum(len(v) for v in routed.batches.values()) == len(lines)
    assert [d["error_kind"] for d in routed.dead] == ["BAD_MAGIC", "EMPTY", "WRONG_KEY"]
    for d in routed.dead:
        CODEC.decode_record(CODEC.encode_record("DeadLetter", d))


def test_router_and_referee_over_generated_cohorts_equal_offline():
    lines = list(generate_cohorts(jobs=60, cohort_size=12, steps=300, seed=5, divergence_rate=0.3,
                                  exploit_every=20, exploit_prob=0.7, alias_prob=0.1))
    records = [RawRecord("lineage.events", 0, i, d["job_id"].encode(), CODEC.encode_event(d))
               for i, d in enumerate(lines)]
    routed = Router(CODEC, {}).route(records, 0)
    ref = Referee()
    for cohort, evs in routed.batches.items():
        for r in evs:
            ref.handle(cohort, parse_event(CODEC.decode_event(r["value"])), 0)
    offline = CohortLineage()
    offline.apply_many(parse_event(d) for d in lines)
    offline.finish_input()
    for lin in ref.engines.values():
        lin.finish_input()
    assert ref.final_state() == offline.final_state()


def test_reconcile_publishes_what_a_dead_owner_never_sent():
    """A previous owner folded everything but its commands for a stretch of offsets never got
    out (it died after the commit); the new owner replays without publishing, then reconciles
    with what lineage.control holds: the effective plans end up those of the offline fold."""
    pairs = list(routed_events(load_lines("14_pbt_cohort")))
    old = Referee()
    sent = []
    for i, (cohort, ev) in enumerate(pairs):
        out = old.handle(cohort, ev, i, partition=0).emissions
        if not (len(pairs) // 3 <= i < 2 * len(pairs) // 3):  # the lost stretch
            sent.extend(out)
    new = Referee()
    for i, (cohort, ev) in enumerate(pairs):
        assert new.handle(cohort, ev, i, partition=0, publish=False).emissions == []
    control = [e for e in sent if e.topic == "control"]
    new.published |= {e.value["command_id"] for e in control}
    last_plan = {}
    for e in control:
        if e.record in ("RollbackCommand", "QuarantineNotice", "PlanCleared"):
            last_plan[e.key] = (e.record, e.value["command_id"])
    fixed = new.reconcile(0, last_plan, 10**9)
    offline = CohortLineage()
    offline.apply_many(parse_event(d) for d in load_lines("14_pbt_cohort"))
    want = {p["job_id"]: p["command_id"] for p in offline.final_state()["plans"]}
    assert effective(control + fixed) == want
    assert any(e.topic == "manifests" for e in fixed)
    ids = [e.value["command_id"] for e in control + fixed if e.topic == "control"]
    assert len(ids) == len(set(ids))
    # a second reconcile has nothing left to send but the (idempotent) manifests
    assert [e for e in new.reconcile(0, last_plan, 10**9) if e.topic == "control"] == []


def _acknowledge(lines, job, restored, step, from_scratch=False):
    """A's rollback command of the 01 vector, acknowledged with the restore given."""
    ref = Referee()
    emissions = run(ref, routed_events(lines))
    cmd = next(e.value for e in emissions if e.record == "RollbackCommand" and e.key == job)
    last = max((d for d in lines if d["job_id"] == job), key=lambda d: d["seq"])
    ack = {"type": "RolledBack", "job_id": job, "seq": last["seq"] + 1, "incarnation": last["incarnation"] + 1,
           "ts": last["ts"] + 1, "restored_checkpoint_id": restored, "resumed_step": step,
           "command_id": cmd["command_id"], "from_scratch": from_scratch}
    out = run(ref, routed_events([ack]), t0=10**9)
    return cmd, [e.value for e in out if e.record == "Alert" and e.value["kind"] == "RESTORE_SUBSTITUTED"]


def test_an_acknowledgement_that_restored_something_else_raises_an_alert():
    """Issue 22: a job whose rollback target was rotated away restores an older checkpoint (or
    its base) and says so in its RolledBack; the referee folds it and tells the operators."""
    lines = load_lines("01_seed_example")
    cmd, alerts = _acknowledge(lines, "A", "A-480", 480)
    assert cmd["target_checkpoint_id"] == "A-480" and alerts == []  # the target itself: no alert
    _cmd, alerts = _acknowledge(lines, "A", None, 0)  # A has nothing older than A-480: its base
    assert [(a["job_id"], a["checkpoint_id"]) for a in alerts] == [("A", None)]
    assert alerts[0]["details"]["target_checkpoint_id"] == "A-480" and "its base" in alerts[0]["message"]
    _cmd, alerts = _acknowledge(lines, "A", None, 0, from_scratch=True)
    assert len(alerts) == 1 and "from scratch" in alerts[0]["message"]


def test_stats_count_every_outcome_of_the_fold():
    """The referee's counters, event by event, from what each fold did: events folded (the
    event and those its seal released), identical redeliveries, rejections (the event, or held
    events the seal gate refused) and events waiting for their seal — over a sealed cohort with
    redeliveries, a conflicting redelivery and a forged seal."""
    from dataclasses import replace

    from streams.core.events import Progress
    from streams.testing.cohort import seal_events

    dicts = list(seal_events(generate_cohorts(jobs=9, cohort_size=3, steps=600, seed=5), every=7))
    events = [parse_event(d) for d in dicts]
    cut = 2 * len(events) // 3
    feed = list(events[:cut]) + list(events[cut // 4:cut // 4 + 50])  # identical redeliveries
    # a conflicting redelivery (same job and seq, other content) and an event of a later seq
    # whose seal is forged
    prog = next(e for e in events[:cut] if isinstance(e, Progress))
    feed.append(replace(prog, step=prog.step + 1_000))
    forged = next(e for e in events[cut:] if e.signature is not None)
    feed.append(replace(forged, signature="00" * 64))
    feed.extend(events[cut:])
    router = CohortRouter()
    ref = Referee()
    want = {"events": 0, "duplicates": 0, "rejected": 0, "held": 0}
    for i, ev in enumerate(feed):
        cohort = router.route(ev)
        lin = ref.engines.get(cohort)
        held_before = lin.seals.holding if lin is not None else 0
        r = ref.handle(cohort, ev, 1_000 + i).result
        want["events"] += (1 if r.accepted else 0) + len(r.released)
        want["duplicates"] += r.duplicate
        want["rejected"] += (not r.accepted and not r.duplicate and not r.held and not r.refused) + len(r.refused)
        want["held"] += ref.engines[cohort].seals.holding - held_before
        got = {k: getattr(ref.stats, k) for k in want}
        assert got == want, (i, type(ev).__name__)
    assert want["duplicates"] >= 50 and want["rejected"] >= 1 and want["events"] > 0
    # every event was folded, refused or is still held
    assert ref.stats.held == sum(lin.seals.holding for lin in ref.engines.values())


def test_checkpoint_status_is_the_value_of_its_typed_record():
    """The referee builds CheckpointStatus values directly (one every sixth event); they are
    the values, and the bytes, of the typed record's way."""
    from streams.core.state import Checkpoint
    from streams.referee.records import checkpoint_status, checkpoint_status_typed

    lines = load_lines("14_pbt_cohort")
    ref = Referee()
    run(ref, routed_events(lines))
    cks = [ck for lin in ref.engines.values() for ck in lin.state.checkpoints.values()]
    assert any(ck.sources for ck in cks) and any(not ck.sources for ck in cks)
    for ck in cks:
        assert isinstance(ck, Checkpoint)
        for cohort, ids in ((None, []), ("c1", ["inc-b", "inc-a"]), ("c2", ["inc-a"])):
            fast, typed = checkpoint_status(ck, cohort, ids, 1_234), checkpoint_status_typed(ck, cohort, ids, 1_234)
            assert fast == typed
            assert CODEC.encode_record(fast.record, fast.value) == CODEC.encode_record(typed.record, typed.value)
