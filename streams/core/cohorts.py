"""Cohorts: the unit the lineage is folded in, offline and live alike.

A cohort is "the set of jobs that may share state" (SPEC §2), so each cohort's lineage is
self-contained: one :class:`~streams.core.decide.Lineage` per cohort. Events are routed to a
cohort by their job's ``JobStarted`` (the first one seen wins); the events of a job that has
none go to the unregistered bucket ``""`` (their job is halted ``UNREGISTERED`` there).

The live processor routes exactly this way (its router keeps the job → cohort map in a table),
so ``analyze`` and the pipeline fold the same events into the same engines and cannot disagree,
whatever the number of partitions and workers. A consumption of a checkpoint that no job of
the consumer's cohort wrote stays unresolved within the cohort: ``UNTRACEABLE_SOURCE``.
"""

from __future__ import annotations

from typing import Any, Iterable, MutableMapping

from streams.core.decide import Decision, Lineage
from streams.core.events import Event, JobStarted
from streams.core.state import HALT_RANK, Config, FoldResult

UNREGISTERED_COHORT = ""


class CohortRouter:
    """job_id → cohort_id, learnt from each job's ``JobStarted``."""

    def __init__(self, mapping: MutableMapping[str, str] | None = None) -> None:
        self.mapping: MutableMapping[str, str] = mapping if mapping is not None else {}

    def route(self, event: Event) -> str:
        cohort = self.mapping.get(event.job_id)
        if cohort is None and isinstance(event, JobStarted):
            cohort = event.cohort_id
            self.mapping[event.job_id] = cohort
        return cohort if cohort is not None else UNREGISTERED_COHORT


class CohortLineage:
    """One :class:`Lineage` per cohort behind one router."""

    def __init__(self, config: Config | None = None, router: CohortRouter | None = None) -> None:
        self.config = config or Config()
        self.router = router or CohortRouter()
        self.cohorts: dict[str, Lineage] = {}

    def engine(self, cohort_id: str) -> Lineage:
        lin = self.cohorts.get(cohort_id)
        if lin is None:
            lin = self.cohorts[cohort_id] = Lineage(self.config)
        return lin

    def apply(self, event: Event, now_ms: int | None = None) -> list[tuple[str, Decision]]:
        cohort = self.router.route(event)
        return [(cohort, d) for d in self.engine(cohort).apply(event, now_ms)]

    def fold(self, event: Event, now_ms: int | None = None) -> FoldResult:
        return self.engine(self.router.route(event)).fold(event, now_ms)

    def apply_many(self, events: Iterable[Event], now_ms: int | None = None) -> list[tuple[str, Decision]]:
        touched: set[str] = set()
        for ev in events:
            cohort = self.router.route(ev)
            self.engine(cohort).fold(ev, now_ms)
            touched.add(cohort)
        return [(c, d) for c in sorted(touched) for d in self.cohorts[c].decide()]

    def finish_input(self) -> list[tuple[str, Decision]]:
        return [(c, d) for c in sorted(self.cohorts) for d in self.cohorts[c].finish_input()]

    def tick(self, now_ms: int, grace_ms: int) -> list[tuple[str, Decision]]:
        return [(c, d) for c in sorted(self.cohorts) for d in self.cohorts[c].tick(now_ms, grace_ms)]

    def final_state(self) -> dict[str, Any]:
        return merge_final_states(
            (c, self.cohorts[c].final_state()) for c in sorted(self.cohorts)
        )


def merge_final_states(states: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The SPEC §11 output of several cohorts as one (lists sorted as §11 says).

    A job folded in two engines (events before its ``JobStarted`` land in the unregistered
    bucket) keeps the plan of its cohort and its first halt reason in SPEC order.
    """
    incidents: list[dict[str, Any]] = []
    plans: dict[str, tuple[bool, dict[str, Any]]] = {}
    halts: dict[str, dict[str, Any]] = {}
    tainted: set[str] = set()
    alerts: list[dict[str, Any]] = []
    for cohort, st in states:
        registered = cohort != UNREGISTERED_COHORT
        incidents.extend(st["incidents"])
        for p in st["plans"]:
            prev = plans.get(p["job_id"])
            if prev is None or (registered and not prev[0]):
                plans[p["job_id"]] = (registered, p)
        for h in st["halts"]:
            prev_halt = halts.get(h["job_id"])
            if prev_halt is None or HALT_RANK[h["reason"]] < HALT_RANK[prev_halt["reason"]]:
                halts[h["job_id"]] = h
        tainted.update(st["tainted_checkpoints"])
        alerts.extend(st["alerts"])
    return {
        "incidents": sorted(incidents, key=lambda i: i["incident_id"]),
        "plans": [plans[j][1] for j in sorted(plans)],
        "halts": [halts[j] for j in sorted(halts)],
        "tainted_checkpoints": sorted(tainted),
        "alerts": sorted(alerts, key=lambda a: (a.get("job_id") or "", a.get("checkpoint_id") or "")),
    }
