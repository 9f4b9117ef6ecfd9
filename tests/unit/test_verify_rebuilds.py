"""--verify-rebuilds (streams.worker.verify): what it compares and how it words a difference, and
the commit the worker counts on (streams.worker.faust_app.commit_owned)."""

import asyncio

from faust.types import TP

from streams.core.decide import Lineage
from streams.worker.faust_app import commit_owned
from streams.worker.verify import differences, heads_of
from tests.unit.core_builders import Cohort, with_chain


def lineage(events) -> Lineage:
    lin = Lineage()
    for ev in with_chain(events):
        lin.fold(ev, ev.ts)
    return lin


def test_a_job_whose_start_a_rebuild_lost_is_named():
    c = Cohort("jc1")
    c.start("a").start("b").progress("a", 1).progress("b", 1)
    full = lineage(c.events)
    without_b_start = lineage([e for e in c.events if not (e.job_id == "b" and e.seq == 0)])
    want = {"jc1": heads_of(full)}
    assert differences({"jc1": heads_of(full)}, want) == []
    found = differences({"jc1": heads_of(without_b_start)}, want)
    assert len(found) == 1 and "'jc1'" in found[0] and found[0].startswith("cohort 'jc1': b ")
    assert "a has" not in found[0]  # only what differs
    assert differences({}, want) == ["cohort 'jc1' missing"]
    assert differences({"jc1": {}, "jc2": {}}, {"jc1": {}}) == ["cohort 'jc2' not in the re-fold"]
    assert differences({"jc2": {}}, {"jc1": {}}, only={"jc1"}) == ["cohort 'jc1' missing"]


class _Consumer:
    def __init__(self, assigned, ok=True):
        self.assigned = set(assigned)
        self.ok = ok
        self.calls = []

    def assignment(self):
        return self.assigned

    async def _commit(self, offsets):
        self.calls.append(dict(offsets))
        return self.ok


class _App:
    def __init__(self, consumer):
        self.consumer = consumer


def test_only_what_was_committed_counts_as_committed():
    """Faust's _commit leaves out partitions outside the consumer's assignment and still says
    True: the worker must not take those positions for committed."""
    a, b = TP("events", 0), TP("events", 1)
    consumer = _Consumer({a})
    assert asyncio.run(commit_owned(_App(consumer), {a: 5, b: 7})) == {a: 5}
    assert consumer.calls == [{a: 5}]
    assert asyncio.run(commit_owned(_App(_Consumer({a}, ok=False)), {a: 5})) == {}
    consumer = _Consumer(set())
    assert asyncio.run(commit_owned(_App(consumer), {b: 7})) == {}
    assert consumer.calls == []  # nothing to ask
