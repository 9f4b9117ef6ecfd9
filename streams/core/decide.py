"""Decisions: what changed after events were folded (the agent publishes these).

:class:`Lineage` is the one entry point the live agents, ``analyze``, ``audit`` and the demo
use: ``apply(event)`` folds one event and returns the decisions it caused; ``apply_many``
folds a batch and decides once (same final state, fewer intermediate decisions).

Only what the fold marked dirty is recomputed: attribution of the divergences whose evidence
changed, the plans of the jobs touched, the views of the incidents touched.

Every event the fold accepts (not a duplicate, not refused as out of order or conflicting) is
also appended to the cohort's *fold log*, ``Lineage.log``: an append-only RFC 6962 log of the
leaves ``head_leaf(job_id, seq, hash)`` (:mod:`streams.core.commitment`) in fold order, kept
as a :class:`~streams.core.merkle.CompactRange` (O(log n) space, O(1) amortised per event).
Its root and size go into the cohort's commitment (``log_root``, ``log_size``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from streams.core.commitment import event_leaf
from streams.core.events import (CheckpointConsumed, CheckpointDeleted, CheckpointWritten, DivergenceReported, Event,
                                 JobStarted, RolledBack)
from streams.core.ids import hash_parts
from streams.core.merkle import CompactRange
from streams.core.seals import HELD, SealGate
from streams.core.project import (
    EXTERNAL,
    RawVerdict,
    Verdict,
    aliased_checkpoint,
    output,
    incident_views,
    plan_for,
    raw_verdict,
    resolve_raw,
)
from streams.core.retention import RetentionBook, RetentionChanged
from streams.core.state import Checkpoint, Config, FoldResult, LineageState, SourceKey


@dataclass(frozen=True, slots=True)
class CheckpointTainted:
    checkpoint_id: str
    job_id: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class PlanChanged:
    """A job's effective plan changed. ``plan`` None: its current ancestry is clean now."""

    job_id: str
    plan: dict[str, Any] | None
    supersedes: str | None  # command_id of the plan it replaces


@dataclass(frozen=True, slots=True)
class HaltIssued:
    job_id: str
    cohort_id: str | None
    reason: str
    detail: str
    command_id: str


@dataclass(frozen=True, slots=True)
class IncidentChanged:
    """An incident's view changed. ``change``: OPENED, WIDENED, UPDATED, REATTRIBUTED, SUPERSEDED.

    ``view`` is the new view; for REATTRIBUTED (the root became a symptom of another incident)
    and SUPERSEDED (the onset moved, so the incident id changed) it is the last view, with
    ``merged_into`` naming where its scope went.
    """

    incident_id: str
    change: str
    view: dict[str, Any]
    merged_into: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AlertRaised:
    kind: str
    job_id: str | None
    cohort_id: str | None
    message: str
    checkpoint_id: str | None = None
    incident_id: str | None = None
    details: dict[str, str] = field(default_factory=dict)


Decision = CheckpointTainted | PlanChanged | HaltIssued | IncidentChanged | AlertRaised | RetentionChanged

#: the events that bear on retention (Progress and JobFinished change no checkpoint's status)
_RETENTION_EVENTS = frozenset({JobStarted, CheckpointWritten, RolledBack, CheckpointDeleted, CheckpointConsumed,
                               DivergenceReported})


def halt_command_id(job_id: str, reason: str) -> str:
    return hash_parts(("HALT", job_id, reason))


class Lineage:
    """The core's application object: state + cached projections + decision diffing."""

    def __init__(self, config: Config | None = None) -> None:
        self.state = LineageState(config)
        self.seals = SealGate(self.state.jobs, self.state.config.seals)
        self._raw: dict[SourceKey, RawVerdict] = {}
        self.verdicts: dict[SourceKey, Verdict] = {}
        self.plans: dict[str, dict[str, Any]] = {}
        self.incidents: dict[str, dict[str, Any]] = {}
        self._dependents: dict[SourceKey, set[SourceKey]] = {}  # s -> divergences attributed to s
        self._members: dict[str, set[SourceKey]] = {}  # incident -> divergences resolving to it
        self._plans_by_incident: dict[str, set[str]] = {}
        self._halted: set[str] = set()
        self._alerted: set[tuple[str, str]] = set()
        #: the fold log: one leaf per accepted event, in fold order
        self.log = CompactRange()
        #: retention (SPEC §13): what was last decided per job (:meth:`retention_tick`)
        self.retention = RetentionBook()

    @property
    def config(self) -> Config:
        return self.state.config

    # -------------------------------------------------------------- folding

    def fold(self, event: Event, now_ms: int | None = None, canonical: Any = None, ref: Any = None) -> FoldResult:
        """Fold without deciding (call :meth:`decide` later). An accepted event is appended
        to the fold log. ``canonical``: see :meth:`LineageState.fold`.

        The seal gate (:mod:`streams.core.seals`) comes first: an event of a job that declared a
        key may be held (``result.held``), may release events held before (``result.released``)
        or be refused; every refusal — of this event or of held ones — is in ``result.refused``
        as (``ref`` given with that event, event, kind, reason)."""
        if self.seals.passes(event):
            result = self.state.fold(event, now_ms, canonical)
            if result.accepted:
                self._accepted(event)
            return result
        return self._fold_gated(event, now_ms, canonical, ref)

    def _fold_gated(self, event: Event, now_ms: int | None, canonical: Any, ref: Any) -> FoldResult:
        adm = self.seals.admit(event, canonical, ref)
        if adm is HELD:
            waiting = FoldResult()
            waiting.accepted = False
            waiting.held = True
            return waiting
        main: FoldResult | None = None
        released: list[Event] = []
        refused = list(adm.refused)
        for h in adm.fold:
            res = self.state.fold(h.event, now_ms, h.canonical, h.checked)
            if res.accepted:
                self._accepted(h.event)
            if h.event is event:
                main = res
            elif res.accepted:
                released.append(h.event)
            elif not res.duplicate:
                reasons = "; ".join(f"{r}: {d}" for r, d in res.guard) or "refused by the fold"
                refused.append((h.ref, h.event, res.guard[0][0] if res.guard else "REJECTED", reasons))
        if main is None:
            main = FoldResult()
            main.accepted = False
            main.held = adm.held
        main.released = released
        main.refused = refused
        return main

    def _accepted(self, event: Event) -> None:
        """An event the state took: a leaf of the fold log; retention may have changed."""
        self.log.append(event_leaf(event))
        if type(event) in _RETENTION_EVENTS:
            self.book().dirty = True

    def unsealed(self) -> list[tuple[Any, Event, str, str]]:
        """At the end of an offline log: every event still waiting for a seal, refused."""
        return self.seals.unsealed()

    def apply(self, event: Event, now_ms: int | None = None) -> list[Decision]:
        self.fold(event, now_ms)
        return self.decide()

    def apply_many(self, events: Iterable[Event], now_ms: int | None = None) -> list[Decision]:
        for ev in events:
            self.fold(ev, now_ms)
        return self.decide()

    def finish_input(self) -> list[Decision]:
        """End of an offline log: every still-unresolved source halts its consumer (SPEC §8)."""
        self.state.expire_unresolved(None)
        return self.decide()

    def tick(self, now_ms: int, grace_ms: int) -> list[Decision]:
        """Live: unresolved sources older than the grace period halt their consumers."""
        self.state.expire_unresolved(now_ms, grace_ms)
        return self.decide()

    def release(self) -> None:
        """This engine is done with (its cohort left memory, its partition was revoked): let
        refcounting free its state at once (:meth:`LineageState.release`). It cannot fold again."""
        self.state.release()

    def book(self) -> RetentionBook:
        """The retention book (one is made for an engine restored from a snapshot of before
        schemas v9, which had none)."""
        book = self.__dict__.get("retention")
        if book is None:
            book = self.retention = RetentionBook()
        return book

    def retention_due(self, watermark_ms: int, horizon_ms: int) -> bool:
        """Whether a retention tick at this watermark could change what was decided."""
        return self.book().due(watermark_ms, horizon_ms)

    def retention_tick(self, watermark_ms: int, horizon_ms: int) -> list[Decision]:
        """SPEC §13 at the input watermark ``watermark_ms`` with settle horizon ``horizon_ms``:
        a :class:`RetentionChanged` for every job whose deletable or kept checkpoints changed
        since the last tick (after the decisions the fold still owes)."""
        out = self.decide()
        out.extend(self.book().tick(self.state, watermark_ms, horizon_ms))
        return out

    # -------------------------------------------------------------- deciding

    def decide(self) -> list[Decision]:
        """What changed since the last call, as decisions, in this order: checkpoints tainted,
        plans, incidents, halts, unrecorded sharing. Only what the dirty sets name is
        recomputed, so the cost follows the change, not the history."""
        dirty = self.state.take_dirty()
        out: list[Decision] = [CheckpointTainted(ck.id, ck.job_id, ck.incarnation) for ck in dirty.tainted]
        old_verdicts = self.verdicts
        changed_divs = self._update_verdicts(dirty.divs)
        dirty_incidents = self._update_plans(dirty.jobs, changed_divs, out)
        for s in dirty.sources | changed_divs:
            for vs in (self.verdicts.get(s), old_verdicts.get(s)):
                if vs is not None:
                    dirty_incidents.update(vs.incident_ids)
                    if vs.verdict != EXTERNAL:
                        dirty_incidents.add(vs.own_incident_id)
        if dirty_incidents:
            self._update_incidents(dirty_incidents, out)
        self._halts(dirty.halts, out)
        self._unrecorded_sharing(dirty.aliases, out)
        if dirty.tainted:
            self.book().dirty = True
        deletions = self.state.__dict__.pop("deletions", None)
        if deletions:
            self._judge_deletions(deletions, out)
        return out

    def _judge_deletions(self, deletions: list[tuple[str, str, int]], out: list[Decision]) -> None:
        """An alert for each recorded deletion of a checkpoint never marked deletable (SPEC §13:
        a job deletes a checkpoint only after the referee marked it deletable)."""
        for j in self.book().judge(self.state, deletions):
            job = self.state.jobs.get(j.job_id)
            out.append(AlertRaised(
                "DELETED_PINNED", j.job_id, job.cohort_id if job else None,
                f"{j.job_id} deleted checkpoint {j.checkpoint_id} (seq {j.seq}), which the referee had not "
                f"marked deletable ({j.why}): a rollback may now lack its target",
                checkpoint_id=j.checkpoint_id, details={"seq": str(j.seq), "why": j.why}))

    def _update_verdicts(self, divs: Iterable[SourceKey]) -> set[SourceKey]:
        """Recompute the attribution of the divergences whose evidence changed; return the
        divergences whose verdict changed (the incident membership index follows)."""
        st = self.state
        raw_changed: set[SourceKey] = set()
        for k in divs:
            inc = st.diverged.get(k)
            if inc is None or inc.onset is None:
                continue
            rv = raw_verdict(st, inc)
            old_rv = self._raw.get(k)
            if old_rv != rv:
                if old_rv is not None:
                    for s in old_rv[2]:
                        self._dependents.get(s, set()).discard(k)
                for s in rv[2]:
                    self._dependents.setdefault(s, set()).add(k)
                self._raw[k] = rv
                raw_changed.add(k)
        changed_divs: set[SourceKey] = set()
        if not raw_changed:
            return changed_divs
        old_verdicts = self.verdicts
        new_verdicts = resolve_raw(self._raw, old_verdicts, raw_changed, self._dependents)
        for k in new_verdicts.keys() | old_verdicts.keys():
            old_v, new_v = old_verdicts.get(k), new_verdicts.get(k)
            if new_v == old_v:
                continue
            changed_divs.add(k)
            if old_v is not None:
                for x in old_v.incident_ids:
                    self._members.get(x, set()).discard(k)
            if new_v is not None:
                for x in new_v.incident_ids:
                    self._members.setdefault(x, set()).add(k)
        self.verdicts = new_verdicts
        return changed_divs

    def _update_plans(self, dirty_jobs: Iterable[str], changed_divs: set[SourceKey],
                      out: list[Decision]) -> set[str]:
        """Re-plan the jobs touched (their own, or holders of a divergence whose verdict
        changed); append a PlanChanged per plan that changed; return the incidents those plans
        name (before and after)."""
        st = self.state
        jobs = set(dirty_jobs)
        for k in changed_divs:
            jobs.add(k[0])
            for holder in st.src_holders.get(k, ()):
                jobs.add(holder[0])
        dirty_incidents: set[str] = set()
        for job_id in sorted(jobs):
            job = st.jobs.get(job_id)
            new = plan_for(st, job, self.verdicts) if job is not None else None
            old = self.plans.get(job_id)
            if new == old:
                continue
            if old is not None:
                dirty_incidents.update(old["incident_ids"])
                for x in old["incident_ids"]:
                    self._plans_by_incident.get(x, set()).discard(job_id)
            if new is None:
                del self.plans[job_id]
            else:
                self.plans[job_id] = new
                dirty_incidents.update(new["incident_ids"])
                for x in new["incident_ids"]:
                    self._plans_by_incident.setdefault(x, set()).add(job_id)
            out.append(PlanChanged(job_id, new, old["command_id"] if old else None))
        return dirty_incidents

    def _update_incidents(self, dirty_incidents: set[str], out: list[Decision]) -> None:
        """Recompute the views of the incidents touched; append an IncidentChanged for each that
        opened, widened, changed or closed."""
        views = incident_views(self.state, self.verdicts, self.plans, only=dirty_incidents,
                               members_index=self._members, plans_index=self._plans_by_incident)
        for x in sorted(dirty_incidents):
            old_view = self.incidents.get(x)
            new_view = views.get(x)
            if new_view == old_view:
                continue
            if new_view is None:
                assert old_view is not None  # the views differ: the incident had one
                del self.incidents[x]
                out.append(self._closed(x, old_view))
                continue
            self.incidents[x] = new_view
            if old_view is None:
                change = "OPENED"
            elif (len(new_view["contaminated"]) > len(old_view["contaminated"])
                  or len(new_view["tainted_checkpoints"]) > len(old_view["tainted_checkpoints"])):
                change = "WIDENED"
            else:
                change = "UPDATED"
            out.append(IncidentChanged(x, change, new_view))

    def _halts(self, halts: Iterable[tuple[str, str, str]], out: list[Decision]) -> None:
        """The guard's halts (SPEC §8), each job once: a HaltIssued and its alert."""
        for job_id, reason, detail in halts:
            if job_id in self._halted:
                continue
            self._halted.add(job_id)
            job = self.state.jobs[job_id]
            out.append(HaltIssued(job_id, job.cohort_id, reason, detail, halt_command_id(job_id, reason)))
            out.append(AlertRaised("HALT", job_id, job.cohort_id, f"{job_id} halted: {reason}: {detail}",
                                   details={"reason": reason}))

    def _unrecorded_sharing(self, aliases: Iterable[Checkpoint], out: list[Decision]) -> None:
        """T3: a checkpoint with the content of a tainted one its job never recorded consuming
        raises one alert."""
        st = self.state
        for ck in aliases:
            if (ck.job_id, ck.id) in self._alerted:
                continue
            inc = st.incarnation((ck.job_id, ck.incarnation))
            assert inc is not None  # a checkpoint is written by an incarnation of its job
            recorded = any(
                c.seq < ck.seq and (src := st.checkpoints.get(c.checkpoint_id)) is not None
                and src.content_hash == ck.content_hash
                for c in inc.consumptions.values()
            )
            if recorded:
                continue
            self._alerted.add((ck.job_id, ck.id))
            aliased = aliased_checkpoint(st, ck)
            job = st.jobs[ck.job_id]
            out.append(AlertRaised(
                "UNRECORDED_SHARING", ck.job_id, job.cohort_id,
                f"{ck.id} has the content of {aliased.id if aliased else 'a tainted checkpoint'} "
                "but the job recorded no consumption of it",
                checkpoint_id=ck.id,
                details={"aliased_checkpoint_id": aliased.id if aliased else ""},
            ))

    def _closed(self, x: str, old_view: dict[str, Any]) -> IncidentChanged:
        root = old_view["root"]
        key = (root["job_id"], root["incarnation"])
        v = self.verdicts.get(key)
        if v is not None and v.verdict == EXTERNAL:
            return IncidentChanged(x, "REATTRIBUTED", {**old_view, "verdict": EXTERNAL,
                                                       "attributed_to": sorted(v.incident_ids)},
                                   tuple(sorted(v.incident_ids)))
        merged = (v.own_incident_id,) if v is not None else ()
        return IncidentChanged(x, "SUPERSEDED", old_view, merged)

    # -------------------------------------------------------------- views

    def final_state(self) -> dict[str, Any]:
        """SPEC §11 output from the cached projections (equal to ``project.final_state``)."""
        self.decide()
        return output(self.state, self.incidents, self.plans)
