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

Each entry also carries, in its ``traintrace.offset`` header, the events offset of the
``JobStarted`` it was learnt from. An event of a job the worker has no cohort for is not routed
to the unregistered bucket at once: the worker first reads its partition of the map again
(:func:`read_map_entries`, at most every :data:`RECHECK_S` seconds a partition) and takes an
entry learnt from a ``JobStarted`` *before* the event. A map read at assignment can only lack an
entry when another worker routed that ``JobStarted`` since: two workers routing one partition at
once (one the group has already replaced, and that has not noticed yet). The re-read keeps that
worker's copies in their job's cohort, as ``analyze`` would route them; it is logged and counted
(``traintrace_jobmap_rechecks_total``).
"""

from __future__ import annotations

from typing import Iterator, MutableMapping

from streams.kafka.reader import PartitionNotFound, read_range
from streams.kafka.settings import KafkaSettings
from streams.worker.errors import WorkerError

HEADERS = [("traintrace.type", b"JobCohort"), ("content-type", b"text/plain; charset=utf-8")]
#: the header of an entry naming the events offset of the JobStarted it was learnt from
OFFSET_HEADER = "traintrace.offset"
#: seconds between two re-reads of one partition of the map for jobs without a cohort. The first
#: such event after an assignment reads it at once; a router routes its partitions in order from
#: where it started, so what it can lack is only an entry written before then, which that read
#: finds: later reads are a second line, and a stream of events of jobs that never started (a
#: misconfigured client) costs one read of the partition's map per period, not one an event
RECHECK_S = 30.0


def entry_headers(offset: int | None) -> list[tuple[str, bytes]]:
    """The headers of a map entry learnt from the JobStarted at ``offset`` (None: unknown)."""
    return HEADERS if offset is None else [*HEADERS, (OFFSET_HEADER, str(offset).encode())]


class JobCohortMap(MutableMapping[str, str]):
    """job_id → cohort_id as the router's :class:`~streams.core.cohorts.CohortRouter` uses it.
    A new entry is also queued in :attr:`pending` as (job_id, cohort_id, partition, offset), the
    partition and offset being :attr:`partition` and :attr:`offset` (those of the events record
    being routed)."""

    def __init__(self) -> None:
        self.map: dict[str, str] = {}
        self.pending: list[tuple[str, str, int, int | None]] = []
        self.partition: int | None = None
        self.offset: int | None = None

    def __getitem__(self, job_id: str) -> str:
        return self.map[job_id]

    def __setitem__(self, job_id: str, cohort_id: str) -> None:
        if self.map.get(job_id) != cohort_id:
            self.map[job_id] = cohort_id
            if self.partition is None:
                raise RuntimeError("JobCohortMap: a new entry outside of routing a record")
            self.pending.append((job_id, cohort_id, self.partition, self.offset))

    def __delitem__(self, job_id: str) -> None:
        del self.map[job_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.map)

    def __len__(self) -> int:
        return len(self.map)

    def take_pending(self) -> list[tuple[str, str, int, int | None]]:
        out, self.pending = self.pending, []
        return out


def read_map_partitions(kafka: KafkaSettings | str, topic: str, partitions: list[int],
                        timeout: float = 60.0) -> dict[str, str]:
    """Every entry of ``topic``'s ``partitions``, read to their current end."""
    return {job: cohort for job, (cohort, _at) in read_map_entries(kafka, topic, partitions, timeout).items()}


def read_map_entries(kafka: KafkaSettings | str, topic: str, partitions: list[int],
                     timeout: float = 60.0) -> dict[str, tuple[str, int | None]]:
    """Every entry of ``topic``'s ``partitions``, read to their current end: job_id -> (cohort_id,
    the events offset of the JobStarted it was learnt from, None when the entry does not say);
    the first entry of a job wins."""
    out: dict[str, tuple[str, int | None]] = {}
    try:
        for msg in read_range(kafka, topic, {p: (0, None) for p in partitions}, timeout=timeout, batch=1000):
            if msg.key() is not None and msg.value() is not None:
                out.setdefault(msg.key().decode("utf-8"), (msg.value().decode("utf-8"), _offset_of(msg.headers())))
    except PartitionNotFound as exc:
        raise WorkerError(f"{exc} (it needs as many partitions as lineage.events)") from exc
    return out


def _offset_of(headers: list | None) -> int | None:
    for name, value in headers or ():
        if name == OFFSET_HEADER and value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None
