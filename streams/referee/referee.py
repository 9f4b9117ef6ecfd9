"""The referee: the divergence agent's logic, without Kafka or Faust.

It holds one core engine per cohort (the cohorts of the partitions this worker owns), folds
each routed event, and turns the decisions into :class:`~streams.referee.records.Emission`
records for the output topics. It is deterministic in the events it is given: replaying a
partition from its start rebuilds exactly the state (engines, manifest versions, snapshots) a
crashed worker had, which is how a restarted or new worker recovers (see
``streams.worker.recovery``).

Commands are published at most once per ``command_id``: ``published`` holds the ids already
on ``lineage.control`` (read back on recovery), and a replayed decision is never re-sent. One
exception: the id of a plan does not cover all of its content (SPEC §10 hashes the incidents,
job, incarnation, action and target, not a ``QUARANTINE``'s ``quarantined_checkpoint_ids`` nor a
``target_step``), so when the plan in force on the topic changes in those alone — a finished
job's checkpoint found tainted after its notice went out, by an incident it already names — the
record is published again under the same id with the new content (``in_force``). Every reader
takes a job's last plan record as the one in force, so the topic ends with what the fold decided.

Commitments are signed by ``signer`` when one is given: a callable taking the unsigned record
and returning it with ``signature`` and ``key_id`` (e.g.
:class:`streams.signing.CommitmentSigner`; the referee itself knows no cryptography). Control
records are signed by ``control_signer`` (``(record name, record) -> record`` with ``signature``
and ``key_id``, e.g. :class:`streams.signing.ControlSigner`) as they are published: what the fold
decided stays unsigned (the audit's replay recomputes that), and since Ed25519 is deterministic
a recovering worker re-publishes a command byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, MutableMapping, MutableSet, Sequence

from streams.control.commands import PLAN_RECORDS, ControlCommand, plan_content
from streams.core.commitment import build_commitment, commitment_root, concurrency_snapshot
from streams.core.decide import (
    AlertRaised,
    CheckpointTainted,
    Decision,
    HaltIssued,
    IncidentChanged,
    Lineage,
    PlanChanged,
)
from streams.core.events import CheckpointWritten, Event, RolledBack
from streams.core.retention import RetentionChanged
from streams.core.state import Config, FoldResult
from streams.referee import records as R


@dataclass
class RefereeStats:
    events: int = 0
    duplicates: int = 0
    rejected: int = 0
    commands: int = 0
    manifests: int = 0
    alerts: int = 0
    halts: int = 0
    #: events waiting for their job's seal (:mod:`streams.core.seals`)
    held: int = 0


@dataclass
class Handled:
    result: FoldResult
    emissions: list[R.Emission] = field(default_factory=list)


Signer = Callable[[dict[str, Any]], dict[str, Any]]
ControlSigner = Callable[[str, dict[str, Any]], dict[str, Any]]


class Referee:
    def __init__(self, config: Config | None = None, ack_timeout_ms: int = 300_000,
                 signer: Signer | None = None, control_signer: ControlSigner | None = None) -> None:
        self.config = config or Config()
        self.ack_timeout_ms = ack_timeout_ms
        self.signer = signer
        self.control_signer = control_signer
        self.engines: dict[str, Lineage] = {}
        self.partition_of: dict[str, int] = {}
        self.versions: dict[str, int] = {}
        self.incident_cohort: dict[str, str] = {}
        self.snapshots: dict[str, list[dict[str, Any]]] = {}
        #: every command id on lineage.control (a worker keeps it in a RocksDB: streams.worker.rocks)
        self.published: MutableSet[str] = set()
        #: job -> (command_id, content) of the job's plan record in force on lineage.control
        #: (:func:`streams.control.commands.plan_content`): a plan whose content changes under
        #: the same id is published again (the module doc); a worker keeps it in a RocksDB too
        self.in_force: MutableMapping[str, tuple[str, tuple[Any, ...]]] = {}
        self.issued: dict[str, tuple[str, str, int]] = {}  # command_id -> (cohort, job, issued ms)
        self._unacked_alerted: set[str] = set()
        self._dirty_cohorts: set[str] = set()
        self._last_root: dict[str, tuple[str, str]] = {}
        #: cohort -> (partition, offset) of the last input record folded (see note_input)
        self.position: dict[str, tuple[int, int]] = {}
        # what the fold decided last, byte for byte, so a recovering worker re-publishes exactly
        # that (an audit re-deciding the log gets the same records): job -> plan record,
        # job -> halt record, incident -> manifest record of its current version
        self.decided_plan: dict[str, R.Emission] = {}
        self.decided_halt: dict[str, R.Emission] = {}
        self.decided_manifest: dict[str, R.Emission] = {}
        #: job -> its last RetentionNotice (SPEC §13)
        self.decided_retention: dict[str, R.Emission] = {}
        self.stats = RefereeStats()
        #: ``restorer(cohort)`` puts a cohort that left memory back from its snapshot (True), or
        #: knows none (False); the worker sets it (streams.worker.snapshots)
        self.restorer: Callable[[str], bool] | None = None
        #: command_id -> the plan's action, for the unacknowledged commands of cohorts that left
        #: memory idle (``forget_cohorts(..., idle=True)``): their acknowledgement would be input,
        #: which brings the cohort back, so until then the plan stands and :meth:`tick` can alert
        self.resting: dict[str, str] = {}

    # ------------------------------------------------------------------ engines

    def engine(self, cohort: str, partition: int | None = None) -> Lineage:
        lin = self.engines.get(cohort)
        if lin is None and self.restorer is not None and self.restorer(cohort):
            lin = self.engines.get(cohort)  # a cohort that left memory, back from its snapshot
        if lin is None:
            lin = self.engines[cohort] = Lineage(self.config)
        if partition is not None:
            self.partition_of[cohort] = partition
        return lin

    def drop_partition(self, partition: int) -> list[str]:
        """Forget the cohorts of a revoked partition (a later owner rebuilds them)."""
        gone = [c for c, p in self.partition_of.items() if p == partition]
        self.forget_cohorts(gone)
        return gone

    def forget_cohorts(self, gone: list[str], idle: bool = False) -> None:
        """Forget everything of these cohorts: a revoked partition's, or a settled cohort that
        leaves memory (its snapshot brings it back: ``restorer``). ``idle``: cohorts that leave
        memory with commands not acknowledged yet keep those in :attr:`issued` (with the plan's
        action in :attr:`resting`), so the acknowledgement timeout still alerts."""
        gone_set = set(gone)
        if idle:
            for cid, (c, job_id, _ms) in self.issued.items():
                lin = self.engines.get(c) if c in gone_set else None
                if lin is None:
                    continue
                plan = lin.plans.get(job_id)
                if plan is not None and plan.get("command_id") == cid and cid not in lin.state.acknowledged:
                    self.resting[cid] = plan["action"]
        for x in [x for x, c in self.incident_cohort.items() if c in gone_set]:
            # a later replay of the partition decides these versions again
            self.versions.pop(x, None)
            self.snapshots.pop(x, None)
            self.incident_cohort.pop(x, None)
        for c in gone:
            lin = self.engines.pop(c, None)
            self.partition_of.pop(c, None)
            self._dirty_cohorts.discard(c)
            self._last_root.pop(c, None)
            self.position.pop(c, None)
            if lin is not None:
                for j in lin.state.jobs:
                    self.decided_plan.pop(j, None)
                    self.decided_halt.pop(j, None)
                    self.decided_retention.pop(j, None)
                for x in lin.incidents:
                    self.decided_manifest.pop(x, None)
                lin.release()  # freed now, not at the collector's next full collection
        for cid in [cid for cid, v in self.issued.items() if v[0] in gone_set and cid not in self.resting]:
            del self.issued[cid]
        if not idle:
            for cid in [cid for cid in self.resting if self.issued.get(cid, (None,))[0] in gone_set]:
                self.resting.pop(cid)
                self.issued.pop(cid, None)

    # ------------------------------------------------------------------ events

    def handle(self, cohort: str, event: Event, now_ms: int, partition: int | None = None,
               publish: bool = True, canonical: Any = None, ref: Any = None) -> Handled:
        """Fold one routed event; return the records to publish (none when ``publish`` is
        False: a replay only rebuilds state, what it decides was published already). ``ref``
        comes back with the event if the seal gate refuses it, now or later
        (``result.refused``, :mod:`streams.core.seals`).

        This runs once for every event a worker folds, so what every event needs is inline and
        what only some need is not (issue 27: the wrapper cost 5 µs an event around the core's
        14): the decisions, rare, are turned into records by :meth:`_records_of`."""
        lin = self.engines.get(cohort)
        if lin is None:
            lin = self.engine(cohort, partition)
        elif partition is not None:
            self.partition_of[cohort] = partition
        seals = lin.seals
        held_before = seals.holding
        result = lin.fold(event, now_ms, canonical, ref)
        released, refused = result.released, result.refused
        stats = self.stats
        if result.accepted:
            folded: Sequence[Event] = (event, *released) if released else (event,)
        else:
            folded = released
            if not result.duplicate and not result.held and not refused:
                stats.rejected += 1
        if result.duplicate:
            stats.duplicates += 1
        stats.events += len(folded)
        if refused:
            stats.rejected += len(refused)
        if seals.holding != held_before:
            stats.held += seals.holding - held_before
        decisions = lin.decide()
        out: list[R.Emission] = []
        if folded:
            self._dirty_cohorts.add(cohort)
            for ev in folded:
                if isinstance(ev, CheckpointWritten):
                    ck = lin.state.checkpoints.get(ev.checkpoint_id)
                    if ck is not None and ck.job_id == ev.job_id and ck.seq == ev.seq and not ck.sources:
                        out.append(R.checkpoint_status(ck, lin.state.jobs[ck.job_id].cohort_id, [], now_ms))
                elif isinstance(ev, RolledBack) and ev.command_id is not None:
                    alert = self._substituted(ev, cohort, now_ms)
                    if alert is not None:
                        out.append(alert)
        if decisions:
            self._records_of(lin, cohort, decisions, now_ms, out)
        if not out:
            return Handled(result, out)
        return Handled(result, self._dedupe(out, publish))

    def _records_of(self, lin: Lineage, cohort: str, decisions: list[Decision], now_ms: int,
                    out: list[R.Emission]) -> None:
        """Append to ``out`` the records of one fold's decisions (:meth:`handle`)."""
        root: list[str | None] = []

        def current_root() -> str | None:
            if not root:
                root.append(commitment_root(lin))
            return root[0]

        for d in decisions:
            if isinstance(d, CheckpointTainted):
                ck = lin.state.checkpoints.get(d.checkpoint_id)
                if ck is None:
                    continue
                ids: set[str] = set()
                for s in ck.sources or ():
                    v = lin.verdicts.get(s)
                    if v is not None:
                        ids |= v.incident_ids
                out.append(R.checkpoint_status(ck, lin.state.jobs[ck.job_id].cohort_id, sorted(ids), now_ms))
            elif isinstance(d, PlanChanged):
                job = lin.state.jobs.get(d.job_id)
                inc = job.current.number if job is not None and job.current is not None else 0
                same = d.plan is not None and d.supersedes == d.plan["command_id"]
                if same:  # the plan changed under its id (the module doc): what it supersedes stays
                    prev = self.decided_plan.get(d.job_id)
                    d = PlanChanged(d.job_id, d.plan, prev.value.get("supersedes") if prev is not None
                                    and prev.command_id == d.supersedes else None)
                em = R.plan_emission(d, job.cohort_id if job else None, inc, now_ms, current_root())
                if em is not None:
                    out.append(em)
                    self.decided_plan[d.job_id] = em
                    if em.record == "RollbackCommand" and not same:
                        self.issued[em.value["command_id"]] = (cohort, d.job_id, now_ms)
                if d.supersedes is not None and not same:
                    self.issued.pop(d.supersedes, None)
            elif isinstance(d, HaltIssued):
                em = R.halt_emission(d, now_ms)
                self.decided_halt.setdefault(d.job_id, em)
                out.append(em)
            elif isinstance(d, IncidentChanged):
                version = self.versions.get(d.incident_id, 0) + 1
                self.versions[d.incident_id] = version
                self.incident_cohort[d.incident_id] = cohort
                snap = self.snapshots.get(d.incident_id)
                if snap is None:
                    snap = self.snapshots[d.incident_id] = concurrency_snapshot(lin)
                em = R.manifest_emission(d, version, snap, now_ms, current_root())
                self.decided_manifest[d.incident_id] = em
                out.append(em)
                alert = R.incident_alert(d, cohort, now_ms)
                if alert is not None:
                    out.append(alert)
            elif isinstance(d, AlertRaised):
                out.append(R.alert_emission(d, cohort, now_ms))

    def _substituted(self, ev: RolledBack, cohort: str, now_ms: int) -> R.Emission | None:
        """An alert when a job acknowledged the rollback command in force with a restore other
        than the one it asked for: its target was gone (rotated away, changed), so the job
        restored an older checkpoint of its own or its base (SPEC §13). The fold takes the
        restore as recorded; the operators hear of it."""
        em = self.decided_plan.get(ev.job_id)
        if em is None or em.record != "RollbackCommand" or em.value.get("command_id") != ev.command_id:
            return None
        action, target = em.value.get("action"), em.value.get("target_checkpoint_id")
        if action == "RESTART_FROM_SCRATCH":
            if ev.from_scratch:
                return None
        elif not ev.from_scratch and ev.restored_checkpoint_id == target:
            return None
        got = "a restart from scratch" if ev.from_scratch else (ev.restored_checkpoint_id or "its base")
        command_id = ev.command_id or ""  # it named the command in force (checked above)
        return R.alert_emission(AlertRaised(
            "RESTORE_SUBSTITUTED", ev.job_id, cohort,
            f"{ev.job_id} acknowledged {action} to {target or 'its base'} (command {command_id[:12]}) "
            f"by restoring {got}: the target could not be restored (deleted by rotation, or changed)",
            checkpoint_id=ev.restored_checkpoint_id,
            details={"command_id": command_id, "target_checkpoint_id": target or "",
                     "restored_checkpoint_id": ev.restored_checkpoint_id or ""}), cohort, now_ms)

    def _dedupe(self, out: list[R.Emission], publish: bool) -> list[R.Emission]:
        """Drop what is not to be published: everything in a replay (its state is reconciled
        afterwards, see :meth:`reconcile`), and commands already on ``lineage.control``."""
        if not publish:
            return []
        kept: list[R.Emission] = []
        for em in out:
            cid = em.command_id
            if cid is not None:
                if self.is_out(em):
                    continue
                self.published.add(cid)
                if em.record in PLAN_RECORDS:
                    self.in_force[em.key] = (cid, plan_content(em.value))
                if self.control_signer is not None:
                    em = R.Emission(em.topic, em.key, em.record, self.control_signer(em.record, em.value))
            kept.append(em)
            self._count(em)
        return kept

    def is_out(self, em: R.Emission) -> bool:
        """``em``, a control record, is on lineage.control already (or superseded there): its
        id is published, and it is not the job's plan in force with other content."""
        cid = em.command_id
        if cid not in self.published:
            return False
        if em.record not in PLAN_RECORDS:
            return True
        out = self.in_force.get(em.key)
        return out is None or out[0] != cid or out[1] == plan_content(em.value)

    def learn_in_force(self, plans: Mapping[str, ControlCommand]) -> None:
        """What lineage.control holds as each job's plan in force (job -> its last plan record,
        :attr:`streams.control.fold.ControlState.in_force`), read back on a takeover."""
        for job_id, cmd in plans.items():
            self.in_force[job_id] = (cmd.command_id, plan_content(cmd.record))

    def reconcile(self, partition: int, last_plan: dict[str, tuple[str, str]], now_ms: int) -> list[R.Emission]:
        """After a replay: publish what the rebuilt state decided and ``lineage.control`` lacks.

        A previous owner may have died (or lost the partition) after some of its offsets were
        committed but before their commands were out; the replay rebuilt the state without
        publishing, so compare: every job's last decided plan record (or its end), its halt,
        and the current version of every incident's manifest. What is re-published is the
        record the fold decided, byte for byte (its processor time is the time of the input
        record that caused it), so a re-published record equals the one an audit recomputes.
        ``last_plan`` is the last plan record per job on ``lineage.control``:
        job_id -> (record name, command_id).
        """
        out: list[R.Emission] = []
        for cohort in sorted(c for c, p in self.partition_of.items() if p == partition):
            lin = self.engines[cohort]
            for job_id in sorted(lin.state.jobs):
                em = self.decided_plan.get(job_id)
                if em is not None and not self.is_out(em):
                    last = last_plan.get(job_id)
                    # a clear of a plan that never got out is nothing to publish
                    if em.record != "PlanCleared" or (last is not None and last[0] != "PlanCleared"):
                        out.append(em)
                halt = self.decided_halt.get(job_id)
                if halt is not None and halt.command_id not in self.published:
                    out.append(halt)
                kept = self.decided_retention.get(job_id)
                if kept is not None and kept.command_id not in self.published:
                    out.append(kept)
            for x in sorted(lin.incidents):
                em = self.decided_manifest.get(x)
                if em is not None:
                    out.append(em)
        del now_ms  # kept in the signature: the records carry the time they were decided at
        return self._dedupe(out, True)

    def _count(self, em: R.Emission) -> None:
        if em.topic == "control":
            self.stats.commands += 1
            if em.record == "HaltCommand":
                self.stats.halts += 1
        elif em.topic == "manifests":
            self.stats.manifests += 1
        elif em.topic == "alerts":
            self.stats.alerts += 1

    # ------------------------------------------------------------------ timers

    def due_ticks(self, now_ms: int, grace_ms: int) -> list[str]:
        """The cohorts where a consumption of a checkpoint nobody wrote has waited the grace
        period and its job is not halted for it yet: each needs a clock tick in its input.

        The grace period runs on the processor's clock, which is not in the log; so instead of
        halting here, the worker appends a tick record (``EventBatch.tick_ms``) to the cohort's
        input and the fold applies it there (:meth:`clock_tick`), in order: a replay — a worker
        taking the partition over, an audit — halts the same jobs at the same point."""
        due: list[str] = []
        for cohort in sorted(self.engines):
            st = self.engines[cohort].state
            for waiting in st.unresolved.values():
                if any(seen is not None and now_ms - seen >= grace_ms
                       and "UNTRACEABLE_SOURCE" not in st.jobs[inc.job_id].halt_reasons
                       for inc, _c, seen in waiting):
                    due.append(cohort)
                    break
        return due

    def note_input(self, cohort: str, partition: int, offset: int) -> None:
        """The input record at ``partition``/``offset`` of ``cohort`` is folded: commitments
        taken from now on say so (``input_partition``/``input_offset``), which is the point of
        the input an audit recomputes them at."""
        self.position[cohort] = (partition, offset)

    def clock_tick(self, cohort: str, now_ms: int, grace_ms: int, partition: int | None = None,
                   publish: bool = True, horizon_ms: int | None = None) -> list[R.Emission]:
        """Fold a clock tick of ``cohort``'s input: unresolved sources older than the grace
        period halt their jobs (SPEC §8); with a settle horizon, the retention of the cohort's
        checkpoints at the tick's watermark (SPEC §13): a RetentionNotice for each job whose
        view changed."""
        lin = self.engine(cohort, partition)
        out: list[R.Emission] = []
        decisions = lin.tick(now_ms, grace_ms)
        if horizon_ms is not None:
            decisions.extend(lin.retention_tick(now_ms, horizon_ms))
        for d in decisions:
            self._dirty_cohorts.add(cohort)
            if isinstance(d, HaltIssued):
                em = R.halt_emission(d, now_ms)
                self.decided_halt.setdefault(d.job_id, em)
                out.append(em)
            elif isinstance(d, AlertRaised):
                out.append(R.alert_emission(d, cohort, now_ms))
            elif isinstance(d, RetentionChanged):
                em = R.retention_emission(d, now_ms)
                self.decided_retention[d.job_id] = em
                out.append(em)
        return self._dedupe(out, publish)

    def tick(self, now_ms: int, grace_ms: int | None = None) -> list[R.Emission]:
        """Unacknowledged commands past the acknowledgement timeout raise an alert (once).
        (Grace-period halts go through the cohort's input: :meth:`due_ticks`.)"""
        out: list[R.Emission] = []
        for cid, (cohort, job_id, issued) in list(self.issued.items()):
            lin = self.engines.get(cohort)
            if lin is None:
                action = self.resting.get(cid)  # left memory idle: the plan stands as it was
                if action is None:
                    self.issued.pop(cid, None)
                    continue
                cohort_id: str | None = cohort
            else:
                self.resting.pop(cid, None)
                plan = lin.plans.get(job_id)
                if cid in lin.state.acknowledged or plan is None or plan["command_id"] != cid:
                    self.issued.pop(cid, None)
                    continue
                action = plan["action"]
                job = lin.state.jobs.get(job_id)
                cohort_id = job.cohort_id if job else None
            if now_ms - issued >= self.ack_timeout_ms and cid not in self._unacked_alerted:
                self._unacked_alerted.add(cid)
                out.append(R.alert_emission(AlertRaised(
                    "COMMAND_UNACKNOWLEDGED", job_id, cohort_id,
                    f"{job_id} has not acknowledged command {cid[:12]} ({action}) "
                    f"after {(now_ms - issued) // 1000}s",
                    details={"command_id": cid}), cohort, now_ms))
        return self._dedupe(out, True)

    def commitments(self, now_ms: int, force: bool = False) -> list[R.Emission]:
        """A LineageCommitment for every cohort whose record changed since its last one,
        signed when the referee has a signer."""
        out: list[R.Emission] = []
        cohorts = sorted(self.engines) if force else sorted(self._dirty_cohorts)
        self._dirty_cohorts.clear()
        for cohort in cohorts:
            lin = self.engines.get(cohort)
            if lin is None or not cohort:
                continue
            record = build_commitment(cohort, lin, now_ms)
            pos = self.position.get(cohort)
            record["input_partition"], record["input_offset"] = pos if pos is not None else (None, None)
            covered = (record["root"], repr(record["snapshot"]))
            if not force and self._last_root.get(cohort) == covered:
                continue
            self._last_root[cohort] = covered
            if self.signer is not None:
                record = self.signer(record)
            out.append(R.Emission("commitments", cohort, "LineageCommitment", record))
        return out

    # ------------------------------------------------------------------ views

    def final_state(self) -> dict[str, Any]:
        from streams.core.cohorts import merge_final_states

        return merge_final_states((c, self.engines[c].final_state()) for c in sorted(self.engines))
