"""Terse builders of event sequences for the hand-written rule tests (SPEC §4–§10).

``Cohort`` assigns ``seq`` (per job, +1 per event), ``incarnation`` (per job, +1 at each
``rollback``) and ``ts`` (strictly increasing across the whole cohort) automatically; every
method returns the cohort so calls chain, and ``cohort.events`` is the list of core events
(built with ``parse_event`` from the JSON Lines dict form, so they are validated).

Faults for the guard tests are injected with keyword overrides (``seq=``, ``incarnation=``,
``ts=``) or :meth:`Cohort.skip` (a lost event). ``analyze`` runs the core three ways (batch,
one event at a time, from-scratch projection) and asserts they agree.

Identifiers used in expectations are computed here independently of ``streams.core.ids``,
straight from the SPEC §10 text.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Iterable

from streams.core.chain import chain_hash
from streams.core.decide import Lineage
from streams.core.events import Event, parse_event
from streams.core.project import final_state
from streams.core.state import Config, fold_all

GENESIS = "0" * 64


def sha(*parts: object) -> str:
    """SPEC §10: SHA-256 over each part as UTF-8 text (null empty) + one 0x00 byte, hex."""
    h = hashlib.sha256()
    for p in parts:
        h.update(("" if p is None else str(p)).encode("utf-8") + b"\x00")
    return h.hexdigest()


def iid(job_id: str, incarnation: int, onset_step: int) -> str:
    """incident_id of SPEC §10, computed by hand."""
    return sha(job_id, incarnation, onset_step)


def cid(incident_ids: Iterable[str], job_id: str, incarnation: int, action: str,
        target: str | None) -> str:
    """command_id of SPEC §10, computed by hand."""
    return sha(*sorted(incident_ids), job_id, incarnation, action, target)


def content(ckpt_id: str) -> str:
    """Default content hash of a checkpoint: distinct per id."""
    return hashlib.sha256(("content of " + ckpt_id).encode()).hexdigest()


class Cohort:
    def __init__(self, cohort_id: str = "c1", t0: int = 1_760_000_000_000, dt: int = 1000) -> None:
        self.cohort_id = cohort_id
        self.events: list[Event] = []
        self._seq: dict[str, int] = {}
        self._inc: dict[str, int] = {}
        self._clock = t0
        self._dt = dt

    # ------------------------------------------------------------------ plumbing

    def _emit(self, job: str, etype: str, fields: dict[str, Any], *, seq: int | None = None,
              incarnation: int | None = None, ts: int | None = None) -> "Cohort":
        if seq is None:
            seq = self._seq.get(job, 0)
            self._seq[job] = seq + 1
        if incarnation is None:
            incarnation = self._inc.get(job, 0)
        if ts is None:
            self._clock += self._dt
            ts = self._clock
        d = {"type": etype, "job_id": job, "seq": seq, "incarnation": incarnation, "ts": ts}
        d.update(fields)
        self.events.append(parse_event(d))
        return self

    @property
    def last(self) -> Event:
        return self.events[-1]

    def skip(self, job: str, n: int = 1) -> "Cohort":
        """Lose ``n`` events of ``job``: its next event's seq jumps."""
        self._seq[job] = self._seq.get(job, 0) + n
        return self

    def now(self) -> int:
        return self._clock

    # ------------------------------------------------------------------ events

    def start(self, job: str, base: str | None = None, *, base_model: str = "base-7b",
              **over: Any) -> "Cohort":
        return self._emit(job, "JobStarted", {"cohort_id": self.cohort_id, "base_model": base_model,
                                              "base_checkpoint_id": base, "config_hash": None}, **over)

    def progress(self, job: str, step: int, loss: float = 1.0, grad_norm: float | None = 1.0,
                 **over: Any) -> "Cohort":
        return self._emit(job, "Progress", {"step": step, "epoch": 0, "loss": loss,
                                            "grad_norm": grad_norm, "lr": None}, **over)

    def ckpt(self, job: str, ckpt_id: str, step: int, content_hash: str | None = None,
             **over: Any) -> "Cohort":
        return self._emit(job, "CheckpointWritten", {
            "checkpoint_id": ckpt_id, "step": step, "epoch": 0,
            "content_hash": content_hash if content_hash is not None else content(ckpt_id),
            "uri": f"mem://{ckpt_id}"}, **over)

    def consume(self, job: str, ckpt_id: str, step: int, mode: str = "MERGE", **over: Any) -> "Cohort":
        return self._emit(job, "CheckpointConsumed",
                          {"source_checkpoint_id": ckpt_id, "step": step, "mode": mode}, **over)

    def diverge(self, job: str, onset: int, **over: Any) -> "Cohort":
        return self._emit(job, "DivergenceReported",
                          {"onset_step": onset, "detector": "job", "reason": "test"}, **over)

    def rollback(self, job: str, restored: str | None = None, resumed_step: int = 0,
                 command_id: str | None = None, *, from_scratch: bool | None = None,
                 **over: Any) -> "Cohort":
        """``RolledBack``; ``from_scratch`` (SPEC revision 2) is left out of the event unless given."""
        if "incarnation" not in over:
            self._inc[job] = self._inc.get(job, 0) + 1
        fields: dict[str, Any] = {"restored_checkpoint_id": restored, "resumed_step": resumed_step,
                                  "command_id": command_id}
        if from_scratch is not None:
            fields["from_scratch"] = from_scratch
        return self._emit(job, "RolledBack", fields, **over)

    def scratch(self, job: str, command_id: str | None = None, **over: Any) -> "Cohort":
        """A restart from the pretrained model: ``RolledBack`` with ``from_scratch`` true."""
        return self.rollback(job, None, 0, command_id, from_scratch=True, **over)

    def finish(self, job: str, status: str = "SUCCEEDED", final: str | None = None,
               **over: Any) -> "Cohort":
        return self._emit(job, "JobFinished", {"status": status, "final_checkpoint_id": final}, **over)


# ---------------------------------------------------------------------- event-list helpers

def by_jobs(events: list[Event], order: list[str]) -> list[Event]:
    """The same events, all of ``order[0]``'s first, then ``order[1]``'s, ... (each job's own
    order kept); jobs not named keep their relative order at the end."""
    rank = {j: i for i, j in enumerate(order)}
    return sorted(events, key=lambda e: rank.get(e.job_id, len(order)))  # stable


def with_chain(events: list[Event]) -> list[Event]:
    """Give every event a valid SPEC §9 hash chain (per job, in list order)."""
    head: dict[str, str] = {}
    out = []
    for ev in events:
        prev = head.get(ev.job_id, GENESIS)
        ev = dataclasses.replace(ev, prev_hash=prev, hash=None)
        ev = dataclasses.replace(ev, hash=chain_hash(prev, ev))
        head[ev.job_id] = ev.hash
        out.append(ev)
    return out


# ---------------------------------------------------------------------- running the core

def analyze(events: list[Event], config: Config | None = None, **cfg: Any) -> dict[str, Any]:
    """The SPEC §11 final state, asserting batch, incremental and from-scratch agree."""
    config = config or Config(**cfg)
    lin = Lineage(config)
    lin.apply_many(events)
    lin.finish_input()
    out = lin.final_state()
    inc = Lineage(config)
    for ev in events:
        inc.apply(ev)
    inc.finish_input()
    ref = final_state(fold_all(events, config))
    assert out == ref, "Lineage (batch) and fold_all+final_state disagree"
    assert inc.final_state() == ref, "Lineage (one event at a time) and fold_all+final_state disagree"
    return out


def decisions(events: list[Event], config: Config | None = None) -> list[list[Any]]:
    """Decisions of ``Lineage.apply`` for each event, one list per event."""
    lin = Lineage(config or Config())
    return [lin.apply(ev) for ev in events]


# ---------------------------------------------------------------------- reading the output

def roots(out: dict[str, Any]) -> list[tuple[str, int, int, str]]:
    """(job, incarnation, onset, verdict) of every incident, sorted."""
    return sorted((i["root"]["job_id"], i["root"]["incarnation"], i["root"]["onset_step"], i["verdict"])
                  for i in out["incidents"])


def incident(out: dict[str, Any], incident_id: str) -> dict[str, Any]:
    for i in out["incidents"]:
        if i["incident_id"] == incident_id:
            return i
    raise AssertionError(f"no incident {incident_id}; have {[i['incident_id'] for i in out['incidents']]}")


def contaminated(out: dict[str, Any], incident_id: str) -> list[tuple[str, int, str | None]]:
    return sorted((c["job_id"], c["incarnation"], c["via_checkpoint_id"])
                  for c in incident(out, incident_id)["contaminated"])


def secondaries(out: dict[str, Any], incident_id: str) -> list[tuple[str, int, int]]:
    return sorted((s["job_id"], s["incarnation"], s["onset_step"])
                  for s in incident(out, incident_id)["secondary_divergences"])


def plans(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["job_id"]: p for p in out["plans"]}


def plan_tuple(p: dict[str, Any]) -> tuple:
    return (p["action"], p["incarnation"], p["target_checkpoint_id"], p["target_step"],
            tuple(p["incident_ids"]))


def halts(out: dict[str, Any]) -> list[tuple[str, str]]:
    return [(h["job_id"], h["reason"]) for h in out["halts"]]


def sharing(out: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["job_id"], a["checkpoint_id"]) for a in out["alerts"] if a["kind"] == "UNRECORDED_SHARING"]


def seed(c: Cohort | None = None) -> Cohort:
    """SPEC §12's job A: A-480 clean, loss NaN at step 500, A-500 and A-520 tainted (T1).

    A: seq 0 start, 1 progress 480, 2 ckpt A-480, 3 progress 500 NaN, 4 ckpt A-500, 5 ckpt A-520.
    """
    c = c or Cohort()
    return (c.start("A").progress("A", 480).ckpt("A", "A-480", 480)
            .progress("A", 500, loss=float("nan")).ckpt("A", "A-500", 500).ckpt("A", "A-520", 520))


IA = iid("A", 0, 500)  # the incident of seed()
