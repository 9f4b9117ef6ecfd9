"""A cohort's part of the referee as bytes: what a worker writes to ``lineage.snapshots`` and a
worker taking the partition over loads instead of re-folding the cohort's whole input.

The image of a cohort is its core engine (:class:`~streams.core.decide.Lineage`, encoded by
:mod:`streams.core.snapshot`) plus what the referee keeps of it: the manifest versions and
concurrency snapshots of its incidents, the records it decided last (plan, halt, manifest: a
recovering worker re-publishes exactly those) and its commands awaiting acknowledgement. Not in
it: what depends on the worker's wall clock or on other cohorts (alerts already raised for
unacknowledged commands, the commitment dedupe, the set of command ids on ``lineage.control``,
which a new owner reads back anyway) and the input position (the snapshot record says it).

The encoding is deterministic, so the audit, re-folding the log to the cohort's input offset,
gets the same bytes and checks the digest (:func:`digest`). Held events (sealed jobs,
:mod:`streams.core.seals`) keep their input reference in a plain form — the routed event
(``partition``, ``offset``, ``value``) — whoever folded them: ``plain_ref`` maps the caller's
reference to it (the audit's fold items carry the routed event).

A cohort is *settled* (:func:`settled`) when every job finished, every plan is acknowledged,
nothing waits for a seal or a source: it may leave memory and come back from its snapshot when
its next input arrives (:meth:`Referee.evict`, ``Referee.restorer``).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Callable

from streams.core import snapshot as core_snapshot
from streams.core.decide import Lineage
from streams.core.state import Config
from streams.errors import TraintraceError
from streams.referee.records import Emission

if TYPE_CHECKING:
    from streams.referee.referee import Referee

#: the version of the image's layout (the core codec has its own)
FORMAT = 1

_CODEC = core_snapshot.SnapshotCodec()
_CODEC.register(Emission)


class SnapshotRejected(TraintraceError):
    """A snapshot that cannot be loaded: undecodable, another format, a digest that does not
    match its state, a cohort other than the one it is filed under."""


def settled(lin: Lineage) -> bool:
    """Every job finished, every plan acknowledged, no event held for a seal, no consumption
    waiting for its source: nothing can happen to the cohort until new input arrives."""
    if not quiescent(lin):
        return False
    st = lin.state
    for job_id, job in st.jobs.items():
        if job.current is None or not job.current.finished:
            return False
        plan = lin.plans.get(job_id)
        if plan is not None and plan.get("command_id") not in st.acknowledged:
            return False
    return True


def quiescent(lin: Lineage) -> bool:
    """Nothing the fold would decide waits on the clock: no event held for a seal, no
    consumption waiting for its source (no grace-period halt to come). Its jobs may still be
    training: a quiescent cohort with no input for a while may leave memory (``--evict-idle``)
    and come back at its next event. A command it issued and its job has not acknowledged stays
    known to the referee (``Referee.resting``: the acknowledgement would be input), so its
    timeout still alerts. A retention tick it would have had meanwhile (SPEC §13) comes when it
    is back: its jobs keep their checkpoints a little longer, never fewer."""
    return not (lin.seals.holding or lin.state.unresolved)


def _with_plain_refs(lin: Lineage, plain_ref: Callable[[Any], Any] | None) -> Callable[[], None]:
    """Swap the held events' references to their plain form, and drop their canonical bytes (a
    cache the fold recomputes, which only some callers fill); returns how to swap them back."""
    if not lin.seals.holding:
        return lambda: None
    swapped = []
    for by_seq in lin.seals.held.values():
        for held in by_seq.values():
            for h in held:
                swapped.append((h, h.ref, h.canonical))
                h.ref = plain_ref(h.ref) if plain_ref is not None else h.ref
                h.canonical = None

    def undo() -> None:
        for h, ref, canonical in swapped:
            h.ref, h.canonical = ref, canonical
    return undo


def image(referee: Referee, cohort: str) -> dict[str, Any]:
    """The cohort's part of ``referee`` as one plain graph (see the module docstring)."""
    lin = referee.engines[cohort]
    incidents = [x for x, c in referee.incident_cohort.items() if c == cohort]
    jobs = list(lin.state.jobs)
    c = referee.config
    return {
        "cohort": cohort,
        # the SPEC §5 tunables it was folded with: restored only under the same
        "tunables": [c.window, c.spike_factor, c.taint_margin],
        "engine": lin,
        "versions": [(x, referee.versions[x]) for x in incidents if x in referee.versions],
        "concurrency": [(x, referee.snapshots[x]) for x in incidents if x in referee.snapshots],
        "plans": [(j, referee.decided_plan[j]) for j in jobs if j in referee.decided_plan],
        "halts": [(j, referee.decided_halt[j]) for j in jobs if j in referee.decided_halt],
        "manifests": [(x, referee.decided_manifest[x]) for x in lin.incidents if x in referee.decided_manifest],
        "issued": [(cid, v) for cid, v in referee.issued.items() if v[0] == cohort],
    }


def encode(referee: Referee, cohort: str, plain_ref: Callable[[Any], Any] | None = None) -> bytes:
    """The cohort's image, encoded (uncompressed, deterministic)."""
    lin = referee.engines[cohort]
    undo = _with_plain_refs(lin, plain_ref)
    try:
        return _CODEC.encode(image(referee, cohort), substitute={"config": referee.config})
    finally:
        undo()


def digest(encoded: bytes) -> str:
    """Hex SHA-256 of an image's encoding (what ``CohortSnapshot.digest`` holds)."""
    return hashlib.sha256(encoded).hexdigest()


def verify(state: bytes, expected_digest: str) -> bytes:
    """The encoding in a ``CohortSnapshot.state``, checked against its digest. (The state is
    stored uncompressed: the snapshot topic's producer compresses its batches, in librdkafka's
    own threads, off the fold's.)"""
    if not isinstance(state, (bytes, bytearray)) or digest(bytes(state)) != expected_digest:
        raise SnapshotRejected("the snapshot's state does not match its digest")
    return bytes(state)


def _image(config: Config, cohort: str, encoded: bytes) -> dict[str, Any]:
    try:
        img = _CODEC.decode(encoded, substitute={"config": config})
    except core_snapshot.SnapshotError as exc:
        raise SnapshotRejected(f"snapshot of cohort {cohort!r}: {exc}") from exc
    if not isinstance(img, dict) or img.get("cohort") != cohort or not isinstance(img.get("engine"), Lineage):
        raise SnapshotRejected(f"the snapshot filed under cohort {cohort!r} is not that cohort's")
    c = config
    if img.get("tunables") != [c.window, c.spike_factor, c.taint_margin]:
        raise SnapshotRejected(f"the snapshot of cohort {cohort!r} was folded with other tunables "
                               f"(window, spike factor, taint margin {img.get('tunables')})")
    return img


def engine_of(config: Config, cohort: str, encoded: bytes) -> Lineage:
    """A cohort's engine from its image, on its own (no referee touched): what the views show of
    a cohort out of memory."""
    engine: Lineage = _image(config, cohort, encoded)["engine"]
    return engine


def restore(referee: Referee, cohort: str, partition: int, encoded: bytes) -> Lineage:
    """Put a cohort's image into ``referee`` (replacing what it had of the cohort)."""
    img = _image(referee.config, cohort, encoded)
    referee.forget_cohorts([cohort])
    lin: Lineage = img["engine"]
    referee.engines[cohort] = lin
    referee.partition_of[cohort] = partition
    for x, v in img["versions"]:
        referee.versions[x] = v
        referee.incident_cohort[x] = cohort
    for x, snap in img["concurrency"]:
        referee.snapshots[x] = snap
    referee.decided_plan.update(img["plans"])
    referee.decided_halt.update(img["halts"])
    referee.decided_manifest.update(img["manifests"])
    for cid, v in img["issued"]:
        referee.issued[cid] = tuple(v)
    return lin
