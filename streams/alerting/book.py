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

from dataclasses import dataclass, field, replace
from typing import Any

from streams.alerting.mapping import INCIDENT_KINDS, labels_of, to_alertmanager
from streams.control.commands import ControlCommand
from streams.records import Alert, DivergenceManifest

#: how long a one-off alert stays active in Alertmanager (ms)
INFO_TTL_MS = 3_600_000


@dataclass
class _Entry:
    alert: Alert                   # the latest record of this alert
    starts: int                    # the earliest ts


@dataclass
class AlertBook:
    """Folded from typed records: the forwarder decodes each one at the codec boundary
    (``Codec.decode_typed``, ``command_from_record``)."""

    info_ttl_ms: int = INFO_TTL_MS
    alerts: dict[tuple[tuple[str, str], ...], _Entry] = field(default_factory=dict)
    #: job -> (record name, command id, issued_ts) of its last plan record; job -> its last halt record
    last_plan: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    last_halt: dict[str, ControlCommand] = field(default_factory=dict)
    #: incident -> (version, [(job, command id)] of its plans)
    manifests: dict[str, tuple[int, list[tuple[str, str]]]] = field(default_factory=dict)

    @staticmethod
    def key(alert: Alert) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(labels_of(alert).items()))

    def add_alert(self, alert: Alert) -> None:
        k = self.key(alert)
        e = self.alerts.get(k)
        if e is None:
            self.alerts[k] = _Entry(alert, alert.ts)
        else:
            if alert.ts >= e.alert.ts:
                e.alert = alert
            e.starts = min(e.starts, alert.ts)

    def add_control(self, cmd: ControlCommand) -> None:
        if cmd.is_plan:
            self.last_plan[cmd.job_id] = (cmd.kind, cmd.command_id, cmd.issued_ts or 0)
        elif cmd.is_halt:
            self.last_halt[cmd.job_id] = cmd

    def add_manifest(self, m: DivergenceManifest) -> None:
        if m.incident_id in self.manifests and self.manifests[m.incident_id][0] > m.version:
            return
        plans = [(str(p.get("job_id")), str(p.get("command_id"))) for p in m.plans]
        self.manifests[m.incident_id] = (m.version, plans)

    # ------------------------------------------------------------------ state

    def _plan_ended(self, job: str, command_id: str) -> int | None:
        """When the plan ``command_id`` of ``job`` stopped being in force (None: it is)."""
        last = self.last_plan.get(job)
        if last is None or last[1] == command_id:
            return None
        return last[2]

    def ended(self, alert: Alert, starts: int) -> int | None:
        """When the alert ended (ms), None while it is active."""
        kind = alert.kind
        if kind in INCIDENT_KINDS:
            m = self.manifests.get(str(alert.incident_id))
            if m is None:
                return None
            ends = [self._plan_ended(job, cid) for job, cid in m[1]]
            if any(e is None for e in ends):
                return None
            return max([starts, *[e for e in ends if e is not None]])
        if kind == "HALT":
            h = self.last_halt.get(str(alert.job_id))
            if h is not None and h.is_release:
                return max(starts, h.issued_ts or starts)
            return None
        if kind == "COMMAND_UNACKNOWLEDGED":
            cid = str((alert.details or {}).get("command_id") or "")
            return self._plan_ended(str(alert.job_id), cid)
        return starts + self.info_ttl_ms

    def postable(self, page_url: str | None = None) -> list[tuple[tuple[tuple[str, str], ...], dict[str, Any],
                                                                 int | None]]:
        """Every alert as Alertmanager takes it, with its key and its end (ms; None: active)."""
        out = []
        for k, e in self.alerts.items():
            ends = self.ended(e.alert, e.starts)
            out.append((k, to_alertmanager(replace(e.alert, ts=e.starts), page_url=page_url, ends_ms=ends), ends))
        return out


__all__ = ["AlertBook", "INFO_TTL_MS"]
