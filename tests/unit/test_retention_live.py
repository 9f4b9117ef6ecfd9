"""Retention live (SPEC §13): the referee decides at the clock ticks of a cohort's input, publishes
a RetentionNotice per job whose view changed, signs it like every command, re-publishes the
last one after a replay, and judges every recorded deletion (DELETED_PINNED)."""

from __future__ import annotations

import json
import random

from streams.codec import Codec
from streams.control.commands import command_from_record
from streams.core.decide import Lineage
from streams.core.retention import RetentionChanged
from streams.referee.records import retention_command_id
from streams.referee.referee import Referee

from .test_retention import T0, ckpt, ev, start


def notices(out):
    return [em for em in out if em.record == "RetentionNotice"]


def view(em):
    v = em.value
    return ([d["checkpoint_id"] for d in v["deletable"]], {k["checkpoint_id"]: k["reason"] for k in v["kept"]})


def test_a_tick_with_a_horizon_publishes_what_changed_and_nothing_when_nothing_did():
    ref = Referee()
    for e in [start("A", 0), ckpt("A", 1, 10, 10), ckpt("A", 2, 20, 20), ckpt("A", 3, 30, 30)]:
        ref.handle("c", e, T0)
    assert ref.clock_tick("c", T0 + 35, 4000) == []  # no horizon: no retention decision
    (first,) = notices(ref.clock_tick("c", T0 + 35, 4000, horizon_ms=10))
    assert view(first) == (["A-10"], {"A-20": "needed", "A-30": "not-settled"})
    assert first.value["version"] == 1 and first.value["command_id"] == retention_command_id("A", 1)
    assert first.value["watermark_ms"] == T0 + 35 and first.value["settle_horizon_ms"] == 10
    assert first.key == "A" and first.topic == "control"
    lin = ref.engines["c"]
    assert not lin.retention_due(T0 + 39, 10)  # A-30 settles after T0 + 40
    assert notices(ref.clock_tick("c", T0 + 39, 4000, horizon_ms=10)) == []
    assert lin.retention_due(T0 + 41, 10)
    (second,) = notices(ref.clock_tick("c", T0 + 41, 4000, horizon_ms=10))
    assert view(second) == (["A-10", "A-20"], {"A-30": "latest"}) and second.value["version"] == 2


def test_a_notice_is_no_command_but_is_signed_and_decodes():
    from streams.signing import ControlSigner, check_control
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    ref = Referee(control_signer=ControlSigner(key))
    for e in [start("A", 0), ckpt("A", 1, 10, 10), ckpt("A", 2, 20, 20)]:
        ref.handle("c", e, T0)
    (em,) = notices(ref.clock_tick("c", T0 + 100, 4000, horizon_ms=10))
    ring = {em.value["key_id"]: key.public_key()}
    assert check_control("RetentionNotice", em.value, ring).ok
    tampered = {**em.value, "deletable": [*em.value["deletable"], {"checkpoint_id": "A-20", "reason": "x", "by": None}]}
    assert check_control("RetentionNotice", tampered, ring).reason == "BAD_SIGNATURE"
    codec = Codec()
    name, back = codec.decode_record(codec.encode_record("RetentionNotice", em.value))
    assert name == "RetentionNotice" and back["deletable"][0]["checkpoint_id"] == "A-10"
    assert command_from_record(name, back) is None  # a job's plan readers skip it


def test_a_replay_rebuilds_the_views_and_reconcile_publishes_the_last_unpublished_notice():
    events = [start("A", 0), ckpt("A", 1, 10, 10), ckpt("A", 2, 20, 20), ckpt("A", 3, 30, 30)]
    live = Referee()
    for e in events:
        live.handle("c", e, T0, partition=0)
    live.clock_tick("c", T0 + 35, 4000, partition=0, horizon_ms=10)
    last = notices(live.clock_tick("c", T0 + 100, 4000, partition=0, horizon_ms=10))[0]
    replayed = Referee()
    for e in events:
        replayed.handle("c", e, T0, partition=0, publish=False)
    replayed.clock_tick("c", T0 + 35, 4000, partition=0, publish=False, horizon_ms=10)
    replayed.clock_tick("c", T0 + 100, 4000, partition=0, publish=False, horizon_ms=10)
    out = notices(replayed.reconcile(0, {}, T0 + 200))
    assert out == [last]  # byte for byte what the live referee decided
    assert notices(replayed.reconcile(0, {}, T0 + 300)) == []


def test_a_deletion_of_a_checkpoint_never_marked_deletable_raises_an_alert():
    ref = Referee()
    for e in [start("A", 0), ckpt("A", 1, 10, 10), ckpt("A", 2, 20, 20), ckpt("A", 3, 30, 30)]:
        ref.handle("c", e, T0)
    ref.clock_tick("c", T0 + 35, 4000, horizon_ms=10)  # A-10 deletable; A-20 needed
    ok = ref.handle("c", ev("CheckpointDeleted", "A", 4, 36, checkpoint_id="A-10"), T0)
    assert ok.result.accepted and not [em for em in ok.emissions if em.topic == "alerts"]
    bad = ref.handle("c", ev("CheckpointDeleted", "A", 5, 37, checkpoint_id="A-20"), T0)
    (alert,) = [em for em in bad.emissions if em.topic == "alerts"]
    assert alert.value["kind"] == "DELETED_PINNED" and alert.value["checkpoint_id"] == "A-20"
    assert alert.value["details"]["why"] == "pinned"
    other = ref.handle("c", ev("CheckpointDeleted", "A", 6, 38, checkpoint_id="B-1"), T0)
    assert [em.value["details"]["why"] for em in other.emissions if em.topic == "alerts"] == ["unknown"]
    # the deleted checkpoints leave the job's view (what is gone is neither deletable nor kept)
    (em,) = notices(ref.clock_tick("c", T0 + 100, 4000, horizon_ms=10))
    assert view(em) == ([], {"A-30": "latest"})


def test_the_book_survives_a_snapshot_and_an_old_snapshot_gets_a_fresh_one():
    from streams.core.snapshot import dump_lineage, load_lineage

    lin = Lineage()
    for e in [start("A", 0), ckpt("A", 1, 10, 10), ckpt("A", 2, 20, 20)]:
        lin.apply(e)
    (d,) = [d for d in lin.retention_tick(T0 + 100, 10) if isinstance(d, RetentionChanged)]
    back = load_lineage(dump_lineage(lin), lin.config)
    assert back.book().views == lin.book().views and back.book().ever_deletable == {"A-10"}
    assert back.retention_tick(T0 + 100, 10) == []  # nothing changed: nothing decided again
    del back.__dict__["retention"]  # an engine snapshotted before schemas v9
    assert [x.version for x in back.retention_tick(T0 + 100, 10) if isinstance(x, RetentionChanged)] == [1]


# -- the live property: deleting everything the notices allow changes no plan ------------------


def substitute_for(ref, job_id, target, deleted):
    """What the job restores when its plan's target is deleted (streams.integrations.fallback's
    rule): the newest surviving checkpoint of its current ancestry older than the target, else
    its base; with whether that is clean now."""
    from streams.core.project import ancestry

    lin = next(lin for lin in ref.engines.values() if job_id in lin.state.jobs)
    st = lin.state
    job = st.jobs[job_id]
    tck = st.checkpoints[target]
    older = [c for seg, cut in ancestry(st, job.current) for c in seg.ckpts
             if c.seq <= cut and c.job_id == job_id and c.seq < tck.seq and c.id not in deleted]
    if older:
        c = max(older, key=lambda c: c.seq)
        return c.id, not c.tainted
    base = job.base_checkpoint_id
    if base is None:
        return "pretrained", True
    b = st.checkpoints.get(base)
    return base, b is not None and not b.tainted and base not in deleted


def run_with_deletions(raw, horizon, points, rng, delete=True, substitutes=None):
    """Fold the generated events (dicts) through a Referee; at ``points`` random positions a
    clock tick with the horizon (the watermark: the largest ts so far), and — with ``delete`` —
    each job at once records a ``CheckpointDeleted`` for everything its notice lists as
    deletable (its later events' seqs shift past the inserted ones). Returns (the plans in force
    at the end, every rollback target issued, the checkpoints deleted, the DELETED_PINNED
    alerts, the notices)."""
    from streams.core.events import parse_event

    ref = Referee()
    marks = set(rng.sample(range(len(raw)), min(points, len(raw))))
    shift: dict[str, int] = {}
    last: dict[str, tuple[int, int]] = {}  # job -> (seq, incarnation) of its last event
    deleted: set[str] = set()
    targets: list[tuple[str, str]] = []
    pinned: list[dict] = []
    notices = 0
    w = None

    def take(out):
        nonlocal notices
        for em in out:
            if em.record == "RollbackCommand" and em.value.get("target_checkpoint_id"):
                targets.append((em.value["job_id"], em.value["target_checkpoint_id"]))
                if substitutes is not None:  # the horizon broken on purpose: what the job restores
                    if em.value["target_checkpoint_id"] in deleted:
                        substitutes.append((em.value["job_id"], em.value["target_checkpoint_id"],
                                            *substitute_for(ref, em.value["job_id"],
                                                            em.value["target_checkpoint_id"], deleted)))
                    continue
                assert em.value["target_checkpoint_id"] not in deleted, \
                    f"{em.value['job_id']}'s plan targets {em.value['target_checkpoint_id']}, deleted (H={horizon})"
            elif em.topic == "alerts" and em.value["kind"] == "DELETED_PINNED":
                pinned.append(em.value)
            elif em.record == "RetentionNotice":
                notices += 1
                yield em

    for i, d in enumerate(raw):
        job = d["job_id"]
        e = parse_event({**d, "seq": d["seq"] + shift.get(job, 0)})
        cohort = d.get("cohort_id") or ref.engines and next(
            (c for c, lin in ref.engines.items() if job in lin.state.jobs), "")
        list(take(ref.handle(cohort, e, e.ts).emissions))
        last[job] = (e.seq, e.incarnation)
        w = e.ts if w is None else max(w, e.ts)
        if i not in marks:
            continue
        for c in sorted(ref.engines):
            for em in list(take(ref.clock_tick(c, w, 10**12, horizon_ms=horizon))):
                if not delete:
                    continue
                j = em.value["job_id"]
                for row in em.value["deletable"]:
                    seq, inc = last[j]
                    gone = parse_event({"type": "CheckpointDeleted", "job_id": j, "seq": seq + 1, "incarnation": inc,
                                        "ts": w, "prev_hash": None, "hash": None,
                                        "checkpoint_id": row["checkpoint_id"]})
                    list(take(ref.handle(c, gone, w).emissions))
                    deleted.add(row["checkpoint_id"])
                    shift[j] = shift.get(j, 0) + 1
                    last[j] = (seq + 1, inc)
    for c in sorted(ref.engines):
        list(take(ref.clock_tick(c, w, 10**12, horizon_ms=horizon)))
    plans = {j: (p["action"], p.get("target_checkpoint_id"), p.get("target_step"))
             for lin in ref.engines.values() for j, p in lin.plans.items()}
    return plans, targets, deleted, pinned, notices


def test_deleting_everything_the_notices_allow_changes_no_plan_on_random_cohorts():
    """SPEC §13's promise, end to end through the referee: random cohorts whose divergences are
    found late (up to 300 steps back), the horizon the log keeps, deletions at random points —
    no plan ever targets a deleted checkpoint, no deletion is judged pinned, and the plans in
    force at the end are those of the same run that deleted nothing."""
    from .test_retention import late_cohort
    from streams.core.events import event_to_dict

    seeds = range(12)
    deleted_total = targets_total = 0
    for seed in seeds:
        horizon = late_cohort.horizon(seed)
        raw = [event_to_dict(e) for e in late_cohort(seed)]
        plans, targets, deleted, pinned, notices = run_with_deletions(raw, horizon, 60, random.Random(seed))
        base, base_targets, _, _, _ = run_with_deletions(raw, horizon, 60, random.Random(seed), delete=False)
        assert not pinned, pinned[:3]
        assert plans == base, seed
        assert sorted(targets) == sorted(base_targets), seed
        assert notices > 0
        deleted_total += len(deleted)
        targets_total += len(targets)
    assert deleted_total > 100 and targets_total > 20  # neither vacuous


def test_a_horizon_cut_short_deletes_a_target():
    """The live property has teeth: with a quarter of the horizon the logs keep, a plan targets
    a checkpoint already deleted on some cohort (the first such cohort ends the search)."""
    from .test_retention import late_cohort
    from streams.core.events import event_to_dict

    def hit(seed: int) -> bool:
        try:
            run_with_deletions([event_to_dict(e) for e in late_cohort(seed)], late_cohort.horizon(seed) // 4, 80,
                               random.Random(seed))
        except AssertionError:
            return True
        return False

    assert any(hit(seed) for seed in range(24))


def test_a_deletion_is_in_the_hash_chain_with_the_documented_bytes():
    from streams.core.chain import canonical_bytes
    from streams.core.events import parse_event
    from streams.testing.cohort import chain_events

    raw = [{"type": "JobStarted", "job_id": "A", "seq": 0, "incarnation": 0, "ts": 1, "cohort_id": "c",
            "base_model": "m", "base_checkpoint_id": None, "config_hash": None},
           {"type": "CheckpointWritten", "job_id": "A", "seq": 1, "incarnation": 0, "ts": 2, "checkpoint_id": "A-1",
            "step": 1, "epoch": 0, "content_hash": "h", "uri": "u"},
           {"type": "CheckpointDeleted", "job_id": "A", "seq": 2, "incarnation": 0, "ts": 3, "checkpoint_id": "A-1"}]
    chained = list(chain_events(raw))
    ev = parse_event(chained[2])
    assert canonical_bytes(ev) == f"CheckpointDeleted\0A\x002\x000\x003\0{ev.prev_hash}\0A-1\0".encode()
    lin = Lineage()
    for d in chained:
        lin.apply(parse_event(d))
    assert not lin.state.jobs["A"].halt_reasons
    tampered = dict(chained[2], checkpoint_id="A-2")
    lin2 = Lineage()
    for d in chained[:2] + [tampered]:
        lin2.apply(parse_event(d))
    assert "CHAIN_BROKEN" in lin2.state.jobs["A"].halt_reasons


def _deletion_log(tmp_path, deleted: list[str]):
    from streams.testing.simulate import simulate_pipeline

    lines = [{"type": "JobStarted", "job_id": "A", "seq": 0, "incarnation": 0, "ts": 1, "cohort_id": "c",
              "base_model": "m", "base_checkpoint_id": None, "config_hash": None}]
    for n in range(1, 7):
        lines.append({"type": "CheckpointWritten", "job_id": "A", "seq": n, "incarnation": 0, "ts": 10 * n,
                      "checkpoint_id": f"A-{n}", "step": n, "epoch": 0, "content_hash": f"h{n}", "uri": f"u{n}"})
    for k, ck in enumerate(deleted):  # in the second batch: after the first tick decided
        lines.append({"type": "CheckpointDeleted", "job_id": "A", "seq": 7 + k, "incarnation": 0, "ts": 70 + k,
                      "checkpoint_id": ck})
    src = tmp_path / "log.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return simulate_pipeline(str(src), horizon_ms=5)


def test_the_audit_re_derives_every_notice_and_names_a_deletion_of_a_pinned_checkpoint(tmp_path):
    from streams.audit.run import audit

    ok = audit(_deletion_log(tmp_path, ["A-1", "A-2"]))  # superseded when the first tick decided
    assert ok.passed, [f.line() for c in ok.checks for f in c.failures]
    dele = next(c for c in ok.checks if c.name == "deletions")
    assert dele.checked == 2 and not dele.failures
    notices = [r for r in ok.recomputed["control"] if r[1] == "RetentionNotice"]
    assert notices  # recomputed, and held equal to the topic's (the commands check passed)

    bad = audit(_deletion_log(tmp_path, ["A-1", "A-6"]))  # the latest, pinned
    dele = next(c for c in bad.checks if c.name == "deletions")
    assert not bad.passed and len(dele.failures) == 1
    f = dele.failures[0]
    assert f.job_id == "A" and f.found == "A-6" and "not marked deletable" in f.what


def test_a_tampered_notice_fails_the_commands_check(tmp_path):
    from streams.audit.run import audit
    from streams.codec import Codec
    from streams.files.archive import LogRecord

    log = _deletion_log(tmp_path, [])
    codec = Codec()
    recs = log.records["control"]
    for i, r in enumerate(recs):
        name, value = codec.decode_record(r.value)
        if name == "RetentionNotice" and value["deletable"]:
            value = {**value, "deletable": value["deletable"] + [{"checkpoint_id": "A-6", "reason": "superseded",
                                                                  "by": "A-7"}]}
            recs[i] = LogRecord(r.topic, r.partition, r.offset, r.timestamp, r.key,
                                codec.encode_record(name, value))
            break
    else:
        raise AssertionError("no notice with something deletable")
    report = audit(log)
    cmds = next(c for c in report.checks if c.name == "commands")
    assert not report.passed and any("RetentionNotice" in f.what for f in cmds.failures)


def test_a_recovering_worker_counts_the_notices_on_the_topic_as_published():
    from streams.control.fold import ControlState

    state = ControlState()
    state.add("RetentionNotice", {"command_id": "n1", "job_id": "A", "version": 1, "deletable": [], "kept": []})
    assert state.command_ids == {"n1"} and state.plans == {} and state.ignored == 1


def test_the_worker_settings_of_retention():
    import pytest

    from streams.worker.settings import WorkerSettings, parse_cohort_horizons

    assert parse_cohort_horizons("a=60, b=none,,c=0.5") == {"a": 60_000, "b": None, "c": 500}
    for bad in ("a", "=5", "a=x", "a=-1"):
        with pytest.raises(ValueError):
            parse_cohort_horizons(bad)
    s = WorkerSettings.from_env({"TRAINTRACE_SETTLE_HORIZON": "600", "TRAINTRACE_COHORT_SETTLE_HORIZONS": "fast=30,keep=none",
                                 "TRAINTRACE_RETENTION_INTERVAL": "2"}, default_bootstrap="x:9")
    assert s.horizon_of("other") == 600_000 and s.horizon_of("fast") == 30_000 and s.horizon_of("keep") is None
    assert s.retention_on and s.retention_interval_s == 2.0
    assert not WorkerSettings.from_env({}, default_bootstrap="x:9").retention_on
    with pytest.raises(ValueError, match="TRAINTRACE_COHORT_SETTLE_HORIZONS"):
        WorkerSettings.from_env({"TRAINTRACE_COHORT_SETTLE_HORIZONS": "oops"}, default_bootstrap="x:9")


def test_with_the_horizon_broken_every_job_still_restores_something_clean():
    """A quarter of the horizon the logs keep: some plans target deleted checkpoints; for each,
    the job's fallback (the newest surviving checkpoint of its ancestry older than the target, or
    its base) is clean, and no deletion it made was of a pinned checkpoint."""
    from .test_retention import late_cohort
    from streams.core.events import event_to_dict

    subs: list = []
    for seed in range(24):
        _plans, _t, _d, pinned, _n = run_with_deletions([event_to_dict(e) for e in late_cohort(seed)],
                                                       late_cohort.horizon(seed) // 4, 80, random.Random(seed),
                                                       substitutes=subs)
        assert not pinned
    assert subs, "the broken horizon deleted no target: the test is vacuous"
    dirty = [s for s in subs if not s[3]]
    assert not dirty, dirty[:5]
