"""The router's job → cohort map, kept by the worker itself in a compacted topic.

A job's events carry no cohort; only its ``JobStarted`` does (SPEC §4), so the router must
remember job → cohort for every job whose events partition it routes. The map lives in the
compacted topic ``lineage.job-cohorts``: one record per job (key ``job_id``, value the cohort
id as UTF-8), written **to the partition of the job's events** when its first ``JobStarted``
is routed, and flushed with the routed batch before its position can be committed. A worker
assigned an events partition reads that partition of the map to its end before routing it.

Why not a Faust table (as before): a table partition rebuilt from a standby copy could miss a
key while its persisted changelog offset said it was complete (a standby's buffered changelog
records dropped by a rebalance, later ones applied), and the job's later events were then
routed as unregistered — found by the churn test. The map is immutable per job (the first
``JobStarted`` wins), tiny (one record per job) and read whole on every assignment, so there is
no local state to go stale.
"""

from __future__ import annotations

from typing import Iterator, MutableMapping

from streams.kafka.reader import PartitionNotFound, read_range
from streams.kafka.settings import KafkaSettings
from streams.worker.errors import WorkerError

HEADERS = [("traintrace.type", b"JobCohort"), ("content-type", b"text/plain; charset=utf-8")]


class JobCohortMap(MutableMapping[str, str]):
    """job_id → cohort_id as the router's :class:`~streams.core.cohorts.CohortRouter` uses it.
    A new entry is also queued in :attr:`pending` as (job_id, cohort_id, partition), the
    partition being :attr:`partition` (the events partition of the record being routed)."""

    def __init__(self) -> None:
        self.map: dict[str, str] = {}
        self.pending: list[tuple[str, str, int]] = []
        self.partition: int | None = None

    def __getitem__(self, job_id: str) -> str:
        return self.map[job_id]

    def __setitem__(self, job_id: str, cohort_id: str) -> None:
        if self.map.get(job_id) != cohort_id:
            self.map[job_id] = cohort_id
            if self.partition is None:
                raise RuntimeError("JobCohortMap: a new entry outside of routing a record")
            self.pending.append((job_id, cohort_id, self.partition))

    def __delitem__(self, job_id: str) -> None:
        del self.map[job_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.map)

    def __len__(self) -> int:
        return len(self.map)

    def take_pending(self) -> list[tuple[str, str, int]]:
        out, self.pending = self.pending, []
        return out


def read_map_partitions(kafka: KafkaSettings | str, topic: str, partitions: list[int],
                        timeout: float = 60.0) -> dict[str, str]:
    """Every entry of ``topic``'s ``partitions``, read to their current end."""
    out: dict[str, str] = {}
    try:
        for msg in read_range(kafka, topic, {p: (0, None) for p in partitions}, timeout=timeout, batch=1000):
            if msg.key() is not None and msg.value() is not None:
                out.setdefault(msg.key().decode("utf-8"), msg.value().decode("utf-8"))
    except PartitionNotFound as exc:
        raise WorkerError(f"{exc} (it needs as many partitions as lineage.events)") from exc
    return out
