"""The ``commands`` and ``manifests`` checks: what the replay decided against what the topics hold.

``commands``   every command on ``lineage.control`` is one the replay issued, equal in every
               field (the processor's timestamps included), and each job's plan records come
               out in the order they supersede each other; every command the replay issued is
               on the topic — except a plan superseded before a recovering worker published
               it, or a clear of a plan never published (warnings). Operator releases are not
               decisions and are not compared. The signature and key id of a command are not
               compared (the replay does not sign); with trusted keys every command, releases
               included, must carry a signature that verifies under a key whose role may sign
               that kind (:func:`streams.signing.check_control`), else a failure naming it.
``manifests``  likewise every ``DivergenceManifest`` version (a version missing under a later
               one is a compacted topic: a warning).

What the processor decides on its own clock is checked for justification instead of equality:
an ``UNTRACEABLE_SOURCE`` halt the end of the replay implies but the topic lacks is a warning.

Supersession is read here only from the replay's own emissions (the order it issued a job's
plan records in); the fold of what ``lineage.control`` means is :mod:`streams.control`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams.control.commands import HALT_RECORD, PLAN_RECORDS, RELEASE_REASON, RETENTION_RECORD, SIGNED_RECORDS
from streams.referee import records as R
from streams.audit.diff import values_differ
from streams.audit.items import FoldItem, after, where
from streams.audit.report import Check, Finding

if TYPE_CHECKING:
    from streams.audit.context import AuditContext

Decided = list[tuple[R.Emission, FoldItem | None]]


def _absent(a: AuditContext, chk: Check, topic: str, what: str, recomputed: int) -> bool:
    """Skip ``chk`` when the log has no ``topic`` (nothing to compare with)."""
    if a.present(topic):
        return False
    chk.skipped = True
    chk.notes.append(f"the log has no {topic} topic: {what} recomputed, none to compare")
    chk.counts["recomputed"] = recomputed
    return True


# ---------------------------------------------------------------------------- commands


def compare_control(a: AuditContext, expected: Decided, at_end: list[R.Emission]) -> None:
    chk = a.checks["commands"]
    if _absent(a, chk, "control", "commands", len(expected)):
        return
    want: dict[str, tuple[R.Emission, FoldItem | None]] = {}
    #: a plan whose content changed under its id is issued again (streams.referee.referee):
    #: command id -> every version before the last
    earlier: dict[str, list[dict[str, Any]]] = {}
    order_of_job: dict[str, list[str]] = {}
    for em, cause in expected:
        cid = em.value["command_id"]
        if cid in want and em.record in PLAN_RECORDS:
            earlier.setdefault(cid, []).append(want[cid][0].value)
        want[cid] = (em, cause)
        if em.record in PLAN_RECORDS and cid not in order_of_job.get(em.value["job_id"], ()):
            # the job's plan records, each superseding the one before
            order_of_job.setdefault(em.value["job_id"], []).append(cid)
    end_halts = {em.value["command_id"]: em for em in at_end}
    got = _published_commands(a, chk, want, order_of_job, earlier)
    _missing_commands(a, chk, want, order_of_job, got)
    for cid, em in end_halts.items():
        if cid not in got and cid not in want:
            chk.warn(Finding(f"no HaltCommand yet for an unresolved source ({em.value.get('detail')}): "
                             "issued on the processor's clock after the grace period",
                             job_id=em.value["job_id"]))


def _published_commands(a: AuditContext, chk: Check, want: dict[str, tuple[R.Emission, FoldItem | None]],
                        order_of_job: dict[str, list[str]],
                        earlier: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Every command on the topic held to the one the replay issued; returns them by id. A plan
    the replay issued again with new content under its id: a record equal to an earlier
    version is checked for its order only, and the last version must be there too."""
    last_index: dict[str, tuple[int, str, str]] = {}  # job -> (chain index, command id, where)
    got: dict[str, dict[str, Any]] = {}
    operator = 0
    for rec, name, value in a.decoded("control", chk, "control record"):
        check_control_signature(a, chk, rec, name, value)
        value = {k: v for k, v in value.items() if k not in _SIGNATURE_FIELDS}
        if name == HALT_RECORD and value.get("reason") == RELEASE_REASON:
            operator += 1
            continue
        chk.checked += 1
        cid: str = value.get("command_id") or ""
        at = where(rec)
        prev = got.get(cid)
        if prev is not None and prev == value:
            continue  # re-published identically (a recovering worker, a redelivery)
        hit = want.get(cid)
        if hit is not None and name == hit[0].record and any(
                not values_differ(v, value) for v in earlier.get(cid, ())):
            chain = order_of_job.get(hit[0].value["job_id"], [])  # an earlier version (the doc)
            if cid in chain:
                _check_plan_order(chk, name, cid, hit[0].value["job_id"], chain, last_index, at)
            continue
        got.setdefault(cid, value)
        if hit is None:
            chk.fail(Finding(f"extra {name}: nothing in the log implies command {cid[:12]}",
                             job_id=value.get("job_id"), where=at,
                             field="action" if "action" in value else "reason",
                             expected=None, found=value.get("action") or value.get("reason")))
            continue
        em, cause = hit
        if em.record != name:
            chk.fail(Finding(f"command {cid[:12]} is a {name}, the log implies a {em.record}",
                             job_id=value.get("job_id"), where=at))
            continue
        chain = order_of_job.get(em.value["job_id"], [])
        if cid in chain:
            _check_plan_order(chk, name, cid, em.value["job_id"], chain, last_index, at)
        for f, e, g in values_differ(em.value, value)[:8]:
            chk.fail(Finding(f"{name} {cid[:12]} differs from what the log implies"
                             + after(cause),
                             job_id=value.get("job_id"), where=at, field=f, expected=e, found=g))
    if operator:
        chk.counts["operator releases (not decisions: not audited)"] = operator
    return got


_SIGNATURE_FIELDS = ("signature", "key_id")


def check_control_signature(a: AuditContext, chk: Check, rec: Any, name: str, value: dict[str, Any]) -> None:
    """With trusted keys, verify the control record's signature: a record that is unsigned, by
    an unknown key, by a key whose role may not sign it, or whose signature does not verify is a
    failure naming it (partition@offset, command id, what is wrong)."""
    if name not in SIGNED_RECORDS or a.trusted is None:
        return
    from streams.signing import check_control

    c = check_control(name, value, a.trusted)
    key = "command signatures verified" if c.ok else f"command signatures rejected ({c.reason})"
    chk.counts[key] = chk.counts.get(key, 0) + 1
    if not c.ok:
        cid = str(value.get("command_id"))
        chk.fail(Finding(f"{name} {cid[:12]} at {where(rec)} is not signed by a trusted key allowed to: "
                         f"{c.reason} ({c.detail})", job_id=value.get("job_id"), where=where(rec),
                         field="signature", expected="a valid signature by a trusted key allowed this kind",
                         found=c.key_id))


def _check_plan_order(chk: Check, name: str, cid: str, job: str, chain: list[str],
                      last_index: dict[str, tuple[int, str, str]], at: str) -> None:
    """Plan records must come out in the order they supersede each other: a record published
    after one that supersedes it leaves the job's effective plan on the topic stale."""
    idx = chain.index(cid)
    last = last_index.get(job)
    if last is not None and idx < last[0]:
        chk.fail(Finding(f"{name} {cid[:12]} published after {last[1][:12]}, which supersedes it: "
                         "the job's effective plan on the topic is stale",
                         job_id=job, where=at, field="order",
                         expected=f"before {last[2]}", found=at))
    else:
        last_index[job] = (idx, cid, at)


def _missing_commands(a: AuditContext, chk: Check, want: dict[str, tuple[R.Emission, FoldItem | None]],
                      order_of_job: dict[str, list[str]], got: dict[str, dict[str, Any]]) -> None:
    """Every command the replay issued and the topic lacks: a failure, or a warning when a
    worker had a reason not to publish it."""
    for cid, (em, cause) in want.items():
        if cid in got:
            continue
        job = em.value["job_id"]
        chain = order_of_job.get(job, [])
        earlier = chain[:chain.index(cid)] if cid in chain else []
        later = chain[chain.index(cid) + 1:] if cid in chain else []
        f = Finding(f"missing {em.record} {cid[:12]}"
                    + (f" ({em.value.get('action') or em.value.get('reason')}"
                       f"{' → ' + str(em.value.get('target_checkpoint_id')) if em.value.get('target_checkpoint_id') else ''})")
                    + after(cause, "implied"),
                    job_id=job, seq=cause.event.seq if cause and cause.event is not None and cause.event.job_id == job else None,
                    where=cause.where if cause else None)
        if em.record in PLAN_RECORDS and later:
            # a worker that recovers a partition publishes the plan it ends with, not the
            # ones its replay went through (the job's last plan record is checked on its own)
            f.what += ": superseded before it was published (a recovering worker skips it)"
            chk.warn(f)
        elif em.record == RETENTION_RECORD and any(
                g.get("job_id") == job and (g.get("version") or 0) > em.value["version"]
                for g in got.values() if "version" in g and "deletable" in g):
            # like a plan: a recovering worker publishes the job's last retention view only
            f.what += ": a later version is on the topic (a recovering worker publishes the last one)"
            chk.warn(f)
        elif em.record == "PlanCleared" and not any(c in got for c in earlier):
            f.what += ": it clears a plan that was never published, so there is nothing to clear"
            chk.warn(f)
        else:
            a.missing(chk, f)


# ---------------------------------------------------------------------------- manifests


def compare_manifests(a: AuditContext, expected: Decided) -> None:
    chk = a.checks["manifests"]
    if _absent(a, chk, "manifests", "versions", len(expected)):
        return
    want: dict[tuple[str, int], tuple[R.Emission, FoldItem | None]] = {}
    for em, cause in expected:
        want[(em.value["incident_id"], em.value["version"])] = (em, cause)
    got, got_latest = _published_manifests(a, chk, want)
    for k, (em, cause) in want.items():
        if k in got:
            continue
        f = Finding(f"missing manifest {k[0][:12]} v{k[1]}"
                    + after(cause, "implied"),
                    job_id=em.value["root"]["job_id"], where=cause.where if cause else None)
        if got_latest.get(k[0], 0) > k[1]:
            f.what += ": a later version is present (the topic is compacted)"
            chk.warn(f)
        else:
            a.missing(chk, f)


def _published_manifests(a: AuditContext, chk: Check, want: dict[tuple[str, int], tuple[R.Emission, FoldItem | None]]
                         ) -> tuple[dict[tuple[str, int], dict[str, Any]], dict[str, int]]:
    """Every manifest version on the topic held to the one the replay decided; returns them by
    (incident, version), and each incident's latest version published."""
    got: dict[tuple[str, int], dict[str, Any]] = {}
    got_latest: dict[str, int] = {}
    for rec, _name, value in a.decoded("manifests", chk, "manifest"):
        chk.checked += 1
        k = (value["incident_id"], value["version"])
        at = where(rec)
        root_job = (value.get("root") or {}).get("job_id")
        prev = got.get(k)
        if prev is not None and prev == value:
            continue  # re-published identically (a recovering worker, a redelivery)
        got.setdefault(k, value)
        got_latest[k[0]] = max(got_latest.get(k[0], 0), k[1])
        hit = want.get(k)
        if hit is None:
            chk.fail(Finding(f"extra manifest {k[0][:12]} v{k[1]}: the log implies no such version",
                             job_id=root_job, where=at))
            continue
        em, cause = hit
        for f, e, g in values_differ(em.value, value)[:8]:
            chk.fail(Finding(f"manifest {k[0][:12]} v{k[1]} differs from what the log implies"
                             + after(cause),
                             job_id=root_job, where=at, field=f, expected=e, found=g))
    return got, got_latest
