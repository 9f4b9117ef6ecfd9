"""The lineage state and its incremental fold (SPEC §4, §5, §8).

``LineageState.fold(event)`` applies one event and touches only what it affects:

- a job's own record (incarnations, checkpoints, progress, detector) grows by appending;
- taint is propagated as *sources*: the set of diverged incarnations ``(job_id, incarnation)``
  whose divergence reaches a checkpoint. Sources only ever grow (the rules are monotone), so a
  propagation visits each (checkpoint, source) pair at most once in the whole history. It
  follows two indexes: consumers by source checkpoint (T2) and checkpoints by content hash (T3);
- every change marks what it may have changed (jobs, divergences, incidents) dirty, so the
  decision layer (:mod:`streams.core.decide`) recomputes only those.

Verdicts, incident membership and plans are projections of this state: see
:mod:`streams.core.project`.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from streams.core.chain import GENESIS, canonical_with_nulls, event_digest, verify_link
from streams.core.seals import SealPolicy
from streams.core.events import (
    CheckpointConsumed,
    CheckpointDeleted,
    CheckpointWritten,
    DivergenceReported,
    Event,
    JobFinished,
    JobStarted,
    Progress,
    RolledBack,
)

# Guard reasons in the order of SPEC §8 (the first that holds is the job's halt reason).
HALT_REASONS = (
    "UNREGISTERED",
    "LEDGER_GAP",
    "UNTRACEABLE_SOURCE",
    "CHAIN_BROKEN",
    "CONFLICTING_DUPLICATE",
)
HALT_RANK = {r: i for i, r in enumerate(HALT_REASONS)}

INF = math.inf


def _median(values: Sequence[float]) -> float:
    """:func:`statistics.median`, without its generic checks (this runs for every Progress
    with a loss once the window is full): the middle value, or the mean of the two middle ones."""
    s = sorted(values)
    n = len(s)
    m = n // 2
    return s[m] if n % 2 else (s[m - 1] + s[m]) / 2

SourceKey = tuple[str, int]  # a diverged incarnation: (job_id, incarnation)
IncKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Config:
    """Tunables of SPEC §5."""

    window: int = 10
    spike_factor: float = 3.0
    taint_margin: int = 0
    #: what the processor demands of job keys (:mod:`streams.core.seals`; not a SPEC §5 tunable)
    seals: SealPolicy = SealPolicy()

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window must be >= 1")
        if not self.spike_factor > 0:
            raise ValueError("spike_factor must be > 0")
        if self.taint_margin < 0:
            raise ValueError("taint_margin must be >= 0")


class Checkpoint:
    __slots__ = ("id", "job_id", "incarnation", "seq", "step", "ts", "content_hash", "sources")

    def __init__(self, ev: CheckpointWritten, job_id: str | None = None) -> None:
        self.id = ev.checkpoint_id
        # the job's own id string (``Job.job_id``), not the event's: every decoded event brings
        # a fresh copy, and a checkpoint is kept for good
        self.job_id = ev.job_id if job_id is None else job_id
        self.incarnation = ev.incarnation
        self.seq = ev.seq
        self.step = ev.step
        self.ts = ev.ts
        self.content_hash = ev.content_hash
        self.sources: set[SourceKey] | None = None  # None: clean

    @property
    def tainted(self) -> bool:
        return bool(self.sources)


class Consumption:
    """One consumption event: ``kind`` is ``base``, ``restore`` or ``consume``; ``inc`` is the
    incarnation that consumed (set when it is folded)."""

    __slots__ = ("seq", "checkpoint_id", "mode", "kind", "inc")

    def __init__(self, seq: int, checkpoint_id: str, mode: str, kind: str) -> None:
        self.seq = seq
        self.checkpoint_id = checkpoint_id
        self.mode = mode
        self.kind = kind
        self.inc: Incarnation | None = None

    @property
    def taints(self) -> bool:
        return self.mode != "EVAL_ONLY"


class Incarnation:
    __slots__ = (
        "job_id",
        "number",
        "start_seq",
        "start_kind",
        "restored_checkpoint_id",
        "ckpts",
        "ckpt_seqs",
        "ckpt_stepmax",
        "prog_seqs",
        "prog_stepmax",
        "window",
        "detected_onset",
        "reported_onset",
        "consumptions",
        "src",
        "min_src_seq",
        "finished",
        "last_step",
        "alias_ckpts",
    )

    def __init__(self, job_id: str, number: int, start_seq: int, start_kind: str,
                 restored_checkpoint_id: str | None) -> None:
        self.job_id = job_id
        self.number = number
        self.start_seq = start_seq
        # "start" (JobStarted), "restore" (RolledBack), "scratch" (RolledBack from_scratch: from
        # the pretrained base_model alone, no consumption), "orphan"
        self.start_kind = start_kind
        self.restored_checkpoint_id = restored_checkpoint_id
        self.ckpts: list[Checkpoint] = []
        self.ckpt_seqs = array("q")
        self.ckpt_stepmax = array("q")
        self.prog_seqs = array("q")
        self.prog_stepmax = array("q")
        # the detector's last losses (at most Config.window): an array of doubles, not a deque
        # (a deque allocates a block of 64 slots, ~0.6 KB, plus a float object per loss)
        self.window = array("d")
        self.detected_onset: int | None = None
        self.reported_onset: int | None = None
        self.consumptions: dict[int, Consumption] = {}
        # source -> (consumption seq, first tainted checkpoint seq)
        self.src: dict[SourceKey, tuple[int, int]] = {}
        self.min_src_seq: float = INF
        self.finished = False
        self.last_step: int | None = None
        self.alias_ckpts: list[Checkpoint] = []

    @property
    def key(self) -> IncKey:
        return (self.job_id, self.number)

    @property
    def onset(self) -> int | None:
        a, b = self.detected_onset, self.reported_onset
        if a is None:
            return b
        if b is None:
            return a
        return min(a, b)

    def first_progress_seq_at_or_after(self, step: int) -> float:
        i = bisect_left(self.prog_stepmax, step)
        return self.prog_seqs[i] if i < len(self.prog_seqs) else INF

    def first_ckpt_index_at_or_after(self, step: int) -> int:
        return bisect_left(self.ckpt_stepmax, step)


class Job:
    __slots__ = (
        "job_id",
        "registered",
        "cohort_id",
        "base_model",
        "base_checkpoint_id",
        "started_ts",
        "next_seq",
        "digests",
        "rollbacks",
        "incarnations",
        "current",
        "head_hash",
        "halt_reasons",
        "last_ts",
        "diverged",
        "public_key",
    )

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.registered = False
        self.cohort_id: str | None = None
        self.base_model: str | None = None
        self.base_checkpoint_id: str | None = None
        self.started_ts: int | None = None
        self.next_seq = 0
        self.digests = array("q")  # digest of the event at each seq (0: never seen)
        self.rollbacks = 0
        self.incarnations: dict[int, Incarnation] = {}
        self.current: Incarnation | None = None
        self.head_hash: str | None = None
        self.halt_reasons: dict[str, str] = {}  # reason -> detail
        self.last_ts: int | None = None
        self.diverged: set[int] = set()  # incarnation numbers that diverged
        #: the Ed25519 key (hex) its first JobStarted declared: every event must be sealed by it
        #: (:mod:`streams.core.seals`)
        self.public_key: str | None = None

    @property
    def halt_reason(self) -> str | None:
        if not self.halt_reasons:
            return None
        return min(self.halt_reasons, key=HALT_RANK.__getitem__)


class FoldResult:
    """What one fold did: whether the event was new, and any guard finding."""

    __slots__ = ("accepted", "duplicate", "guard", "held", "released", "refused")

    def __init__(self) -> None:
        self.accepted = True
        self.duplicate = False
        self.guard: list[tuple[str, str]] = []  # (reason, detail)
        # set by the seal gate (:meth:`streams.core.decide.Lineage.fold`): the event waits for its
        # job's seal; events held before that this one's seal folded; events refused, each
        # (caller's ref, event, kind, reason) — this one or earlier held ones
        self.held = False
        self.released: Sequence[Event] = ()
        self.refused: Sequence[tuple[Any, Event, str, str]] = ()


class LineageState:
    """Everything the fold knows. Mutated only through :meth:`fold` and :meth:`finish_input`."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config()
        self.jobs: dict[str, Job] = {}
        self.checkpoints: dict[str, Checkpoint] = {}
        # consumptions by the checkpoint id they name (T2), each with its incarnation (``c.inc``)
        self.consumers: dict[str, list[Consumption]] = {}
        # checkpoints by content hash (T3): a content written once (nearly all of them) is in
        # ``hash_once``, one written twice or more has a list in ``by_hash`` (a one-element list
        # per checkpoint cost ~90 bytes for nothing); read both through :meth:`same_content`
        self.hash_once: dict[str, Checkpoint] = {}
        self.by_hash: dict[str, list[Checkpoint]] = {}
        # unresolved consumptions: checkpoint id -> [(incarnation, consumption, first seen)]
        self.unresolved: dict[str, list[tuple[Incarnation, Consumption, int | None]]] = {}
        self.diverged: dict[SourceKey, Incarnation] = {}
        self.src_holders: dict[SourceKey, set[IncKey]] = {}
        self.src_ckpts: dict[SourceKey, list[Checkpoint]] = {}
        self.events_folded = 0
        self.duplicates_dropped = 0
        # command_id -> (job_id, seq of the RolledBack that acknowledged it)
        self.acknowledged: dict[str, tuple[str, int]] = {}
        # dirty marks for the decision layer
        self.dirty_jobs: set[str] = set()
        self.dirty_divs: set[SourceKey] = set()
        self.dirty_sources: set[SourceKey] = set()
        self.new_tainted: list[Checkpoint] = []
        self.new_halts: list[tuple[str, str, str]] = []  # (job, reason, detail)
        self.new_aliases: list[Checkpoint] = []

    def release(self) -> None:
        """Drop the state's only reference cycles, each consumption's ``inc`` back to the
        incarnation whose ``consumptions`` hold it, so that refcounting frees the whole state as
        soon as it is dropped. Without this a state dropped by a worker (a cohort that leaves
        memory, a revoked partition) waits for a full collection of the garbage collector, which
        a worker runs rarely (streams.worker.gctune): the states of the cohorts it let go piled
        up in its memory (issue 27). Call only on a state that is done with: it cannot fold
        again."""
        for job in self.jobs.values():
            for inc in job.incarnations.values():
                for c in inc.consumptions.values():
                    c.inc = None
        for waiting in self.unresolved.values():
            for _inc, c, _seen in waiting:
                c.inc = None

    # ------------------------------------------------------------------ lookups

    def incarnation(self, key: IncKey) -> Incarnation | None:
        job = self.jobs.get(key[0])
        return job.incarnations.get(key[1]) if job else None

    def same_content(self, content_hash: str) -> Sequence[Checkpoint]:
        """The checkpoints written with ``content_hash``, in the order they were folded."""
        same = self.by_hash.get(content_hash)
        if same is not None:
            return same
        one = self.hash_once.get(content_hash)
        return (one,) if one is not None else ()

    # ------------------------------------------------------------------ guard

    def _halt(self, job: Job, reason: str, detail: str, result: FoldResult | None = None) -> None:
        if result is not None:
            result.guard.append((reason, detail))
        if reason in job.halt_reasons:
            return
        job.halt_reasons[reason] = detail
        self.new_halts.append((job.job_id, reason, detail))
        self.dirty_jobs.add(job.job_id)

    # ------------------------------------------------------------------ fold

    def fold(self, event: Event, now_ms: int | None = None,
             canonical: tuple[bytes, tuple[int, ...]] | None = None, hash_checked: bool = False) -> FoldResult:
        """Apply one validated event. Identical redeliveries are dropped silently.

        ``canonical`` is ``chain.canonical_with_nulls(event)`` when the caller has it already
        (an audit computes it to check the chain); ``hash_checked``: the caller found the event's
        hash to be its content's (the seal gate), so only its link is checked here."""
        result = FoldResult()
        job = self.jobs.get(event.job_id)
        if job is None:
            job = Job(event.job_id)
            self.jobs[event.job_id] = job
            if not isinstance(event, JobStarted):
                self._halt(job, "UNREGISTERED",
                           f"first event of {event.job_id!r} is {type(event).__name__} seq {event.seq}, "
                           "no JobStarted", result)
        seq = event.seq
        if canonical is None:
            canonical = canonical_with_nulls(event)
        digest = event_digest(event, canonical)
        if seq < job.next_seq:
            known = job.digests[seq] if seq < len(job.digests) else 0
            result.accepted = False
            if known == digest:
                result.duplicate = True
                self.duplicates_dropped += 1
            elif known == 0:
                self._halt(job, "LEDGER_GAP",
                           f"seq {seq} arrived after seq {job.next_seq - 1}: out of order", result)
            else:
                self._halt(job, "CONFLICTING_DUPLICATE",
                           f"a different event already holds ({job.job_id!r}, seq {seq})", result)
            return result
        if seq > job.next_seq:
            self._halt(job, "LEDGER_GAP",
                       f"seq {seq} follows seq {job.next_seq - 1}: {seq - job.next_seq} event(s) missing",
                       result)
        # record the digest at its seq (gaps hold 0)
        d = job.digests
        while len(d) < seq:
            d.append(0)
        d.append(digest)
        job.next_seq = seq + 1
        job.last_ts = event.ts

        # hash chain (SPEC §9), only where the event carries one
        if event.hash is not None:
            expected = GENESIS if seq == 0 else job.head_hash
            problem = verify_link(event, expected, canonical[0], hash_checked)
            if problem:
                self._halt(job, "CHAIN_BROKEN", f"seq {seq}: {problem}", result)
        job.head_hash = event.hash

        # incarnation continuity
        if isinstance(event, RolledBack):
            job.rollbacks += 1
        if event.incarnation != job.rollbacks:
            self._halt(job, "LEDGER_GAP",
                       f"seq {seq} says incarnation {event.incarnation}, the job has had "
                       f"{job.rollbacks} rollback(s)", result)

        self.events_folded += 1
        self.dirty_jobs.add(job.job_id)
        handler = _HANDLERS[type(event)]
        handler(self, job, event, now_ms, result)
        return result

    def _incarnation_for(self, job: Job, event: Event) -> Incarnation:
        inc = job.incarnations.get(event.incarnation)
        if inc is None:
            inc = Incarnation(job.job_id, event.incarnation, event.seq, "orphan", None)
            job.incarnations[event.incarnation] = inc
        job.current = inc
        return inc

    # -- handlers ----------------------------------------------------------

    def _on_started(self, job: Job, ev: JobStarted, now_ms: int | None, result: FoldResult) -> None:
        if job.registered:
            self._halt(job, "CONFLICTING_DUPLICATE", f"second JobStarted at seq {ev.seq}", result)
        else:
            job.public_key = ev.public_key
        job.registered = True
        job.cohort_id = ev.cohort_id
        job.base_model = ev.base_model
        job.base_checkpoint_id = ev.base_checkpoint_id
        job.started_ts = ev.ts
        inc = job.incarnations.get(ev.incarnation)
        if inc is None:
            inc = Incarnation(job.job_id, ev.incarnation, ev.seq, "start", None)
            job.incarnations[ev.incarnation] = inc
        job.current = inc
        if ev.base_checkpoint_id is not None:
            self._consume(inc, Consumption(ev.seq, ev.base_checkpoint_id, "INIT", "base"), now_ms)

    def _on_progress(self, job: Job, ev: Progress, now_ms: int | None, result: FoldResult) -> None:
        inc = self._incarnation_for(job, ev)
        prev_max = inc.prog_stepmax[-1] if inc.prog_stepmax else ev.step
        inc.prog_seqs.append(ev.seq)
        inc.prog_stepmax.append(max(prev_max, ev.step))
        inc.last_step = ev.step
        onset = inc.onset
        if onset is not None and ev.step >= onset and prev_max < onset:
            # the attribution cut-off (first Progress at or past the onset) just appeared
            self.dirty_divs.add(inc.key)
        if inc.detected_onset is not None:
            return
        cfg = self.config
        loss, gn = ev.loss, ev.grad_norm  # a Progress without a loss (v8) feeds no spike rule
        flagged = False
        if (loss is not None and not math.isfinite(loss)) or (gn is not None and not math.isfinite(gn)):
            flagged = True
        elif loss is not None and len(inc.window) >= cfg.window \
                and loss > cfg.spike_factor * _median(inc.window):
            flagged = True
        if flagged:
            del inc.window[:]
            self._set_onset(inc, detected=ev.step)
        elif loss is not None:
            inc.window.append(loss)
            if len(inc.window) > cfg.window:
                del inc.window[0]

    def _on_written(self, job: Job, ev: CheckpointWritten, now_ms: int | None, result: FoldResult) -> None:
        inc = self._incarnation_for(job, ev)
        inc.last_step = ev.step if inc.last_step is None else max(inc.last_step, ev.step)
        existing = self.checkpoints.get(ev.checkpoint_id)
        if existing is not None:
            # the earliest write (ts, job_id, seq) counts; the job of the later one is halted
            detail = (f"checkpoint {ev.checkpoint_id!r} written twice "
                      f"({existing.job_id} seq {existing.seq}, {ev.job_id} seq {ev.seq})")
            if (ev.ts, ev.job_id, ev.seq) > (existing.ts, existing.job_id, existing.seq):
                self._halt(job, "CONFLICTING_DUPLICATE", detail, result)
                return
            self._halt(self.jobs[existing.job_id], "CONFLICTING_DUPLICATE", detail, result)
            self._displace(existing)
        ck = Checkpoint(ev, job.job_id)
        self.checkpoints[ck.id] = ck
        prev_max = inc.ckpt_stepmax[-1] if inc.ckpt_stepmax else ck.step
        inc.ckpts.append(ck)
        inc.ckpt_seqs.append(ck.seq)
        inc.ckpt_stepmax.append(max(prev_max, ck.step))
        # sources already flowing into this incarnation (T2) and its own divergence (T1)
        for s, (_cons, first) in inc.src.items():
            if first <= ck.seq:
                self._add_source(ck, s)
        onset = inc.onset
        if onset is not None and ck.step >= onset - self.config.taint_margin:
            self._add_source(ck, inc.key)
        # T3: earlier tainted copies of the same content written by other jobs
        h = ck.content_hash
        same = self.by_hash.get(h)
        if same is None:
            once = self.hash_once.pop(h, None)
            if once is None:
                self.hash_once[h] = ck
            else:
                same = self.by_hash[h] = [once]
        if same is not None:
            for other in same:
                if other.job_id != ck.job_id and other.ts < ck.ts and other.sources:
                    for s in list(other.sources):
                        self._alias(ck, s)
            same.append(ck)
        # consumers that named this checkpoint before it was written
        waiting = self.unresolved.pop(ck.id, None)
        if waiting:
            for (cinc, _c, _t) in waiting:
                self.dirty_jobs.add(cinc.job_id)
                self._touch_divergences(cinc.job_id)

    def _displace(self, ck: Checkpoint) -> None:
        """An earlier write of the same checkpoint id arrived late: ``ck`` stops being a
        checkpoint. Exact when ``ck`` was clean (nothing flowed from it); when it was already
        tainted, the taint it passed on stays (the safe side: more rollback, never less)."""
        del self.checkpoints[ck.id]
        inc = self.incarnation((ck.job_id, ck.incarnation))
        if inc is not None and ck in inc.ckpts:
            kept = [c for c in inc.ckpts if c is not ck]
            inc.ckpts = kept
            inc.ckpt_seqs = array("q", (c.seq for c in kept))
            inc.ckpt_stepmax = array("q")
            top = None
            for c in kept:
                top = c.step if top is None else max(top, c.step)
                inc.ckpt_stepmax.append(top)
            if ck in inc.alias_ckpts:
                inc.alias_ckpts.remove(ck)
        same = self.by_hash.get(ck.content_hash)
        if same and ck in same:
            same.remove(ck)
        elif self.hash_once.get(ck.content_hash) is ck:
            del self.hash_once[ck.content_hash]
        for s in ck.sources or ():
            lst = self.src_ckpts.get(s)
            if lst and ck in lst:
                lst.remove(ck)
        if ck in self.new_tainted:
            self.new_tainted.remove(ck)
        self.dirty_jobs.add(ck.job_id)
        self._touch_divergences(ck.job_id)

    def _on_consumed(self, job: Job, ev: CheckpointConsumed, now_ms: int | None, result: FoldResult) -> None:
        inc = self._incarnation_for(job, ev)
        inc.last_step = ev.step if inc.last_step is None else max(inc.last_step, ev.step)
        self._consume(inc, Consumption(ev.seq, ev.source_checkpoint_id, ev.mode, "consume"), now_ms)

    def _on_diverged(self, job: Job, ev: DivergenceReported, now_ms: int | None, result: FoldResult) -> None:
        inc = self._incarnation_for(job, ev)
        if inc.reported_onset is None or ev.onset_step < inc.reported_onset:
            self._set_onset(inc, reported=ev.onset_step)

    def _on_rolled_back(self, job: Job, ev: RolledBack, now_ms: int | None, result: FoldResult) -> None:
        inc = job.incarnations.get(ev.incarnation)
        if inc is None:
            inc = Incarnation(job.job_id, ev.incarnation, ev.seq, "scratch" if ev.from_scratch else "restore",
                              ev.restored_checkpoint_id)
            job.incarnations[ev.incarnation] = inc
        job.current = inc
        if ev.command_id is not None:
            self.acknowledged.setdefault(ev.command_id, (job.job_id, ev.seq))
        if ev.from_scratch:
            # SPEC §4: from the pretrained base_model alone; consumes nothing, not even the
            # job's base_checkpoint_id (its base, SPEC §7, is the pretrained model)
            return
        target = ev.restored_checkpoint_id
        if target is None:
            target = job.base_checkpoint_id
            kind = "base"
        else:
            kind = "restore"
        if target is not None:
            self._consume(inc, Consumption(ev.seq, target, "INIT", kind), now_ms)

    def _on_deleted(self, job: Job, ev: CheckpointDeleted, now_ms: int | None, result: FoldResult) -> None:
        """A job recorded the deletion of a checkpoint (SPEC §13). The fold keeps the checkpoint
        (the lineage still names it) and notes the deletion; whether it was deletable is the
        retention book's to judge (:meth:`streams.core.decide.Lineage.decide`)."""
        self._incarnation_for(job, ev)
        # created here, not in __init__: a state restored from a snapshot of before v9 has none
        self.__dict__.setdefault("deletions", []).append((job.job_id, ev.checkpoint_id, ev.seq))

    def _on_finished(self, job: Job, ev: JobFinished, now_ms: int | None, result: FoldResult) -> None:
        inc = self._incarnation_for(job, ev)
        inc.finished = True

    # -- taint propagation -------------------------------------------------------

    def _consume(self, inc: Incarnation, c: Consumption, now_ms: int | None) -> None:
        src_ck = self.checkpoints.get(c.checkpoint_id)
        if src_ck is not None:
            c.checkpoint_id = src_ck.id  # one string per checkpoint id, not one per consumption
        c.inc = inc
        inc.consumptions[c.seq] = c
        named = self.consumers.get(c.checkpoint_id)
        if named is None:
            self.consumers[c.checkpoint_id] = [c]  # an exact-size list: most are consumed once
        else:
            named.append(c)
        if src_ck is None:
            self.unresolved.setdefault(c.checkpoint_id, []).append((inc, c, now_ms))
            self._touch_divergences(inc.job_id)
            return
        if c.taints and src_ck.sources:
            for s in list(src_ck.sources):
                self._inflow(inc, s, c.seq, c.seq + 1)

    def _set_onset(self, inc: Incarnation, *, detected: int | None = None,
                   reported: int | None = None) -> None:
        before = inc.onset
        if detected is not None:
            inc.detected_onset = detected
        if reported is not None:
            inc.reported_onset = reported
        onset = inc.onset
        if onset == before:
            return
        self.diverged[inc.key] = inc
        self.jobs[inc.job_id].diverged.add(inc.number)
        self.dirty_divs.add(inc.key)
        self.dirty_jobs.add(inc.job_id)
        assert onset is not None  # it changed, and a detected or reported onset was just set
        threshold = onset - self.config.taint_margin
        start = inc.first_ckpt_index_at_or_after(threshold)
        for ck in inc.ckpts[start:]:
            if ck.step >= threshold:
                self._add_source(ck, inc.key)

    def _add_source(self, ck: Checkpoint, s: SourceKey) -> None:
        """Checkpoint ``ck`` is reached by diverged incarnation ``s``; propagate (T2, T3)."""
        stack = [(ck, s)]
        while stack:
            ck, s = stack.pop()
            if ck.sources is None:
                ck.sources = {s}
                self.new_tainted.append(ck)
            elif s in ck.sources:
                continue
            else:
                ck.sources.add(s)
            self.src_ckpts.setdefault(s, []).append(ck)
            self.dirty_sources.add(s)
            self.dirty_jobs.add(ck.job_id)
            for c in self.consumers.get(ck.id, ()):
                if c.taints:
                    assert c.inc is not None  # set by _consume before it lists the consumption
                    stack.extend(self._inflow(c.inc, s, c.seq, c.seq + 1, defer=True))
            for other in self.same_content(ck.content_hash):
                if other.job_id != ck.job_id and other.ts > ck.ts:
                    stack.extend(self._alias(other, s, defer=True))

    def _alias(self, ck: Checkpoint, s: SourceKey, defer: bool = False) -> Sequence[tuple[Checkpoint, SourceKey]]:
        inc = self.incarnation((ck.job_id, ck.incarnation))
        assert inc is not None  # a checkpoint is written by an incarnation of its job
        if ck not in inc.alias_ckpts:
            inc.alias_ckpts.append(ck)
            self.new_aliases.append(ck)
        return self._inflow(inc, s, ck.seq, ck.seq, defer=defer)

    def _inflow(self, inc: Incarnation, s: SourceKey, cons_seq: int, first_seq: int,
                defer: bool = False) -> Sequence[tuple[Checkpoint, SourceKey]]:
        """Source ``s`` enters ``inc`` by a consumption at ``cons_seq``; taints checkpoints from
        ``first_seq`` on. Returns (or applies) the checkpoint taints it implies."""
        old = inc.src.get(s)
        if old is not None and old[0] <= cons_seq:
            return ()
        inc.src[s] = (cons_seq, first_seq)
        if cons_seq < inc.min_src_seq:
            inc.min_src_seq = cons_seq
        self.src_holders.setdefault(s, set()).add(inc.key)
        self.dirty_sources.add(s)
        self.dirty_jobs.add(inc.job_id)
        self._touch_divergences(inc.job_id)
        lo = bisect_left(inc.ckpt_seqs, first_seq)
        hi = bisect_left(inc.ckpt_seqs, old[1]) if old is not None else len(inc.ckpts)
        pending = [(ck, s) for ck in inc.ckpts[lo:hi]]
        if defer:
            return pending
        for ck, src in pending:
            self._add_source(ck, src)
        return ()

    def _touch_divergences(self, job_id: str) -> None:
        """A job's consumptions changed: the attribution of its divergences may change."""
        job = self.jobs[job_id]
        for n in job.diverged:
            self.dirty_divs.add((job_id, n))

    # ------------------------------------------------------------------ guard timers

    def expire_unresolved(self, now_ms: int | None = None, grace_ms: int = 0) -> None:
        """Halt the jobs whose consumption names a checkpoint nobody wrote (SPEC §8).

        Offline, call with ``now_ms=None`` at the end of the input: every unresolved source
        halts. Live, call periodically with the processor's clock and the grace period.
        """
        for ckpt_id, waiting in self.unresolved.items():
            for inc, c, seen in waiting:
                if now_ms is None or seen is None or now_ms - seen >= grace_ms:
                    job = self.jobs[inc.job_id]
                    self._halt(job, "UNTRACEABLE_SOURCE",
                               f"seq {c.seq} consumed {ckpt_id!r}, which no CheckpointWritten recorded")

    # ------------------------------------------------------------------ dirty marks

    def take_dirty(self) -> "Dirty":
        out = Dirty(self.dirty_jobs, self.dirty_divs, self.dirty_sources, self.new_tainted,
                    self.new_halts, self.new_aliases)
        self.dirty_jobs = set()
        self.dirty_divs = set()
        self.dirty_sources = set()
        self.new_tainted = []
        self.new_halts = []
        self.new_aliases = []
        return out


@dataclass(slots=True)
class Dirty:
    """What changed since the last decision round."""

    jobs: set[str]
    divs: set[SourceKey]
    sources: set[SourceKey]
    tainted: list[Checkpoint]
    halts: list[tuple[str, str, str]]
    aliases: list[Checkpoint]


#: a handler takes the event of its type (the key); ``Any`` there: one table for the eight types
_HANDLERS: dict[type, Callable[[LineageState, Job, Any, int | None, FoldResult], None]] = {
    JobStarted: LineageState._on_started,
    Progress: LineageState._on_progress,
    CheckpointWritten: LineageState._on_written,
    CheckpointConsumed: LineageState._on_consumed,
    DivergenceReported: LineageState._on_diverged,
    RolledBack: LineageState._on_rolled_back,
    JobFinished: LineageState._on_finished,
    CheckpointDeleted: LineageState._on_deleted,
}


def fold_all(events: Iterable[Event], config: Config | None = None) -> LineageState:
    state = LineageState(config)
    for ev in events:
        state.fold(ev)
    state.expire_unresolved()
    return state
