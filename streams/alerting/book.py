"""Which of the referee's alerts are active, and when each one ended: pure, folded from the three
topics the forwarder follows (records in any interleaving of the topics; each topic in order).

- an incident's page (``INCIDENT_OPENED`` / ``INCIDENT_WIDENED``, one per incident) ends when its
  latest ``DivergenceManifest`` names no plan still in force: every plan it made was superseded on
  ``lineage.control`` (the job rolled back past the contamination: ``PlanCleared``) — or the
  manifest closed (reattributed, superseded) with no plan;
- a ``HALT`` ends when the job's last ``HaltCommand`` is a release;
- a ``COMMAND_UNACKNOWLEDGED`` ends when that command is no longer the job's plan in force;
- every other kind is a one-off, ending ``info_ttl_ms`` after it was raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from streams.alerting.mapping import INCIDENT_KINDS, labels_of, to_alertmanager
from streams.control.commands import HALT_RECORD, PLAN_RECORDS, RELEASE_REASON

#: how long a one-off alert stays active in Alertmanager (ms)
INFO_TTL_MS = 3_600_000


@dataclass
class _Entry:
    alert: dict[str, Any]          # the latest record of this alert
    starts: int                    # the earliest ts


@dataclass
class AlertBook:
    info_ttl_ms: int = INFO_TTL_MS
    alerts: dict[tuple[tuple[str, str], ...], _Entry] = field(default_factory=dict)
    #: job -> (record name, command id, issued_ts) of its last plan record; job -> its last halt record
    last_plan: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    last_halt: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: incident -> (version, [(job, command id)] of its plans)
    manifests: dict[str, tuple[int, list[tuple[str, str]]]] = field(default_factory=dict)

    @staticmethod
    def key(alert: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(labels_of(alert).items()))

    def add_alert(self, alert: Mapping[str, Any]) -> None:
        k = self.key(alert)
        ts = int(alert.get("ts") or 0)
        e = self.alerts.get(k)
        if e is None:
            self.alerts[k] = _Entry(dict(alert), ts)
        else:
            if ts >= int(e.alert.get("ts") or 0):
                e.alert = dict(alert)
            e.starts = min(e.starts, ts)

    def add_control(self, name: str, rec: Mapping[str, Any]) -> None:
        job = rec.get("job_id")
        if not isinstance(job, str):
            return
        if name in PLAN_RECORDS:
            self.last_plan[job] = (name, str(rec.get("command_id")), int(rec.get("issued_ts") or 0))
        elif name == HALT_RECORD:
            self.last_halt[job] = dict(rec)

    def add_manifest(self, rec: Mapping[str, Any]) -> None:
        x = rec.get("incident_id")
        if not isinstance(x, str):
            return
        version = int(rec.get("version") or 0)
        if x in self.manifests and self.manifests[x][0] > version:
            return
        plans = [(str(p.get("job_id")), str(p.get("command_id"))) for p in rec.get("plans") or ()]
        self.manifests[x] = (version, plans)

    # ------------------------------------------------------------------ state

    def _plan_ended(self, job: str, command_id: str) -> int | None:
        """When the plan ``command_id`` of ``job`` stopped being in force (None: it is)."""
        last = self.last_plan.get(job)
        if last is None or last[1] == command_id:
            return None
        return last[2]

    def ended(self, alert: Mapping[str, Any], starts: int) -> int | None:
        """When the alert ended (ms), None while it is active."""
        kind = alert.get("kind")
        if kind in INCIDENT_KINDS:
            m = self.manifests.get(str(alert.get("incident_id")))
            if m is None:
                return None
            ends = [self._plan_ended(job, cid) for job, cid in m[1]]
            if any(e is None for e in ends):
                return None
            return max([starts, *[e for e in ends if e is not None]])
        if kind == "HALT":
            h = self.last_halt.get(str(alert.get("job_id")))
            if h is not None and h.get("reason") == RELEASE_REASON:
                return max(starts, int(h.get("issued_ts") or starts))
            return None
        if kind == "COMMAND_UNACKNOWLEDGED":
            cid = str((alert.get("details") or {}).get("command_id") or "")
            return self._plan_ended(str(alert.get("job_id")), cid)
        return starts + self.info_ttl_ms

    def postable(self, page_url: str | None = None) -> list[tuple[tuple[tuple[str, str], ...], dict[str, Any],
                                                                 int | None]]:
        """Every alert as Alertmanager takes it, with its key and its end (ms; None: active)."""
        out = []
        for k, e in self.alerts.items():
            ends = self.ended(e.alert, e.starts)
            out.append((k, to_alertmanager({**e.alert, "ts": e.starts}, page_url=page_url, ends_ms=ends), ends))
        return out


__all__ = ["AlertBook", "INFO_TTL_MS"]
