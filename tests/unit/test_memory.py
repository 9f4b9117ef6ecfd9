"""What a live worker's referee keeps per folded event (issue 10 item 6; bench/bench_memory.py).

The worker folds every event through one :class:`~streams.referee.referee.Referee`; whatever it
keeps per event stays for the life of the process. These guard the bounds:

- no event object is kept: the fold keeps what the lineage needs (checkpoints, consumptions,
  per-seq digests, step maxima), never the event;
- the fold log of each cohort is its compact frontier: one 32-byte node per set bit of its
  size, and no other 32-byte hash is reachable from the referee (proofs are built offline from
  the topics, :mod:`streams.audit.proofs`);
- the retained size grows by a bounded number of bytes per event (~170 B on CPython 3.11 with
  this stream, mostly its checkpoints and consumptions, ~130 B with the changes proposed in
  bench/memory_patches/; a regression that kept each event, or each event's chain hash, would
  add 100 B or more).
"""

from __future__ import annotations

import gc
import sys
import types

from streams.referee.referee import Referee
from streams.codec import Codec
from streams.core import merkle
from streams.core.cohorts import CohortRouter
from streams.core.commitment import event_leaf
from streams.core.events import Envelope, parse_event
from streams.testing.cohort import chain_events, generate_cohorts

T0 = 1_760_000_000_000
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType,
           types.MethodType)


def _reachable(root):
    seen: set[int] = set()
    stack = [root]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, _OPAQUE):
            continue
        seen.add(id(o))
        yield o
        stack.extend(gc.get_referents(o))


def _size(root) -> int:
    return sum(sys.getsizeof(o) for o in _reachable(root))


def _fold(n_marks: tuple[int, ...], codec_round_trip: bool = True):
    """Fold the kill -9 test's kind of stream through a Referee as the worker does; yields
    (events folded, referee, {cohort: accepted leaves}) at each mark."""
    codec = Codec()
    referee = Referee()
    router = CohortRouter()
    leaves: dict[str, list[bytes]] = {}
    events = chain_events(generate_cohorts(jobs=120, cohort_size=20, steps=1000, seed=5, divergence_rate=0.1,
                                           exploit_every=40, exploit_prob=0.6, alias_prob=0.05, t0=T0))
    n = 0
    for d in events:
        if codec_round_trip:  # the worker folds what it decodes: fresh strings per event
            d = codec.decode_event(codec.encode_event(d))
        ev = parse_event(d)
        cohort = router.route(ev)
        handled = referee.handle(cohort, ev, T0 + n // 100 * 50, partition=0, publish=True)
        if handled.result.accepted:
            leaves.setdefault(cohort, []).append(event_leaf(ev))
        n += 1
        if n % 2000 == 0:
            referee.commitments(T0 + n // 100 * 50)
        if n in n_marks:
            yield n, referee, leaves
            if n == max(n_marks):
                return
    raise AssertionError(f"the stream has only {n} events")


def test_the_referee_keeps_no_event_and_only_the_fold_logs_frontier():
    for _n, referee, leaves in _fold((6000,)):
        gc.collect()
        objs = list(_reachable(referee))
        assert not [o for o in objs if isinstance(o, Envelope)]
        hashes = [o for o in objs if isinstance(o, bytes) and len(o) == merkle.HASH_SIZE]
        frontier = 0
        for cohort, lin in referee.engines.items():
            assert lin.log.size == len(leaves[cohort])
            assert len(lin.log.nodes) == bin(lin.log.size).count("1")
            assert lin.log.root() == merkle.root(leaves[cohort])
            frontier += len(lin.log.nodes)
        assert len(hashes) == frontier


def test_retained_bytes_per_folded_event_are_bounded():
    sizes = {}
    for n, referee, _leaves in _fold((4000, 14000)):
        gc.collect()
        sizes[n] = _size(referee)
    per_event = (sizes[14000] - sizes[4000]) / 10000
    assert 0 < per_event < 250, per_event


def test_the_fold_leaves_no_reference_cycles():
    """Everything a fold creates and drops is freed by refcounting at once. A reference cycle
    waits for a full collection, which the worker runs rarely (streams.worker.gctune): one left
    by each projection of an incident (a recursive closure) piled up in a running worker to tens
    of MB of garbage between collections, and the memory they took stayed with the process."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        garbage: list = []
        for n, referee, _leaves in _fold((500, 8000)):
            gc.collect()  # what the codec and the referee left as they were built: not the fold's
            if n == 500:
                commands = referee.stats.commands
                gc.garbage.clear()
                continue
            assert referee.stats.commands > commands  # incidents were projected meanwhile
            garbage = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    kinds: dict[str, int] = {}
    for o in garbage:
        kinds[type(o).__qualname__] = kinds.get(type(o).__qualname__, 0) + 1
    functions = sorted({o.__qualname__ for o in garbage if isinstance(o, types.FunctionType)})
    assert not garbage, f"reference cycles left by the fold: {kinds}; functions among them: {functions}"


def _garbage_of(drop) -> list:
    """What ``drop()`` leaves to the garbage collector (refcounting does not free it)."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        drop()
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()
        if was_enabled:
            gc.enable()


def test_a_cohort_the_referee_forgets_is_freed_at_once():
    """A cohort that leaves memory (idle, settled) or whose partition is revoked is freed by
    refcounting when the referee forgets it, folded or restored from its snapshot: a worker
    runs a full collection rarely (streams.worker.gctune), and the states it let go waited for
    one, piling up in its memory (each consumption refers back to its incarnation)."""
    from streams.referee import snapshots

    for _n, referee, _leaves in _fold((6000,)):
        cohorts = sorted(referee.engines)
        assert sum(len(lin.state.consumers) for lin in referee.engines.values()) > 0
        encoded = {c: snapshots.encode(referee, c) for c in cohorts}
        partitions = {c: referee.partition_of.get(c, 0) for c in cohorts}
        assert _garbage_of(lambda: referee.forget_cohorts(cohorts[: len(cohorts) // 2], idle=True)) == []
        assert _garbage_of(lambda: referee.drop_partition(0)) == []
        assert not referee.engines
        for c in cohorts:
            snapshots.restore(referee, c, partitions[c], encoded[c])
        assert _garbage_of(lambda: referee.forget_cohorts(cohorts)) == []


def test_snapshotting_and_restoring_a_cohort_leave_no_reference_cycles():
    """A snapshot round encodes every changed cohort and a cohort that comes back decodes its
    snapshot; neither may leave a cycle. The graph codec's encoder once held its writers as bound
    methods (a cycle through itself) and with them the list of every object it numbered: each
    encoded cohort's whole state, kept until a full collection. A worker that let its cohorts go
    kept them all the same, and after a 1M-event backlog held 22 of them (167k objects)."""
    from streams.referee import snapshots

    for _n, referee, _leaves in _fold((3000,)):
        cohorts = sorted(referee.engines)
        partitions = {c: referee.partition_of.get(c, 0) for c in cohorts}
        encoded: dict[str, bytes] = {}
        assert _garbage_of(lambda: encoded.update((c, snapshots.encode(referee, c)) for c in cohorts)) == []
        referee.forget_cohorts(cohorts)
        assert not referee.engines
        assert _garbage_of(lambda: [snapshots.restore(referee, c, partitions[c], encoded[c]) for c in cohorts]) == []
        assert sorted(referee.engines) == cohorts
