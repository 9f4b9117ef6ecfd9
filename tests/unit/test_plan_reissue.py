"""A plan whose content changes under its command id is published again (streams.referee.referee).

SPEC §10's ``command_id`` covers a plan's incidents, job, incarnation, action and target, not a
``QUARANTINE``'s ``quarantined_checkpoint_ids``. When a job's events reach the worker in another
order than the file's (``lineage.events`` is keyed by job), a finished job can get its notice
before one of its checkpoints is found tainted by an incident the notice already names: the
list grows, the id stays. The topic must still end with what the fold decided.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from streams.audit.run import audit
from streams.codec import Codec
from streams.control.fold import ControlState
from streams.core.cohorts import CohortLineage, CohortRouter
from streams.core.events import parse_event
from streams.referee.referee import Referee
from streams.testing.cohort import generate_cohorts, interleave_jobs
from streams.testing.simulate import simulate_pipeline

CODEC = Codec()
SEEDS = range(24)


@cache
def cohort() -> list[dict]:
    return list(generate_cohorts(jobs=12, cohort_size=6, steps=300, seed=0, divergence_rate=0.4,
                                 exploit_every=20, exploit_prob=0.7, alias_prob=0.15))


@cache
def offline_plans() -> dict[str, dict]:
    lin = CohortLineage()
    lin.apply_many(parse_event(d) for d in cohort())
    return {p["job_id"]: p for p in lin.final_state()["plans"]}


def arrival(seed: int) -> list[dict]:
    return interleave_jobs(cohort(), random.Random(seed))


def fold_live(events: list[dict], referee: Referee | None = None, publish: bool = True, t0: int = 1_000):
    referee = referee or Referee()
    router = CohortRouter()
    out = []
    for i, d in enumerate(events):
        ev = parse_event(d)
        out.extend(referee.handle(router.route(ev), ev, t0 + i, partition=0, publish=publish).emissions)
    return referee, out


def on_topic(emissions) -> ControlState:
    """The fold of the control records as a worker reads them back: encoded, then decoded."""
    st = ControlState()
    for em in emissions:
        if em.topic == "control":
            st.add(*CODEC.decode_record(CODEC.encode_record(em.record, em.value)))
    return st


def reissued(emissions) -> list[str]:
    n = Counter(em.value["command_id"] for em in emissions if em.record == "QuarantineNotice")
    return sorted(cid for cid, k in n.items() if k > 1)


def first_reissue() -> int:
    for seed in SEEDS:
        if reissued(fold_live(arrival(seed))[1]):
            return seed
    raise AssertionError(f"no arrival order of {len(SEEDS)} re-issues a plan: the test lost its case")


def test_in_any_arrival_order_the_topic_ends_with_the_folds_plans():
    want = offline_plans()
    for seed in SEEDS:
        got = on_topic(fold_live(arrival(seed))[1]).plans
        assert got == want, seed


def test_a_notice_whose_list_grew_is_published_again_under_its_id():
    _ref, out = fold_live(arrival(first_reissue()))
    cid = reissued(out)[0]
    notices = [em.value for em in out if em.record == "QuarantineNotice" and em.value["command_id"] == cid]
    first, last = notices[0], notices[-1]
    assert len(last["quarantined_checkpoint_ids"]) > len(first["quarantined_checkpoint_ids"])
    assert set(first["quarantined_checkpoint_ids"]) <= set(last["quarantined_checkpoint_ids"])
    # it supersedes what the first version superseded, never itself
    assert last["supersedes"] == first["supersedes"] != cid
    assert last["quarantined_checkpoint_ids"] == offline_plans()[last["job_id"]]["quarantined_checkpoint_ids"]
    # nothing else goes out twice
    ids = [em.value["command_id"] for em in out if em.topic == "control" and em.value["command_id"] != cid]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("on_disk", [False, True], ids=["in-memory", "rocksdb"])
def test_a_takeover_publishes_the_new_content_a_lost_reissue_had(on_disk, tmp_path):
    """The old owner's re-issue never got out; the new owner replays, learns what the topic
    holds (the first version in force) and reconciles: it publishes the new content. The same
    with the new owner's published ids and plans in force in RocksDBs, as a worker keeps them
    (streams.worker.rocks)."""
    events = arrival(first_reissue())
    _old, out = fold_live(events)
    cid = reissued(out)[0]
    last = max(i for i, em in enumerate(out) if em.topic == "control" and em.value["command_id"] == cid)
    sent = [em for i, em in enumerate(out) if em.topic == "control" and i != last]
    topic = on_topic(sent)
    assert topic.plans != offline_plans()
    new, replayed = fold_live(events, publish=False)
    assert replayed == []
    if on_disk:
        from streams.worker.rocks import open_disk_map, open_disk_set

        published = open_disk_set(tmp_path / "published", "ids", new.published)
        in_force = open_disk_map(tmp_path / "in-force", "plans", new.in_force)
        assert published is not None and in_force is not None
        new.published, new.in_force = published, in_force
    new.published |= topic.command_ids
    new.learn_in_force(topic.in_force)
    fixed = [em for em in new.reconcile(0, topic.last_plans, 10**9) if em.topic == "control"]
    assert [(em.record, em.value["command_id"]) for em in fixed] == [("QuarantineNotice", cid)]
    assert on_topic(sent + fixed).plans == offline_plans()
    # and once it is out, nothing is left to send
    new.learn_in_force(on_topic(sent + fixed).in_force)
    assert [em for em in new.reconcile(0, topic.last_plans, 10**9) if em.topic == "control"] == []


def test_the_audit_holds_both_versions_and_misses_a_lost_one(tmp_path: Path):
    src = tmp_path / "arrival.jsonl"
    src.write_text("".join(json.dumps(d) + "\n" for d in arrival(first_reissue())))
    log = simulate_pipeline(str(src))
    report = audit(log)
    assert report.passed, [f.line() for c in report.checks for f in c.failures]
    control = log.topic("control")
    names = [CODEC.decode_record(r.value) for r in control]
    cids = Counter(rec["command_id"] for name, rec in names if name == "QuarantineNotice")
    cid = next(c for c, k in cids.items() if k > 1)
    # drop the last version: the topic's plan in force is stale, and the audit says so
    at = max(i for i, (name, rec) in enumerate(names) if rec["command_id"] == cid)
    del log.records["control"][at]
    report = audit(log)
    failing = [f for c in report.checks if c.name == "commands" for f in c.failures]
    assert any(cid[:12] in f.what and "missing QuarantineNotice" in f.what for f in failing), failing


def test_openlineage_tells_the_longer_list_and_not_a_copy():
    from streams.openlineage.mapping import OpenLineageMapper

    _ref, out = fold_live(arrival(first_reissue()))
    cid = reissued(out)[0]
    notices = [em for em in out if em.record == "QuarantineNotice" and em.value["command_id"] == cid]
    mapper = OpenLineageMapper()
    told = [e["run"]["facets"]["traintrace_plan"].get("quarantinedCheckpointIds")
            for em in (*notices, *notices) for e in mapper.on_record(em.typed)]
    assert told == [em.value["quarantined_checkpoint_ids"] or None for em in notices]
