"""Snapshots of the fold state (issue 14): the core's classes on the object-graph codec of
:mod:`streams.core.objgraph` (:class:`SnapshotCodec`, :func:`register_core`) and the snapshot of
one cohort's :class:`~streams.core.decide.Lineage` (:func:`dump_lineage`, :func:`load_lineage`).

A worker writes each cohort's Lineage to a compacted topic now and then; a worker taking a
partition over loads the latest snapshot and folds only the tail, and the audit re-folds the log
to the snapshot's offset and compares digests.

What is not serialised: the :class:`~streams.core.state.Config` (the restoring worker supplies
its own; the snapshot keeps its SPEC §5 tunables and refuses a config that folds differently),
the seal gate's policy (``config.seals``) and its loaded ``VerifyKey`` cache (``SealGate._key``
reloads a key from the job's ``public_key`` on first use).

Cost (2-core dev VM shared with other work, one cohort of ``generate_cohorts(steps=800)`` folded
and decided event by event, ~47 µs an event; ``TRAINTRACE_SNAPSHOT_BENCH=1 pytest
tests/unit/test_snapshot_codec.py -k measure -s`` re-measures):

- 10k events (100 jobs): dump ~40 ms, load ~30 ms, digest ~4 ms, 0.23 MB (0.7 MB of JSON);
- 100k events (1000 jobs): dump ~0.5 s, load ~0.35-0.5 s, digest ~40 ms, 2.25 MB (7.5 MB of JSON);

i.e. ~5 µs an event each way and ~22 bytes an event: a restore is ~10× faster than the replay it
replaces. A third of the bytes are the per-event digests (``Job.digests``, 8 random bytes a seq)
that no compressor shrinks; the rest is mostly checkpoint content hashes and ``Progress`` seqs.
Strings of 8 characters or more are written once and referred to after (ids, hashes), which
also gives the restored graph one string object per id, as the fold has. A snapshot of a large
cohort exceeds Kafka's default 1 MB record: its topic needs a larger ``max.message.bytes``.
"""


from __future__ import annotations

from typing import Any

from streams.core.objgraph import (  # noqa: F401 - the snapshot's names, importable from here
    MAGIC,
    MAX_PAYLOAD,
    VERSION,
    GraphCodec,
    SnapshotError,
    digest,
    payload,
)


class SnapshotCodec(GraphCodec):
    """The object-graph codec allowing the classes a :class:`~streams.core.decide.Lineage`
    holds (:func:`register_core`); ``core=False`` gives an empty allow-list. A higher layer adds
    its own plain classes with :meth:`register` (on its own codec, or a :meth:`copy`)."""

    def __init__(self, core: bool = True) -> None:
        super().__init__()
        if core:
            register_core(self)


# --------------------------------------------------------------------------- the core's graph


def register_core(codec: SnapshotCodec) -> SnapshotCodec:
    """Allow every class a :class:`~streams.core.decide.Lineage` holds (what a walk of folded
    cohorts — divergences, rollbacks, aliases, sealed jobs with held events — meets), and make
    a substituted :class:`~streams.core.state.Config` bring its seal policy along."""
    from streams.core import events as E
    from streams.core.decide import Lineage
    from streams.core.merkle import CompactRange
    from streams.core.project import Verdict
    from streams.core.retention import RetentionBook
    from streams.core.seals import Held, SealGate
    from streams.core.state import (Checkpoint, Config, Consumption, Dirty, FoldResult, Incarnation, Job,
                                    LineageState)

    # the events and verdicts are immutable values: written in full wherever they sit, so the
    # bytes do not depend on whether a caller handed the fold one object twice (the audit's
    # redelivered copies) or two equal ones (a worker decoding each copy)
    for cls in (E.JobStarted, E.Progress, E.CheckpointWritten, E.CheckpointConsumed, E.DivergenceReported,
                E.RolledBack, E.JobFinished, E.CheckpointDeleted, Verdict):
        codec.register(cls, value=True)
    for kind in (Checkpoint, Consumption, Job, Dirty, FoldResult, Held, CompactRange, RetentionBook):
        codec.register(kind)
    # indexes the fold fills by iterating sets of (job, incarnation): their insertion order
    # follows string hashing, and nothing reads them in order (lookups, or sorted output)
    codec.register(Incarnation, unordered=("src",))
    codec.register(LineageState, unordered=("src_holders", "src_ckpts"))
    codec.register(Lineage, unordered=("_raw", "verdicts", "_dependents", "_members", "_plans_by_incident"))
    # the gate's VerifyKey cache is not data: SealGate._key reloads a key from Job.public_key
    codec.register(SealGate, transient={"keys": dict})
    # the gate's policy is the config's (Lineage passes config.seals): substituted with it
    codec.substitute_parts(Config, lambda config: {"seals": config.seals})
    return codec


def core_codec() -> SnapshotCodec:
    """A new codec allowing the core's classes (the same as ``SnapshotCodec()``)."""
    return SnapshotCodec()


_CORE: SnapshotCodec | None = None

#: the name the snapshot of a Lineage starts with (and what its root tuple holds)
LINEAGE_FORMAT = "traintrace.lineage/1"


def _core() -> SnapshotCodec:
    global _CORE
    if _CORE is None:
        _CORE = core_codec()
    return _CORE


def _tunables(config: Any) -> list[Any]:
    """What of a Config changes the fold (SPEC §5): a snapshot is only valid under the same."""
    return [config.window, config.spike_factor, config.taint_margin]


def dump_lineage(lin: Any, codec: SnapshotCodec | None = None, level: int = 6) -> bytes:
    """The snapshot of one cohort's fold state. Call it between events, after ``decide()``
    (the per-fold marks, ``LineageState.dirty_*`` and ``new_*``, are then empty; they are
    written anyway, so a snapshot taken between ``fold`` and ``decide`` restores them too).

    The config and the gate's policy are not written (:func:`load_lineage` takes the reader's);
    the config's SPEC §5 tunables are, so a reader with other tunables is refused. Events held
    by the seal gate are written with the ``ref`` their caller gave: it must be plain data."""
    root = [LINEAGE_FORMAT, _tunables(lin.state.config), lin]
    return (codec or _core()).dumps(root, substitute={"config": lin.state.config}, level=level)


def load_lineage(data: bytes, config: Any, codec: SnapshotCodec | None = None) -> Any:
    """The :class:`~streams.core.decide.Lineage` of a snapshot, under ``config`` (whose
    ``seals`` policy the gate takes). Raises :class:`SnapshotError` if ``data`` is not the
    snapshot of a Lineage or was folded with other SPEC §5 tunables."""
    from streams.core.decide import Lineage

    root = (codec or _core()).loads(data, substitute={"config": config})
    if type(root) is not list or len(root) != 3 or root[0] != LINEAGE_FORMAT or type(root[2]) is not Lineage:
        raise SnapshotError(f"not the snapshot of a Lineage (expected {LINEAGE_FORMAT!r})")
    if root[1] != _tunables(config):
        raise SnapshotError(f"snapshot was folded with window, spike_factor, taint_margin = {root[1]}, "
                            f"this config has {_tunables(config)}: replay the cohort instead")
    lin = root[2]
    try:
        ok = (lin.state.config is config and lin.seals.policy is config.seals
              and lin.seals.jobs is lin.state.jobs)
    except AttributeError:
        ok = False
    if not ok:
        raise SnapshotError("snapshot of a Lineage whose parts do not fit together (config, gate, jobs)")
    return lin


__all__ = ["LINEAGE_FORMAT", "MAGIC", "MAX_PAYLOAD", "VERSION", "GraphCodec", "SnapshotCodec", "SnapshotError",
           "core_codec", "digest", "dump_lineage", "load_lineage", "payload", "register_core"]
