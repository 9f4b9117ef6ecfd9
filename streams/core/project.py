"""Projections of the lineage state: verdicts (§6), rollback plans (§7), incidents, output (§11).

Everything here reads :class:`~streams.core.state.LineageState` and returns plain data. The
costs are local: a plan walks one job's ancestry (a few segments, bisected); attribution walks
the divergences (few) and their ancestries; an incident view walks its own scope.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any, Collection, cast

from streams.core.ids import command_id, incident_id
from streams.core.state import INF, Checkpoint, Incarnation, Job, LineageState, SourceKey

INTERNAL, EXTERNAL, INDETERMINATE = "INTERNAL", "EXTERNAL", "INDETERMINATE"


@dataclass(frozen=True, slots=True)
class Verdict:
    key: SourceKey
    onset_step: int
    verdict: str
    attributed: frozenset[SourceKey]  # diverged incarnations whose taint it consumed pre-onset
    incident_ids: frozenset[str]  # its own incident, or the incidents it is attributed to
    own_incident_id: str  # the id it has (or would have) as a root: hash of key and onset


def ancestry(state: LineageState, inc: Incarnation) -> list[tuple[Incarnation, float]]:
    """The segments the incarnation's weights descend from, oldest first, each with its cut
    (the last seq that belongs to the ancestry; ``INF`` for the incarnation itself)."""
    segs: list[tuple[Incarnation, float]] = []
    job = state.jobs[inc.job_id]
    cur, cut = inc, INF
    seen = set()
    while True:
        segs.append((cur, cut))
        seen.add(cur.number)
        if cur.start_kind != "restore" or cur.restored_checkpoint_id is None:
            break
        r = state.checkpoints.get(cur.restored_checkpoint_id)
        if r is None or r.job_id != cur.job_id or r.seq >= cur.start_seq or r.incarnation in seen:
            break
        prev = job.incarnations.get(r.incarnation)
        if prev is None:
            break
        cur, cut = prev, r.seq
    segs.reverse()
    return segs


def base_checkpoint_id(state: LineageState, first: Incarnation) -> str | None:
    """The base of an ancestry that starts with ``first`` (SPEC §7): the checkpoint it starts
    from, or None for the pretrained model (incarnation 0 without a base checkpoint, and a
    restart ``from_scratch``, start kind ``scratch``)."""
    job = state.jobs[first.job_id]
    if first.start_kind == "restore" and first.restored_checkpoint_id is not None:
        return first.restored_checkpoint_id
    if first.start_kind in ("start", "restore"):
        return job.base_checkpoint_id
    return None


def _unresolved_before(state: LineageState, inc: Incarnation, limit: float, inclusive: bool) -> bool:
    for c in inc.consumptions.values():
        if not c.taints:
            continue
        if (c.seq <= limit) if inclusive else (c.seq < limit):
            if c.checkpoint_id not in state.checkpoints:
                return True
    return False


def attribution(state: LineageState, inc: Incarnation) -> tuple[str, frozenset[SourceKey]]:
    """Verdict of the divergence of ``inc`` before resolution: its attributed sources."""
    onset = inc.onset
    assert onset is not None
    cutoff = inc.first_progress_seq_at_or_after(onset)
    attributed: set[SourceKey] = set()
    unresolved = False
    for seg, cut in ancestry(state, inc):
        own = seg is inc
        for s, (cs, _first) in seg.src.items():
            if s != inc.key and ((cs < cutoff) if own else (cs <= cut)):
                attributed.add(s)
        if not unresolved:
            unresolved = _unresolved_before(state, seg, cutoff if own else cut, inclusive=not own)
    if attributed:
        return EXTERNAL, frozenset(attributed)
    return (INDETERMINATE if unresolved else INTERNAL), frozenset()


RawVerdict = tuple[int, str, frozenset[SourceKey]]  # (onset_step, verdict before resolution, attributed)


def raw_verdict(state: LineageState, inc: Incarnation) -> RawVerdict:
    assert inc.onset is not None
    return (inc.onset, *attribution(state, inc))


def resolve(state: LineageState) -> dict[SourceKey, Verdict]:
    """Verdicts of every divergence, with the root incidents each resolves to (least fixpoint)."""
    raw = {k: raw_verdict(state, inc) for k, inc in state.diverged.items() if inc.onset is not None}
    return resolve_raw(raw)


def resolve_raw(raw: dict[SourceKey, RawVerdict],
                previous: dict[SourceKey, Verdict] | None = None,
                changed: set[SourceKey] | None = None,
                dependents: dict[SourceKey, set[SourceKey]] | None = None) -> dict[SourceKey, Verdict]:
    """Resolve attributed sources to root incidents over the (small) graph of divergences.

    With ``previous``, ``changed`` and ``dependents`` (s -> divergences attributed to s), only
    the changed divergences and those depending on them, transitively, are recomputed.
    """
    if previous is not None and changed is not None and dependents is not None:
        affected: set[SourceKey] = set()
        stack = [k for k in changed]
        while stack:
            k = stack.pop()
            if k in affected:
                continue
            affected.add(k)
            stack.extend(dependents.get(k, ()))
        fixed = {k: v for k, v in previous.items() if k not in affected and k in raw}
    else:
        affected = set(raw)
        fixed = {}
    sub = {k: raw[k] for k in affected if k in raw}
    verdict = {k: v[1] for k, v in sub.items()}
    while True:
        roots: dict[SourceKey, set[str]] = {
            k: ({incident_id(k[0], k[1], sub[k][0])} if verdict[k] != EXTERNAL else set()) for k in sub
        }
        changed_any = True
        while changed_any:
            changed_any = False
            for k, (_onset, _v, attributed) in sub.items():
                if verdict[k] != EXTERNAL:
                    continue
                acc = roots[k]
                before = len(acc)
                for s in attributed:
                    if s in roots:
                        acc |= roots[s]
                    elif s in fixed:
                        acc |= fixed[s].incident_ids
                if len(acc) != before:
                    changed_any = True
        # an EXTERNAL divergence whose attribution reaches no root (a pure cycle of symptoms)
        # has no outside cause to blame: it stands as a root of its own.
        orphans = [k for k in sub if verdict[k] == EXTERNAL and not roots[k]]
        if not orphans:
            break
        for k in orphans:
            verdict[k] = INTERNAL
    out = dict(fixed)
    for k in sub:
        out[k] = Verdict(k, sub[k][0], verdict[k], sub[k][2] if verdict[k] == EXTERNAL else frozenset(),
                         frozenset(roots[k]), incident_id(k[0], k[1], sub[k][0]))
    return out


def _incident_ids_of(s: SourceKey, verdicts: dict[SourceKey, Verdict]) -> frozenset[str]:
    v = verdicts.get(s)
    return v.incident_ids if v is not None else frozenset()


def plan_for(state: LineageState, job: Job, verdicts: dict[SourceKey, Verdict]) -> dict[str, Any] | None:
    """The one plan of SPEC §7 for ``job``, or None when its current ancestry is clean."""
    cur = job.current
    if cur is None:
        return None
    margin = state.config.taint_margin
    segs = ancestry(state, cur)
    taint_point: tuple[int, float] | None = None
    incidents: set[str] = set()
    for idx, (inc, cut) in enumerate(segs):
        cands: list[float] = []
        for s, (cs, _first) in inc.src.items():
            if cs <= cut:
                cands.append(cs)
                incidents |= _incident_ids_of(s, verdicts)
        onset = inc.onset
        if onset is not None:
            i = inc.first_ckpt_index_at_or_after(onset - margin)
            first_ck = inc.ckpt_seqs[i] if i < len(inc.ckpt_seqs) else INF
            dseq = min(first_ck, inc.first_progress_seq_at_or_after(onset))
            if inc is cur or dseq <= cut:
                cands.append(dseq)
                incidents |= _incident_ids_of(inc.key, verdicts)
        if cands and taint_point is None:
            taint_point = (idx, min(cands))
    if taint_point is None:
        return None

    plan: dict[str, Any] = {
        "job_id": job.job_id,
        "incarnation": cur.number,
        "action": None,
        "target_checkpoint_id": None,
        "target_step": None,
        "incident_ids": sorted(incidents),
    }
    if cur.finished:
        plan["action"] = "QUARANTINE"
        plan["quarantined_checkpoint_ids"] = sorted(
            ck.id for inc in job.incarnations.values() for ck in inc.ckpts if ck.sources
        )
    else:
        target = _last_clean_checkpoint(segs, taint_point)
        if target is not None:
            plan.update(action="ROLLBACK", target_checkpoint_id=target.id, target_step=target.step)
        else:
            base_id = base_checkpoint_id(state, segs[0][0])
            base = state.checkpoints.get(base_id) if base_id is not None else None
            if base is not None and base.sources:
                plan["action"] = "RESTART_FROM_SCRATCH"
            else:
                plan.update(action="RESTART_FROM_BASE", target_checkpoint_id=base_id,
                            target_step=base.step if base is not None else None)
    plan["command_id"] = command_id(plan["incident_ids"], job.job_id, cur.number, plan["action"],
                                    plan["target_checkpoint_id"])
    return plan


def _last_clean_checkpoint(segs: list[tuple[Incarnation, float]],
                           taint_point: tuple[int, float]) -> Checkpoint | None:
    idx, tseq = taint_point
    inc, _cut = segs[idx]
    j = bisect_left(inc.ckpt_seqs, tseq) - 1 if tseq != INF else len(inc.ckpts) - 1
    if j >= 0:
        return inc.ckpts[j]
    for inc, cut in reversed(segs[:idx]):
        j = bisect_right(inc.ckpt_seqs, cut) - 1
        if j >= 0:
            return inc.ckpts[j]
    return None


def aliased_checkpoints(state: LineageState, ck: Checkpoint) -> list[Checkpoint]:
    """The checkpoints ``ck`` aliases under T3 (SPEC §5): every tainted checkpoint of another
    job with the same content written before it (smaller ``ts``), in order of ``ts``, then id.
    ``ck``'s incarnation counts as having consumed each of them at ``ck``'s seq, and ``ck``
    carries the union of their roots."""
    return sorted((other for other in state.same_content(ck.content_hash)
                   if other.job_id != ck.job_id and other.ts < ck.ts and other.sources),
                  key=lambda o: (o.ts, o.id))


def aliased_checkpoint(state: LineageState, ck: Checkpoint) -> Checkpoint | None:
    """The first checkpoint ``ck`` aliases under T3 (see :func:`aliased_checkpoints`): the
    earliest (ts, id) tainted checkpoint of another job with the same content, written before it."""
    best = None
    for other in state.same_content(ck.content_hash):
        if other.job_id != ck.job_id and other.ts < ck.ts and other.sources:
            if best is None or (other.ts, other.id) < (best.ts, best.id):
                best = other
    return best


def _via(state: LineageState, inc: Incarnation, seq: int, sources: set[SourceKey]) -> str | None:
    """The checkpoint behind the consumption at ``seq``: the one named, or for a T3 alias the
    first aliased checkpoint (SPEC §5: earliest ``ts``, then id, among the earlier tainted copies
    of other jobs) that carries the incident, i.e. one of ``sources``."""
    c = inc.consumptions.get(seq)
    if c is not None:
        return c.checkpoint_id
    i = bisect_left(inc.ckpt_seqs, seq)
    if i < len(inc.ckpts) and inc.ckpts[i].seq == seq:
        ck = inc.ckpts[i]
        best = None
        for other in state.same_content(ck.content_hash):
            if (other.job_id != ck.job_id and other.ts < ck.ts and other.sources
                    and not sources.isdisjoint(other.sources)):
                if best is None or (other.ts, other.id) < (best.ts, best.id):
                    best = other
        return best.id if best is not None else None
    return None


def incident_members(verdicts: dict[SourceKey, Verdict]) -> dict[str, set[SourceKey]]:
    """incident id -> the divergences that resolve to it (its root and its secondaries)."""
    members: dict[str, set[SourceKey]] = {}
    for k, v in verdicts.items():
        for x in v.incident_ids:
            members.setdefault(x, set()).add(k)
    return members


def incident_views(state: LineageState, verdicts: dict[SourceKey, Verdict],
                   plans: dict[str, dict[str, Any]] | None = None,
                   only: set[str] | None = None,
                   members_index: dict[str, set[SourceKey]] | None = None,
                   plans_index: dict[str, set[str]] | None = None) -> dict[str, dict[str, Any]]:
    """One view per root incident (INTERNAL or INDETERMINATE divergence).

    ``only`` limits the work to those incidents when the caller keeps ``members_index``
    (see :func:`incident_members`) and ``plans_index`` (incident id -> job ids with a plan
    naming it) up to date.
    """
    by_incident = members_index if members_index is not None else incident_members(verdicts)
    views: dict[str, dict[str, Any]] = {}
    for k, v in _incident_roots(verdicts, only, by_incident, members_index is not None):
        x = v.own_incident_id
        members = by_incident.get(x, ())
        view = {
            "incident_id": x,
            "root": {"job_id": k[0], "incarnation": k[1], "onset_step": v.onset_step},
            "verdict": v.verdict,
            "cohort_id": state.jobs[k[0]].cohort_id,
            "contaminated": _contaminated(state, k, members),
            "secondary_divergences": sorted(
                ({"job_id": s[0], "incarnation": s[1], "onset_step": verdicts[s].onset_step}
                 for s in members if s != k and verdicts[s].verdict == EXTERNAL),
                key=lambda d: (d["job_id"], d["incarnation"], d["onset_step"]),
            ),
            "tainted_checkpoints": sorted({ck.id for s in members for ck in state.src_ckpts.get(s, ())}),
        }
        if plans is not None:
            if plans_index is not None:
                chosen = [plans[j] for j in plans_index.get(x, ()) if j in plans]
            else:
                chosen = [p for p in plans.values() if x in p["incident_ids"]]
            view["plans"] = sorted(chosen, key=lambda p: p["job_id"])
        views[x] = view
    return views


def _incident_roots(verdicts: dict[SourceKey, Verdict], only: set[str] | None,
                    by_incident: dict[str, set[SourceKey]], indexed: bool) -> list[tuple[SourceKey, Verdict]]:
    """The root divergences (not EXTERNAL) of the incidents wanted: through the membership
    index when the caller keeps one, else by a scan of every verdict."""
    if only is not None and indexed:
        return [(k, verdicts[k]) for x in only for k in by_incident.get(x, ())
                if verdicts[k].verdict != EXTERNAL and verdicts[k].own_incident_id == x]
    return [(k, v) for k, v in verdicts.items() if v.verdict != EXTERNAL
            and (only is None or v.own_incident_id in only)]


def _contaminated(state: LineageState, root: SourceKey, members: Collection[SourceKey]) -> list[dict[str, Any]]:
    """The incarnations contaminated by an incident: each one's first consumption of a checkpoint
    tainted by it, the checkpoint it came through and the path of jobs from the root.

    The root incarnation itself is one when its tainted weights came back to it (SPEC §5: it
    consumed a checkpoint tainted by its own incident), like any other consumer; its own
    divergence (T1) is not a consumption, so it holds a source only by consuming."""
    first: dict[tuple[str, int], int] = {}
    for s in members:
        for holder in state.src_holders.get(s, ()):
            held = state.incarnation(holder)
            assert held is not None  # a holder is an incarnation the source flowed into
            cs = held.src[s][0]
            if holder not in first or cs < first[holder]:
                first[holder] = cs
    member_set = set(members)
    via_of: dict[tuple[str, int], str | None] = {
        holder: _via(state, cast(Incarnation, state.incarnation(holder)), cs, member_set)
        for holder, cs in first.items()}
    paths: dict[tuple[str, int], list[str]] = {}
    return [{"job_id": holder[0], "incarnation": holder[1], "via_checkpoint_id": via_of[holder],
             "path": _path(state, root, via_of, paths, holder)} for holder in sorted(first)]


def _path(state: LineageState, root: SourceKey, via_of: dict[tuple[str, int], str | None],
          paths: dict[tuple[str, int], list[str]], h: tuple[str, int], depth: int = 0) -> list[str]:
    """The jobs from ``root`` to the holder ``h`` (through the writers of the checkpoints each
    came by: ``via_of``), memoised in ``paths``. A module function, not a closure of
    :func:`_contaminated`: a recursive closure is a reference cycle (the function holds its
    cell, the cell the function), which refcounting never frees, and every projection of an
    incident left one, with its maps, for the worker's rare full collections (issue 27)."""
    if h in paths:
        return paths[h]
    via = via_of.get(h)
    ck = state.checkpoints.get(via) if via else None
    if ck is None or depth > 64:
        p = [root[0], h[0]]
    else:
        writer = (ck.job_id, ck.incarnation)
        if writer == root:  # written by the root (the root itself may be a holder too)
            parent = [root[0]]
        elif writer in via_of:
            parent = _path(state, root, via_of, paths, writer, depth + 1)
        else:
            parent = [root[0], ck.job_id]
        p = parent + [h[0]] if parent[-1] != h[0] else parent
    paths[h] = p
    return p


def unrecorded_sharing(state: LineageState) -> list[dict[str, Any]]:
    alerts = []
    for job in state.jobs.values():
        for inc in job.incarnations.values():
            for ck in inc.alias_ckpts:
                recorded = False
                for c in inc.consumptions.values():
                    if c.seq < ck.seq:
                        src = state.checkpoints.get(c.checkpoint_id)
                        if src is not None and src.content_hash == ck.content_hash:
                            recorded = True
                            break
                if not recorded:
                    aliased = aliased_checkpoint(state, ck)
                    alerts.append({
                        "kind": "UNRECORDED_SHARING",
                        "job_id": ck.job_id,
                        "checkpoint_id": ck.id,
                        "aliased_checkpoint_id": aliased.id if aliased else None,
                        "cohort_id": job.cohort_id,
                    })
    alerts.sort(key=lambda a: (a["job_id"], a["checkpoint_id"]))
    return alerts


def halts(state: LineageState) -> list[dict[str, Any]]:
    out = []
    for job in state.jobs.values():
        reason = job.halt_reason
        if reason is not None:
            out.append({"job_id": job.job_id, "reason": reason, "detail": job.halt_reasons[reason]})
    out.sort(key=lambda h: h["job_id"])
    return out


def all_plans(state: LineageState, verdicts: dict[SourceKey, Verdict]) -> dict[str, dict[str, Any]]:
    plans = {}
    for job in state.jobs.values():
        p = plan_for(state, job, verdicts)
        if p is not None:
            plans[job.job_id] = p
    return plans


def output(state: LineageState, views: dict[str, dict[str, Any]], plans: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The SPEC §11 output from incident views and plans, lists sorted as the spec says."""
    incidents = []
    for x in sorted(views):
        v = views[x]
        incidents.append({
            "incident_id": x,
            "root": v["root"],
            "verdict": v["verdict"],
            "contaminated": v["contaminated"],
            "secondary_divergences": v["secondary_divergences"],
        })
    return {
        "incidents": incidents,
        "plans": [plans[j] for j in sorted(plans)],
        "halts": halts(state),
        "tainted_checkpoints": sorted(ck.id for ck in state.checkpoints.values() if ck.sources),
        "alerts": unrecorded_sharing(state),
    }


def final_state(state: LineageState) -> dict[str, Any]:
    """The SPEC §11 output of the whole state, projected from scratch."""
    verdicts = resolve(state)
    return output(state, incident_views(state, verdicts), all_plans(state, verdicts))
