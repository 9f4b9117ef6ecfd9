"""When a worker's snapshot round goes ahead (streams.worker.snapshots): a large cohort that trains
on is not re-encoded every round, and settled cohorts do not stay in memory because a round would
re-encode one (issue 27: a fresh worker after a 1M takeover held four times the cohorts of a 100k
one, settled cohorts whose last round never came)."""

from __future__ import annotations

import pytest

from streams.codec import Codec
from streams.core.events import parse_event
from streams.referee import snapshots as images
from streams.referee.referee import Referee
from streams.testing.cohort import generate_cohorts
from streams.worker.settings import WorkerSettings
from streams.worker.snapshots import REWRITE_FACTOR, Latest, SnapshotStore, round_is_due


@pytest.mark.parametrize("folded,rewritten,freed,due", [
    (0, 0, 0, False),            # nothing folded since: never
    (10, 0, 0, True),            # only new cohorts: written
    (10, 5, 0, True),            # twice what it re-encodes
    (9, 5, 0, False),            # less: the large cohort waits
    (1, 10_000, 0, False),       # a huge training cohort, a trickle of input
    (1, 10_000, 10_000, True),   # ...but as much settled to let go: it goes
    (1, 10_000, 9_999, False),   # less settled than re-encoded: it waits
    (3, 0, 50, True),
])
def test_round_is_due(folded, rewritten, freed, due):
    assert round_is_due(folded, rewritten, freed) is due
    assert REWRITE_FACTOR == 2


def _events(cohort: str, finished: bool) -> list[dict]:
    """A cohort of two jobs, every one finished or none."""
    out = [d for d in generate_cohorts(jobs=2, cohort_size=2, steps=60, seed=3, prefix=f"{cohort}-",
                                       divergence_rate=0.0, exploit_every=1000)
           if d["type"] != "JobFinished"]
    c = out[0]["cohort_id"]
    last: dict[str, dict] = {}
    for d in out:
        last[d["job_id"]] = d
    if finished:
        out += [{"type": "JobFinished", "job_id": j, "seq": d["seq"] + 1, "incarnation": d["incarnation"],
                 "ts": d["ts"] + 1, "status": "SUCCEEDED", "final_checkpoint_id": None} for j, d in last.items()]
    return [dict(d, cohort_id=cohort) if d["type"] == "JobStarted" else d for d in out] if c else out


def _store(evict: bool) -> tuple[SnapshotStore, Referee]:
    referee = Referee()
    offset = 0
    for cohort, finished in (("training", False), ("settled", True)):
        for d in _events(cohort, finished):
            referee.handle(cohort, parse_event(d), 1_000 + offset, partition=0, publish=False)
            referee.position[cohort] = (0, offset)  # as fold_batch notes it
            offset += 1
    store = SnapshotStore(WorkerSettings("127.0.0.1:1", evict_settled=evict), Codec(), referee)
    for cohort in ("training", "settled"):  # each had a snapshot at offset 2, input since
        store.latest[cohort] = Latest(covers=2, offset=0, settled=False, events=100)
    return store, referee


def test_settled_cohorts_count_as_freed_when_the_worker_evicts():
    store, referee = _store(evict=True)
    rewritten, freed = store._rewritten(0, True)
    assert rewritten == 100  # the training cohort's last snapshot
    assert images.settled(referee.engines["settled"]) and not images.settled(referee.engines["training"])
    assert freed == referee.engines["settled"].state.events_folded > 0
    assert store._rewritten(0, False) == (200, 0)  # kept in memory: both are re-encoded


def test_a_cohort_without_input_since_its_snapshot_is_not_counted():
    store, referee = _store(evict=True)
    store.latest["training"] = Latest(covers=10_000, offset=0, settled=False, events=100)
    assert store._rewritten(0, True) == (0, referee.engines["settled"].state.events_folded)
    assert store._rewritten(1, True) == (0, 0)  # another partition


def _quiet_store(evict_idle: bool) -> tuple[SnapshotStore, Referee]:
    store, referee = _store(evict=True)
    store.settings = WorkerSettings("127.0.0.1:1", evict_settled=True, evict_idle=evict_idle, evict_idle_after_s=0)
    for cohort in ("training", "settled"):  # snapshots after all their input: no input since
        store.latest[cohort] = Latest(covers=10_000, offset=0, settled=cohort == "settled", events=100)
    return store, referee


def test_an_idle_quiescent_cohort_leaves_memory_with_evict_idle():
    store, referee = _quiet_store(evict_idle=True)
    assert images.quiescent(referee.engines["training"]) and not images.settled(referee.engines["training"])
    rnd = store.begin_round(0, 10_001)  # nothing changed: nothing written, no producer needed
    assert rnd.written == {} and rnd.idle == ["settled", "training"]
    assert store.settle_round(rnd) == 2
    assert referee.engines == {} and store.out_of_memory == {"settled": 0, "training": 0}


def test_without_evict_idle_an_idle_training_cohort_stays():
    store, referee = _quiet_store(evict_idle=False)
    rnd = store.begin_round(0, 10_001)
    assert rnd.idle == []
    store.settle_round(rnd)
    assert set(referee.engines) == {"settled", "training"}  # only written settled cohorts leave


def _diverged(referee: Referee, publish: bool):
    """Cohort ``d``: every job diverges, nobody rolls back or finishes (plans stand unacknowledged)."""
    dicts = [d for d in generate_cohorts(jobs=4, cohort_size=4, steps=200, seed=5, prefix="d-", divergence_rate=1.0,
                                         exploit_every=20, exploit_prob=1.0)
             if d["type"] not in ("RolledBack", "JobFinished")]
    for i, d in enumerate(dicts):
        referee.handle("d", parse_event(d), 1_000 + i, partition=0, publish=publish)
    return referee.engines["d"]


def test_a_plan_not_acknowledged_keeps_a_cohort_unsettled_but_not_busy():
    referee = Referee()
    lin = _diverged(referee, publish=False)
    assert any(p is not None for p in lin.plans.values())
    assert images.quiescent(lin) and not images.settled(lin)


def test_a_consumption_waiting_for_its_source_keeps_a_cohort_in_memory():
    """Its grace-period halt is on the clock: the cohort is not quiescent."""
    referee = Referee()
    dicts = [d for d in generate_cohorts(jobs=2, cohort_size=2, steps=40, seed=1, prefix="u-", divergence_rate=0.0,
                                         exploit_every=1000)]
    job = dicts[0]["job_id"]
    last = max(d["seq"] for d in dicts if d["job_id"] == job)
    dicts = [d for d in dicts if d["type"] != "JobFinished"]
    dicts.append({"type": "CheckpointConsumed", "job_id": job, "seq": last + 1, "incarnation": 0, "ts": 10**6,
                  "source_checkpoint_id": "nobody-wrote-this", "step": 41, "mode": "MERGE"})
    for i, d in enumerate(dicts):
        referee.handle("u", parse_event(d), 1_000 + i, partition=0, publish=False)
    lin = referee.engines["u"]
    assert lin.state.unresolved and not images.quiescent(lin)


def test_an_idle_cohort_with_an_unacknowledged_command_leaves_memory_and_still_alerts():
    """The acknowledgement would be input (which brings the cohort back), so until then the plan
    stands: the referee keeps the command and its action, and the timeout alerts once."""
    referee = Referee(ack_timeout_ms=1_000)
    lin = _diverged(referee, publish=True)
    pending = {cid: v for cid, v in referee.issued.items() if v[0] == "d"}
    assert pending and images.quiescent(lin)
    actions = {cid: lin.plans[v[1]]["action"] for cid, v in pending.items()}
    referee.forget_cohorts(["d"], idle=True)
    assert "d" not in referee.engines and referee.resting == actions
    alerts = referee.tick(10**9)
    assert sorted(a.value["details"]["command_id"] for a in alerts if a.value["kind"] == "COMMAND_UNACKNOWLEDGED") \
        == sorted(pending)
    assert referee.tick(10**9 + 1) == []  # once
    referee.forget_cohorts(["d"])  # its partition revoked: the next owner knows them
    assert referee.resting == {} and not any(v[0] == "d" for v in referee.issued.values())


# ----------------------------------------------------------------- the views of resting cohorts


def test_a_cohort_that_leaves_memory_keeps_its_view_rows():
    """Issue 27: eviction is the default, so /jobs, /incidents and /plans show the cohorts out of
    memory from the rows kept when they left (streams.worker.resting), the same rows as before."""
    from streams.worker.resting import counts_of, rows_of

    store, referee = _quiet_store(evict_idle=True)
    before = {c: (rows_of(c, lin), counts_of(lin)) for c, lin in referee.engines.items()}
    assert before["training"][0][0] and all(r["cohort_id"] == "training" for r in before["training"][0][0])
    store.settle_round(store.begin_round(0, 10_001))
    assert referee.engines == {}
    for cohort, (rows, counts) in before.items():
        assert store.resting_rows(cohort) == rows
        assert store.resting.counts[cohort] == counts
    assert store.resting.totals() == tuple(map(sum, zip(*(c for _r, c in before.values()))))
    store.drop_partition(0)  # revoked: the next owner shows them
    assert store.resting.rows == {} and store.resting.counts == {} and store.resting_rows("training") is None


def test_a_resting_cohort_without_rows_is_shown_from_its_snapshot(monkeypatch):
    """A settled cohort left out of memory at a takeover was never decoded: its rows are made
    from its snapshot the first time a view asks, then kept."""
    from streams.worker.resting import rows_of

    store, referee = _quiet_store(evict_idle=True)
    expected = rows_of("settled", referee.engines["settled"])
    encoded = images.encode(referee, "settled")
    value = {"cohort_id": "settled", "state": encoded, "digest": images.digest(encoded)}
    reads: list[tuple] = []
    monkeypatch.setattr(store, "_read_at", lambda c, p, o: reads.append((c, p, o)) or value)
    referee.forget_cohorts(["settled"])
    store.out_of_memory["settled"] = 0
    assert store.resting_rows("settled") == expected
    assert store.resting_rows("settled") == expected and reads == [("settled", 0, 0)]  # read once
    assert store.resting_rows("training") is None  # in memory: not resting


def test_a_cohort_whose_retention_is_still_to_come_stays_in_memory():
    """SPEC §13 under a settle horizon: a retention tick needs the cohort in memory, so a cohort
    with checkpoints whose retention may still change does not leave it (idle or settled)."""
    store, referee = _quiet_store(evict_idle=True)
    lin = referee.engines["training"]
    assert lin.state.checkpoints
    store.settings = WorkerSettings("127.0.0.1:1", evict_settled=True, evict_idle=True, evict_idle_after_s=0,
                                    cohort_horizons_ms={"training": 60_000})
    assert not store.may_rest("training", lin, settled_only=False)
    assert store.may_rest("settled", referee.engines["settled"])  # no horizon of its own
    rnd = store.begin_round(0, 10_001)
    assert rnd.idle == ["settled"]
    store.settle_round(rnd)
    assert set(referee.engines) == {"training"}


def test_an_idle_cohort_leaves_memory_only_once_quiet_for_evict_idle_after(monkeypatch):
    """A cohort whose input comes in bursts is not evicted at the first round that finds it
    quiet: only once rounds have seen it so for ``--evict-idle-after`` seconds (so a sparse
    cohort on a busy partition is brought back at most once per that interval)."""
    import time as _time

    store, referee = _quiet_store(evict_idle=True)
    store.settings = WorkerSettings("127.0.0.1:1", evict_settled=True, evict_idle=True, evict_idle_after_s=30)
    clock = [1_000.0]
    monkeypatch.setattr(_time, "monotonic", lambda: clock[0])
    rnd = store.begin_round(0, 10_001)
    assert rnd.idle == []  # first seen quiet now
    store.settle_round(rnd)
    clock[0] += 29
    assert store.begin_round(0, 10_002).idle == []
    clock[0] += 1
    rnd = store.begin_round(0, 10_003)
    assert rnd.idle == ["settled", "training"]
    store.settle_round(rnd)
    assert referee.engines == {} and store.quiet_since == {}


def test_an_idle_cohort_leaves_memory_once_the_worker_folded_twice_its_events(monkeypatch):
    """A backlog folds much more than ``--evict-idle-after`` seconds of input in that time: a
    cohort it passed leaves memory once the worker has folded, since a round first saw it
    quiet, twice the events it holds and at least ``--snapshot-every`` (bringing it back costs
    a small part of that), not only after the seconds: a worker catching up does not hold every
    cohort of the backlog. Counted in the worker's events on all its partitions, not only the
    cohort's (on a backlog whose cohorts train one after another, the partition of one that
    finished may have no input for most of the catch-up), in rounds and in looks between them."""
    import time as _time

    from streams.worker.snapshots import quiet_events

    store, referee = _quiet_store(evict_idle=True)
    store.settings = WorkerSettings("127.0.0.1:1", evict_settled=True, evict_idle=True, evict_idle_after_s=30,
                                    snapshot_every=10, snapshot_interval_s=0)
    clock = [1_000.0]
    monkeypatch.setattr(_time, "monotonic", lambda: clock[0])
    everywhere = [0]
    store.folded_everywhere = lambda: everywhere[0]  # as the fold stage counts them
    held = {c: lin.state.events_folded for c, lin in referee.engines.items()}
    assert held["settled"] > held["training"] > 5  # so twice the events, not --snapshot-every, decides
    need = {c: quiet_events(store.settings, n) for c, n in held.items()}
    assert need == {c: 2 * n for c, n in held.items()}
    assert quiet_events(store.settings, 2) == 10  # a small cohort: --snapshot-every
    rnd = store.begin_round(0, 10_001, folded=5_000)  # first seen quiet (input of other cohorts of partition 0)
    assert rnd.idle == []
    store.settle_round(rnd)
    everywhere[0] = need["training"] - 1  # folded on other partitions meanwhile
    assert store.begin_round(0, 10_002).idle == []
    everywhere[0] += 1  # the training cohort's twice
    rnd = store.begin_round(0, 10_003)
    assert rnd.idle == ["training"]
    store.settle_round(rnd)
    assert set(referee.engines) == {"settled"}
    everywhere[0] = need["settled"] - 1
    assert store.rest_idle(0) == 0  # (a look between rounds counts the same)
    everywhere[0] += 1
    assert store.rest_idle(0) == 1
    assert referee.engines == {} and clock[0] == 1_000.0  # no second passed


def test_without_the_fold_stage_the_quiet_counts_are_those_of_the_rounds(monkeypatch):
    """A store no fold stage counts for (tests, tools) counts what its rounds and looks were told
    folded: another partition's round counts too."""
    from streams.worker.snapshots import quiet_events

    store, referee = _quiet_store(evict_idle=True)
    store.settings = WorkerSettings("127.0.0.1:1", evict_settled=True, evict_idle=True, evict_idle_after_s=30,
                                    snapshot_every=10, snapshot_interval_s=0)
    need = quiet_events(store.settings, referee.engines["training"].state.events_folded)
    assert store.begin_round(0, 10_001).idle == []  # first seen quiet
    assert store.begin_round(1, 10_001, folded=need - 1).idle == []  # another partition: none of its cohorts
    assert store.rest_idle(0, folded=0) == 0
    assert store.begin_round(1, 10_002, folded=1).idle == []
    assert store.rest_idle(0) == 1 and set(referee.engines) == {"settled"}


def _written_round(store: SnapshotStore, covers: int, folded: int):
    """A round of partition 0 at ``covers`` (``folded`` events since the last), delivered."""
    rnd = store.begin_round(0, covers, folded=folded)
    rnd.offsets = {c: 0 for c in rnd.written}
    return rnd


def _idle_settings(**kw) -> WorkerSettings:
    return WorkerSettings("127.0.0.1:1", **{"evict_settled": True, "evict_idle": True, "evict_idle_after_s": 3600,
                                            "snapshot_every": 10, **kw})


def test_a_cohort_quiet_since_the_round_that_wrote_it_leaves_once_its_partition_folded_twice_its_events(monkeypatch):
    """The quiet counts of a cohort start at the round that wrote its last input, not at the
    first round that finds it quiet after that: on a backlog, where rounds come every few tens of
    thousands of events, that cost every cohort one more round in memory."""
    from streams.worker.snapshots import quiet_events

    store, referee = _store(evict=True)
    store.settings = _idle_settings()
    monkeypatch.setattr(store, "_send", lambda *a, **k: None)
    covers = 1 + max(o for _p, o in referee.position.values())
    rnd = _written_round(store, covers, folded=1)  # written; quiet for one event before: stays
    assert sorted(rnd.written) == ["settled", "training"] and rnd.leaving == []
    store.settle_round(rnd)
    assert set(referee.engines) == {"training"}  # settled: it leaves after its round as before
    need = quiet_events(store.settings, referee.engines["training"].state.events_folded)
    rnd = _written_round(store, covers + 1, folded=need - 1)  # no input since: nothing to write
    assert rnd.written == {} and rnd.idle == []
    rnd = _written_round(store, covers + 2, folded=1)  # twice its events since the round that wrote it
    assert rnd.idle == ["training"]
    store.settle_round(rnd)
    assert referee.engines == {} and store.out_of_memory == {"settled": 0, "training": 0}


@pytest.mark.parametrize("per_record, leaves", [(1, False), (4, True)])
def test_a_cohort_quiet_long_before_the_round_that_writes_it_leaves_memory_after_it(monkeypatch, per_record, leaves):
    """A round writes every cohort with input since the last one. One whose last input came
    early in that stretch (its partition's records since, at the stretch's average events a
    record, hold twice its events) has been quiet long enough already: it leaves memory after
    this round, not a round later."""
    from streams.worker.snapshots import quiet_events

    store, referee = _store(evict=True)
    store.settings = _idle_settings()
    monkeypatch.setattr(store, "_send", lambda *a, **k: None)
    covers = 1 + max(o for _p, o in referee.position.values())
    since = covers - 1 - referee.position["training"][1]  # the records after the training cohort's last
    need = quiet_events(store.settings, referee.engines["training"].state.events_folded)
    assert since < need <= 4 * since  # at 1 event a record not quiet long enough; at 4, it is
    store.round_covers[0] = 0  # the last round
    rnd = _written_round(store, covers, folded=per_record * covers)
    assert sorted(rnd.written) == ["settled", "training"]
    assert rnd.leaving == (["training"] if leaves else [])
    store.settle_round(rnd)
    assert set(referee.engines) == (set() if leaves else {"training"})
    store2, referee2 = _store(evict=True)  # without --evict-idle it stays
    store2.settings = _idle_settings(evict_idle=False)
    monkeypatch.setattr(store2, "_send", lambda *a, **k: None)
    store2.round_covers[0] = 0
    assert _written_round(store2, covers, folded=4 * covers).leaving == []


@pytest.mark.parametrize("worker_per_record, leaves", [(1, False), (4, True)])
def test_quiet_before_a_round_counts_the_workers_events(monkeypatch, worker_per_record, leaves):
    """The same counted in the worker's events on all its partitions: a partition's records
    since the cohort's last input stand for the events the worker folded meanwhile (here one
    event a record on the cohort's partition, and ``worker_per_record`` on all of them)."""
    from streams.worker.snapshots import quiet_events

    store, referee = _store(evict=True)
    store.settings = _idle_settings()
    monkeypatch.setattr(store, "_send", lambda *a, **k: None)
    covers = 1 + max(o for _p, o in referee.position.values())
    since = covers - 1 - referee.position["training"][1]
    need = quiet_events(store.settings, referee.engines["training"].state.events_folded)
    assert since < need <= 4 * since
    everywhere = [1_000]
    store.folded_everywhere = lambda: everywhere[0]
    store.round_covers[0], store.round_everywhere[0] = 0, everywhere[0]  # the last round
    everywhere[0] += worker_per_record * covers
    rnd = _written_round(store, covers, folded=covers)  # one event a record on partition 0
    assert rnd.leaving == (["training"] if leaves else [])


def test_rows_that_cannot_be_kept_are_made_from_the_snapshot_instead(monkeypatch):
    """The rows are a cache: a store that refuses them (a full disk) costs a read, not a round."""
    store, referee = _quiet_store(evict_idle=True)

    class Refusing(dict):
        def __setitem__(self, key, value):
            raise OSError("No space left on device")

    store.resting.rows = Refusing()
    encoded = images.encode(referee, "training")
    value = {"cohort_id": "training", "state": encoded, "digest": images.digest(encoded)}
    from streams.worker.resting import rows_of

    expected = rows_of("training", referee.engines["training"])
    store.settle_round(store.begin_round(0, 10_001))
    assert referee.engines == {} and "training" in store.resting.counts
    monkeypatch.setattr(store, "_read_at", lambda c, p, o: value)
    assert store.resting_rows("training") == expected


class _Msg:
    def __init__(self, offset: int, value: dict):
        self._offset, self._value = offset, value

    def offset(self) -> int:
        return self._offset

    def value(self) -> dict:
        return self._value


@pytest.mark.parametrize("forgery", ["unsigned", "digest"])
def test_a_settled_snapshot_is_checked_before_it_is_left_out_of_memory(monkeypatch, forgery):
    """A settled cohort's snapshot is left out of memory at a takeover, never decoded; it is
    checked (signature, digest) as the scan reads it, and one that fails is refused like any
    other: the partition is re-folded from its start (seen live: a forged settled snapshot was
    left out of memory and its refusal never logged)."""
    from types import SimpleNamespace

    from streams.signing import SnapshotSigner
    from streams.signing.keys import generate_key
    from streams.worker import snapshots as mod

    _store_, referee = _quiet_store(evict_idle=True)
    key = generate_key()
    store = SnapshotStore(WorkerSettings("127.0.0.1:1", evict_settled=True), Codec(), Referee(),
                          signer=SimpleNamespace(private_key=key))
    sign = SnapshotSigner(key)
    encoded = images.encode(referee, "settled")
    good = sign({"type": "CohortSnapshot", "cohort_id": "settled", "partition": 0, "covers": 5, "settled": True,
                 "state": encoded, "digest": images.digest(encoded), "input_offset": 4,
                 "format": images.FORMAT, "ts": 1})
    bad = dict(good, signature=None, key_id=None) if forgery == "unsigned" else dict(good, digest="0" * 64)
    rnd = {"type": "SnapshotRound", "partition": 0, "covers": 6}

    def scan(log):
        monkeypatch.setattr(mod, "read_range", lambda *a, **k: [_Msg(i, v) for i, v in enumerate(log)])
        monkeypatch.setattr(store.codec, "decode_record", lambda v: (v["type"], v))
        store.latest.clear()
        store.out_of_memory.clear()
        return store.load(0, 10)

    assert scan([good, rnd]) == (6, {})
    assert store.out_of_memory == {"settled": 0} and store.latest["settled"].settled
    assert scan([good, rnd, dict(bad, covers=6)]) == (0, {})  # refused: re-fold from the start
    assert "settled" not in store.out_of_memory and "settled" not in store.referee.engines
    assert store.resting_rows("settled") is None


def test_a_partition_gone_quiet_lets_its_idle_cohorts_leave_memory_without_a_round(monkeypatch):
    """No input since the partition's last round: no round is due until its next input, so its
    idle cohorts are rested by ``rest_idle`` (at most every ``--snapshot-interval``), once seen
    quiet for ``--evict-idle-after`` seconds; nothing is written (their snapshots hold them)."""
    import time as _time

    store, referee = _quiet_store(evict_idle=True)
    store.settings = WorkerSettings("127.0.0.1:1", evict_settled=True, evict_idle=True, evict_idle_after_s=30,
                                    snapshot_interval_s=10)
    clock = [1_000.0]
    monkeypatch.setattr(_time, "monotonic", lambda: clock[0])
    store.last_round[0] = clock[0]
    assert store.rest_idle(0) == 0  # within the interval of the last round: not looked at
    clock[0] += 10
    assert store.rest_idle(0) == 0 and set(store.quiet_since) == {"settled", "training"}  # first seen quiet
    clock[0] += 5
    assert store.rest_idle(0) == 0  # looked at 5 s ago
    clock[0] += 25
    assert store.rest_idle(1) == 0  # another partition: none of its cohorts
    assert store.rest_idle(0) == 2  # quiet 30 s
    assert referee.engines == {} and store.out_of_memory == {"settled": 0, "training": 0}
    assert store._producer is None  # no round written


def test_rest_idle_leaves_a_cohort_with_input_since_its_snapshot(monkeypatch):
    store, referee = _quiet_store(evict_idle=True)
    store.latest["training"] = Latest(covers=0, offset=0, settled=False, events=100)  # input since
    store.settings = WorkerSettings("127.0.0.1:1", evict_settled=True, evict_idle=True, evict_idle_after_s=0,
                                    snapshot_interval_s=0)
    assert store.rest_idle(0) == 1 and set(referee.engines) == {"training"}
    off = WorkerSettings("127.0.0.1:1", evict_idle=False, evict_idle_after_s=0, snapshot_interval_s=0)
    store.settings = off
    store.latest["training"] = Latest(covers=10_000, offset=0, settled=False, events=100)
    assert store.rest_idle(0) == 0 and set(referee.engines) == {"training"}  # without --evict-idle


def test_a_partition_without_input_for_evict_idle_after_writes_its_last_input_and_lets_its_cohorts_go(monkeypatch):
    """A training cohort with a large snapshot and a little input since: no round is due for
    that little (``round_is_due``), so with input only by count or ``--snapshot-interval`` it
    stayed in memory until its partition folded twice its events, which a partition gone quiet
    may never do. Once the partition has had no input for ``--evict-idle-after`` seconds, a round
    writes that input and its quiescent cohorts leave memory after it."""
    import time as _time

    def setup(evict_idle: bool):
        store, referee = _store(evict=True)
        store.settings = WorkerSettings("127.0.0.1:1", evict_settled=True, evict_idle=evict_idle,
                                        evict_idle_after_s=30, snapshot_interval_s=3600, snapshot_every=20_000)
        store.latest["training"] = Latest(covers=2, offset=0, settled=False, events=10_000)  # large, input since
        store.latest["settled"] = Latest(covers=2, offset=0, settled=False, events=10_000)
        monkeypatch.setattr(store, "_send", lambda *a, **k: None)
        return store, referee

    clock = [1_000.0]
    monkeypatch.setattr(_time, "monotonic", lambda: clock[0])
    store, referee = setup(evict_idle=True)
    assert images.quiescent(referee.engines["training"]) and not images.settled(referee.engines["training"])
    assert not store.due(0, 5)  # the first look starts the clock
    clock[0] += 29
    assert not store.due(0, 6)  # input meanwhile: the clock starts again
    clock[0] += 29
    assert not store.due(0, 6)
    clock[0] += 1
    assert store.due(0, 6)  # 30 s without input
    assert not store.due(1, 6)  # (another partition: its own clock)
    rnd = store.begin_round(0, 10_001, folded=6)
    assert rnd.quiet and sorted(rnd.written) == ["settled", "training"]
    rnd.offsets = {c: i for i, c in enumerate(sorted(rnd.written))}
    assert store.settle_round(rnd) == 2
    assert referee.engines == {} and store.out_of_memory == {"settled": 0, "training": 0}
    assert not store.due(0, 0)

    store, referee = setup(evict_idle=False)  # --keep-idle: only the count or the interval
    assert not store.due(0, 6)
    clock[0] += 3_599
    assert not store.due(0, 6)


def test_a_partition_without_input_while_the_worker_folded_twice_its_largest_cohort_writes_it_and_lets_it_go(
        monkeypatch):
    """The same, counted in the worker's events: on a backlog the worker folds the next cohorts
    (on other partitions) long before ``--evict-idle-after`` seconds pass, and a partition whose
    cohorts stopped is written and let go once the worker folded :func:`quiet_events` of its
    largest cohort in memory, each of them then quiet that long."""
    import time as _time

    from streams.worker.snapshots import quiet_events

    monkeypatch.setattr(_time, "monotonic", lambda: 1_000.0)  # no second passes
    store, referee = _store(evict=True)
    store.settings = WorkerSettings("127.0.0.1:1", evict_settled=True, evict_idle=True, evict_idle_after_s=30,
                                    snapshot_interval_s=3600, snapshot_every=10)
    store.latest["training"] = Latest(covers=2, offset=0, settled=False, events=10_000)  # large, input since
    store.latest["settled"] = Latest(covers=2, offset=0, settled=False, events=10_000)
    monkeypatch.setattr(store, "_send", lambda *a, **k: None)
    everywhere = [100]
    store.folded_everywhere = lambda: everywhere[0]
    need = quiet_events(store.settings, max(lin.state.events_folded for lin in referee.engines.values()))
    assert need > store.settings.snapshot_every
    assert not store.due(0, 6)  # the first look starts the count
    everywhere[0] += need - 1
    assert not store.due(0, 6)
    everywhere[0] += 1
    assert not store.due(0, 7)  # input meanwhile: the count starts again
    everywhere[0] += need
    assert store.due(0, 7)
    rnd = store.begin_round(0, 10_001, folded=7)
    assert rnd.quiet and sorted(rnd.written) == ["settled", "training"]
    rnd.offsets = {c: i for i, c in enumerate(sorted(rnd.written))}
    assert store.settle_round(rnd) == 2
    assert referee.engines == {} and store.out_of_memory == {"settled": 0, "training": 0}
