"""What must hold after the live pipeline has processed a log, whatever happened to the workers.

Checked record by record against the topics (not by totals), so a test names the event that
went wrong. Used by the churn, outage and kill tests (and the fault suite):

- :func:`log_differences` / :func:`assert_log_on_topic`: ``lineage.events`` holds every event of the
  log the test fed (each job's in the log's order): otherwise the live pipeline folded other input
  than the offline fold it is compared with (a produce that failed), whatever the workers did;
- :func:`routing_report` / :func:`assert_routed_once_in_order`: every valid record of
  ``lineage.events`` reaches ``lineage.by-cohort`` (its first copy in the job's own order),
  nothing else does, and re-routed copies are byte-identical;
- :func:`assert_live_equals_offline`: the effective plans, the quarantines and the latest
  manifests published equal the offline fold (``analyze``) of the same events;
- :func:`assert_commands_consistent`: no command id twice with different content;
- :func:`dlq_origins`: what the dead-letter topic holds, by original position.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from streams.kafka.topics import TopicNames
from streams.kafka.reader import read_to_end
from streams.control.commands import PLAN_RECORDS, plan_content
from streams.codec import Codec, DecodeError
from streams.core.errors import InvalidEvent
from streams.core.cohorts import UNREGISTERED_COHORT
from streams.core.events import JobStarted, parse_event
from streams.operator_commands.plans import effective_plans

CODEC = Codec()
PLAN_FIELDS = ("job_id", "incarnation", "action", "target_checkpoint_id", "target_step", "incident_ids",
               "command_id")


@dataclass
class RoutingReport:
    """How ``lineage.events`` was routed into ``lineage.by-cohort``."""

    valid: int = 0
    invalid: list[tuple[int, int]] = field(default_factory=list)
    routed: int = 0  # routed entries, copies included
    duplicates: int = 0  # routed entries beyond the first of their origin
    missing: list[tuple[int, int, str, int]] = field(default_factory=list)  # (p, o, job, seq)
    unknown: list[tuple[int, int]] = field(default_factory=list)  # routed, not a valid events record
    reordered: list[str] = field(default_factory=list)  # job: first copies out of the log's order
    changed: list[tuple[int, int]] = field(default_factory=list)  # routed bytes differ from the log
    #: routed to another cohort than its job's first JobStarted names ("" before it): (p, o, job,
    #: routed to, should be)
    miscohorted: list[tuple[int, int, str, str, str]] = field(default_factory=list)
    ticks: int = 0
    #: cohorts whose records are in more than one by-cohort partition: cohort -> partitions (a
    #: cohort is folded by one engine, so by the owner of one partition)
    split: dict[str, list[int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unknown or self.reordered or self.changed or self.miscohorted
                    or self.split)

    def describe(self) -> str:
        return (f"{self.valid} valid events, {len(self.invalid)} invalid, {self.routed} routed "
                f"({self.duplicates} re-routed copies), missing {self.missing[:8]} "
                f"({len(self.missing)}), not on the log {self.unknown[:5]}, out of order {self.reordered[:8]} "
                f"({len(self.reordered)}), changed {self.changed[:5]}, to the wrong cohort {self.miscohorted[:5]} "
                f"({len(self.miscohorted)}), cohorts in two partitions {sorted(self.split.items())[:5]}")


#: the valid records of lineage.events by origin (value, job, seq, cohort), and the origins of the invalid
EventsLog = tuple[dict[tuple[int, int], tuple[bytes, str, int, str]], list[tuple[int, int]]]


def _events_log(bootstrap: str, topics: TopicNames) -> tuple[dict[tuple[int, int], tuple[bytes, str, int, str]],
                                                             list[tuple[int, int]]]:
    """The valid records of ``lineage.events`` by origin: (value, job, seq, the cohort it must
    be routed to), and the origins of the invalid ones."""
    valid: dict[tuple[int, int], tuple[bytes, str, int, str]] = {}
    invalid: list[tuple[int, int]] = []
    cohort_of: dict[str, str] = {}  # a job's events are in one partition: its first JobStarted wins
    for m in sorted(read_to_end(bootstrap, topics.events), key=lambda m: (m.partition, m.offset)):
        try:
            ev = parse_event(CODEC.decode_event(m.value))
        except (DecodeError, InvalidEvent):
            invalid.append((m.partition, m.offset))
            continue
        if m.key is not None and m.key != ev.job_id.encode():
            invalid.append((m.partition, m.offset))
            continue
        if isinstance(ev, JobStarted):
            cohort_of.setdefault(ev.job_id, ev.cohort_id)
        valid[(m.partition, m.offset)] = (m.value, ev.job_id, ev.seq, cohort_of.get(ev.job_id, UNREGISTERED_COHORT))
    return valid, invalid


def log_differences(bootstrap: str, topics: TopicNames, log: str, events: EventsLog | None = None) -> list[str]:
    """Where ``lineage.events`` does not hold the events of the JSON-lines ``log`` (what the test
    fed): :func:`seq_differences` of each job's seqs in the log and on the topic (offset order).
    Empty when they agree."""
    import json

    want: dict[str, list[int]] = defaultdict(list)
    with open(log, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                d = json.loads(line)
                want[d["job_id"]].append(d["seq"])
    valid, _invalid = events if events is not None else _events_log(bootstrap, topics)
    got: dict[str, list[int]] = defaultdict(list)
    for origin in sorted(valid):
        _v, job, seq, _cohort = valid[origin]
        got[job].append(seq)
    return seq_differences(want, got)


def seq_differences(want: dict[str, list[int]], got: dict[str, list[int]]) -> list[str]:
    """Per job, where the seqs ``got`` (on the topic) differ from those ``want`` (the log): seqs
    missing, seqs extra, or the same seqs in another order; repeated seqs count once (an
    identical redelivery)."""
    out = []
    for job in sorted(set(want) | set(got)):
        w, g = list(dict.fromkeys(want.get(job, []))), list(dict.fromkeys(got.get(job, [])))
        if w == g:
            continue
        missing = [s for s in w if s not in set(g)]
        extra = [s for s in g if s not in set(w)]
        words = []
        if missing:
            words.append(f"seqs {missing[:6]} of the log not on the topic")
        if extra:
            words.append(f"seqs {extra[:6]} on the topic not in the log")
        if not words:
            words.append(f"in another order (topic {g[:8]}, log {w[:8]})")
        out.append(f"{job}: {', '.join(words)}")
    return out


def assert_log_on_topic(bootstrap: str, topics: TopicNames, log: str, events: EventsLog | None = None) -> None:
    """``lineage.events`` holds the log the test fed, each job's events in its order: said first,
    since a live-vs-offline difference means nothing about the workers otherwise."""
    diff = log_differences(bootstrap, topics, log, events)
    assert not diff, (f"{topics.events} does not hold the events the test fed ({len(diff)} job(s)): "
                      f"{'; '.join(diff[:6])}")


def routing_report(bootstrap: str, topics: TopicNames, events: EventsLog | None = None) -> RoutingReport:
    """How ``lineage.events`` (``events``: as :func:`_events_log` read it already) was routed."""
    valid, invalid = events if events is not None else _events_log(bootstrap, topics)
    rep = RoutingReport(valid=len(valid), invalid=invalid)
    first: dict[tuple[int, int], int] = {}  # origin -> position of its first routed copy
    seen_order: dict[str, list[tuple[int, int]]] = defaultdict(list)
    partitions_of: dict[str, set[int]] = defaultdict(set)
    # a job lives in one cohort, so in one by-cohort partition: read each partition in order
    for n, m in enumerate(read_to_end(bootstrap, topics.by_cohort)):
        _name, batch = CODEC.decode_record(m.value)
        partitions_of[batch["cohort_id"]].add(m.partition)
        if batch.get("tick_ms") is not None:
            rep.ticks += 1
            continue
        for r in batch["events"]:
            rep.routed += 1
            origin = (r["partition"], r["offset"])
            have = valid.get(origin)
            if have is None:
                rep.unknown.append(origin)
                continue
            if have[0] != r["value"]:
                rep.changed.append(origin)
            if have[3] != batch["cohort_id"]:
                rep.miscohorted.append((*origin, have[1], batch["cohort_id"], have[3]))
            if origin in first:
                rep.duplicates += 1
                continue
            first[origin] = n
            seen_order[have[1]].append(origin)
    rep.split = {c: sorted(ps) for c, ps in partitions_of.items() if len(ps) > 1}
    by_job: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for origin in sorted(valid):
        _v, job, seq, _cohort = valid[origin]
        by_job[job].append(origin)
        if origin not in first:
            rep.missing.append((*origin, job, seq))
    for job, origins in by_job.items():
        got = seen_order.get(job, [])
        want = [o for o in origins if o in first]
        if got != want:
            i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            rep.reordered.append(f"{job}: routed {got[i:i + 3]} where the log has {want[i:i + 3]}")
    return rep


def assert_routed_once_in_order(bootstrap: str, topics: TopicNames, allow_copies: bool = True,
                                events: EventsLog | None = None) -> RoutingReport:
    """Every valid event routed, first copies in each job's order, copies identical; with
    ``allow_copies`` False (no worker was killed) not even a re-routed copy."""
    rep = routing_report(bootstrap, topics, events)
    assert rep.ok, rep.describe()
    if not allow_copies:
        assert rep.duplicates == 0, rep.describe()
    return rep


def latest_manifests(bootstrap: str, topics: TopicNames) -> dict[str, dict]:
    latest: dict[str, dict] = {}
    for msg in read_to_end(bootstrap, topics.manifests):
        _name, rec = CODEC.decode_record(msg.value)
        if rec["incident_id"] not in latest or rec["version"] >= latest[rec["incident_id"]]["version"]:
            latest[rec["incident_id"]] = rec
    return latest


def control_records(bootstrap: str, topics: TopicNames) -> list[tuple[str, dict[str, Any], bytes]]:
    return [(*CODEC.decode_record(m.value), m.value) for m in read_to_end(bootstrap, topics.control)]


def alert_records(bootstrap: str, topics: TopicNames) -> list[dict[str, Any]]:
    """Every record of ``lineage.alerts``, decoded, in partition then offset order."""
    return [CODEC.decode_record(m.value)[1] for m in read_to_end(bootstrap, topics.alerts)]


def assert_commands_consistent(bootstrap: str, topics: TopicNames, allow_copies: bool = True) -> int:
    """No command id on ``lineage.control`` with two different records for one content; returns
    how many identical re-published copies there are (0 required unless ``allow_copies``). A plan
    issued again under its id with new content (a quarantine list that grew:
    :mod:`streams.referee.referee`) is no copy."""
    seen: dict[tuple[str, tuple[Any, ...]], bytes] = {}
    copies = 0
    differ = []
    for name, rec, raw in control_records(bootstrap, topics):
        cid = rec["command_id"]
        key = (cid, plan_content(rec) if name in PLAN_RECORDS else ())
        if key in seen:
            copies += 1
            if seen[key] != raw:
                differ.append(cid)
        else:
            seen[key] = raw
    assert not differ, f"command ids published twice with different content: {differ[:5]}"
    if not allow_copies:
        assert copies == 0, f"{copies} command(s) published twice"
    return copies


def dlq_origins(bootstrap: str, topics: TopicNames) -> dict[tuple[str, int, int], str]:
    out = {}
    for m in read_to_end(bootstrap, topics.dlq):
        _n, d = CODEC.decode_record(m.value)
        out[(d["original_topic"], d["original_partition"], d["original_offset"])] = d["error_kind"]
    return out


def assert_live_equals_offline(bootstrap: str, topics: TopicNames, offline: dict, halts: bool = True) -> None:
    """The effective plans (and halts) on ``lineage.control`` and the latest manifests equal the
    offline fold ``offline`` (the JSON of ``analyze``)."""
    live = effective_plans(bootstrap, topics, CODEC)
    live_jobs = {p["job_id"]: p["command_id"] for p in live["plans"]}
    want_jobs = {p["job_id"]: p["command_id"] for p in offline["plans"]}
    diff = {j: (live_jobs.get(j), want_jobs.get(j)) for j in live_jobs.keys() | want_jobs.keys()
            if live_jobs.get(j) != want_jobs.get(j)}
    if diff:
        first = sorted(diff)[0]
        trail = [(n, r.get("incarnation"), r.get("action"), r["command_id"][:8], (r.get("supersedes") or "")[:8])
                 for n, r, _raw in control_records(bootstrap, topics) if r["job_id"] == first]
        raise AssertionError(f"plans differ for {len(diff)} job(s): {sorted(diff)[:10]}; "
                             f"control records of {first}: {trail}; live halts {live['halts'][:5]}; "
                             f"routing: {routing_report(bootstrap, topics).describe()}")
    assert [{k: p[k] for k in PLAN_FIELDS} for p in live["plans"]] == [
        {k: p[k] for k in PLAN_FIELDS} for p in offline["plans"]]
    quarantined = {p["job_id"]: p.get("quarantined_checkpoint_ids") for p in offline["plans"]
                   if p["action"] == "QUARANTINE"}
    got_q = {p["job_id"]: p.get("quarantined_checkpoint_ids") for p in live["plans"] if p["action"] == "QUARANTINE"}
    wrong = sorted(j for j in got_q.keys() | quarantined.keys() if got_q.get(j) != quarantined.get(j))
    assert not wrong, (f"quarantine lists differ for {wrong[:5]}: live {[got_q.get(j) for j in wrong[:2]]}, "
                       f"offline {[quarantined.get(j) for j in wrong[:2]]}")
    if halts:
        got = sorted((h["job_id"], h["reason"]) for h in live["halts"])
        want = sorted((h["job_id"], h["reason"]) for h in offline["halts"])
        assert got == want, (f"halts differ: live only {sorted(set(got) - set(want))[:10]}, "
                             f"offline only {sorted(set(want) - set(got))[:10]}")
    manifests = latest_manifests(bootstrap, topics)
    for inc in offline["incidents"]:
        m = manifests.get(inc["incident_id"])
        assert m is not None, f"no manifest for {inc['incident_id']}"
        assert m["root"] == inc["root"] and m["verdict"] == inc["verdict"]
        assert [(c["job_id"], c["incarnation"], c["via_checkpoint_id"]) for c in m["contaminated"]] == [
            (c["job_id"], c["incarnation"], c["via_checkpoint_id"]) for c in inc["contaminated"]]
        assert m["secondary_divergences"] == inc["secondary_divergences"]
        assert sorted(p["command_id"] for p in m["plans"]) == sorted(
            p["command_id"] for p in offline["plans"] if inc["incident_id"] in p["incident_ids"])
    open_ids = {i["incident_id"] for i in offline["incidents"]}
    for x, m in manifests.items():
        if x not in open_ids:  # closed: re-attributed or superseded, and says so
            assert m["attributed_to"] and not m["plans"], m


def every_source_written(analysis: Any) -> bool:
    """Whether every consumption of the analysed log names a checkpoint some event of it writes
    (no cohort has an unresolved source at its end, SPEC §8): then no clock tick of the
    processor's grace period can halt anything once the log is folded. False when unknown."""
    lineage = getattr(analysis, "lineage", None)
    if lineage is None:
        return False
    return not any(engine.state.unresolved for engine in lineage.cohorts.values())


def check_pipeline(bootstrap: str, topics: TopicNames, app_id: str, log: str, poison: int,
                   allow_copies: bool = True, grace_s: float = 0.0, settle_timeout: float = 180.0,
                   trusted_keys: Any = None, split: bool = False) -> dict:
    """Every invariant above, once the pipeline has settled: the group's committed offsets reach
    the end of both inputs (:func:`~streams.devtools.worker_process.wait_quiescent`, again after a grace
    period ``grace_s`` whose tick may still be running, when a consumption names a checkpoint no event
    writes: :func:`every_source_written`), the events topic holding the events file ``log``
    (:func:`assert_log_on_topic`), every valid event routed once and in order, the DLQ exactly
    the ``poison`` records, live equals ``analyze`` of ``log``, no command id with two contents,
    and ``audit`` of the topics passes (snapshots included). ``split``: the workers run the stages
    apart (``--stages route`` / ``fold``: the events committed by the route group). Returns what was
    measured."""
    import time

    from streams.audit.analyze import analyze_file
    from streams.audit.run import audit
    from streams.audit.log import load_topics
    from streams.devtools.worker_process import wait_quiescent

    analysis = analyze_file(str(log))
    wait_quiescent(bootstrap, app_id, topics, timeout=settle_timeout, split=split)
    if grace_s and not every_source_written(analysis):
        # a consumption whose source no event writes waits out the grace period live, then
        # a clock tick halts its job: give it the time (none can be pending otherwise: once the
        # pipeline is quiescent every CheckpointWritten is folded, and nothing is unresolved)
        time.sleep(grace_s + 1)
        wait_quiescent(bootstrap, app_id, topics, timeout=60, split=split)
    events = _events_log(bootstrap, topics)  # read once for both checks
    assert_log_on_topic(bootstrap, topics, log, events)
    routing = assert_routed_once_in_order(bootstrap, topics, allow_copies=allow_copies, events=events)
    assert len(routing.invalid) == poison, (len(routing.invalid), poison)
    dead = dlq_origins(bootstrap, topics)
    assert {(p, o) for (_t, p, o) in dead} == set(routing.invalid), (
        f"the DLQ is not exactly the poison: {sorted(dead.items())[:8]} vs {routing.invalid[:8]}")
    offline = analysis.result
    kwargs = {} if trusted_keys is None else {"trusted_keys": trusted_keys}
    try:
        assert_live_equals_offline(bootstrap, topics, offline)
    except AssertionError as exc:
        # where a worker's state left the log's: the audit re-folds the topics and names the
        # first commitment or snapshot published from a state the log does not give
        try:
            found = [f.line() for c in audit(load_topics(bootstrap, topics), **kwargs).checks for f in c.failures]
        except Exception as audit_exc:  # the diagnosis must not hide the failure
            found = [f"(the audit could not run: {audit_exc!r})"]
        raise AssertionError(f"{exc}\nthe audit of the topics: {found[:12] or 'passes'}") from exc
    copies = assert_commands_consistent(bootstrap, topics)
    report = audit(load_topics(bootstrap, topics), **kwargs)
    assert report.passed, [f.line() for c in report.checks for f in c.failures][:10]
    return {"routing": routing, "command_copies": copies, "offline": offline, "audit": report}
