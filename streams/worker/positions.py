"""Which input partitions a worker owns and how far it has processed them — the worker's own
offset bookkeeping, without Kafka or Faust.

Faust's acknowledgement-based commits are off for the two inputs (``acks=False``): a batch
taken before a rebalance can be acknowledged after it, and Faust's per-partition ack lists are
reset on revoke, so its commits could move past records nobody processed (events lost) or stop
advancing (a head gap that never fills). Instead the worker commits exactly what it has
processed and flushed:

- ``position[p]`` is the next offset of ``p`` to process; every record before it was processed
  and everything it caused is on the broker (it only advances after the outputs are flushed);
- a record of a partition the worker does not own, or below its position (a copy re-fetched
  after a rebalance), is skipped; a record beyond it means records were skipped in between;
- the positions are committed on a timer, on revoke (before another worker may start from
  them) and on shutdown, so the next owner starts exactly where this one stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Arrival(Enum):
    PROCESS = "process"  # the next record of an owned partition
    STALE = "stale"  # not owned (taken before a rebalance): its owner processes it
    SEEN = "seen"  # below the position: processed already
    GAP = "gap"  # beyond the position: records in between were not seen


@dataclass
class InputPartitions:
    topic: str
    owned: set[int] = field(default_factory=set)
    position: dict[int, int] = field(default_factory=dict)
    committed: dict[int, int] = field(default_factory=dict)

    def assign(self, partition: int, start: int) -> None:
        """Own ``partition`` from ``start`` (the group's committed offset, or where the
        partition begins when it has none)."""
        self.owned.add(partition)
        self.position[partition] = start
        self.committed[partition] = start

    def revoke(self, partition: int) -> None:
        self.owned.discard(partition)
        self.committed.pop(partition, None)

    def classify(self, partition: int, offset: int) -> Arrival:
        if partition not in self.owned:
            return Arrival.STALE
        pos = self.position.get(partition)
        if pos is None or offset == pos:
            return Arrival.PROCESS
        return Arrival.SEEN if offset < pos else Arrival.GAP

    def advance(self, partition: int, offset: int) -> None:
        """Record ``offset`` processed (its outputs sent; committed once they are delivered)."""
        if offset + 1 > self.position.get(partition, -1):
            self.position[partition] = offset + 1

    def to_commit(self, partitions: set[int] | None = None) -> dict[int, int]:
        """Positions of owned partitions not committed yet."""
        return {p: o for p, o in self.position.items()
                if p in self.owned and (partitions is None or p in partitions) and self.committed.get(p) != o}

    def committed_at(self, offsets: dict[int, int]) -> None:
        self.committed.update(offsets)
