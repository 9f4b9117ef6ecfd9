"""An Alert record of ``lineage.alerts`` as an Alertmanager alert (API v2 ``postableAlert``):
pure: a typed :class:`~streams.records.Alert` in, the JSON value Alertmanager takes out.

Labels identify an alert for Alertmanager (its fingerprint is over the label set) and route it:
``alertname`` (``Traintrace`` + the kind in CamelCase), ``kind``, ``severity`` (:data:`SEVERITY`),
``cohort``, ``job``, ``incident`` and ``checkpoint`` when the record names them, and
``alert_id`` for the one-off kinds (each occurrence its own alert). The incident pages
(``INCIDENT_OPENED``, ``INCIDENT_WIDENED``) share one label set per incident, so a widening
updates the page instead of raising a second one. Annotations: ``summary`` (the record's message),
``description``, ``action`` (the command that shows or ends it) and ``url`` (the live page).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from streams.records import Alert

#: severity of each kind of alert (a kind not listed: warning)
SEVERITY: dict[str, str] = {
    "INCIDENT_OPENED": "critical",
    "INCIDENT_WIDENED": "critical",
    "HALT": "critical",
    "CONTROL_FORGED": "critical",
    "DELETED_PINNED": "critical",
    "COMMAND_UNACKNOWLEDGED": "warning",
    "UNRECORDED_SHARING": "warning",
    "RESTORE_SUBSTITUTED": "warning",
    "REATTRIBUTED": "info",
}
#: the kinds that stay active until what they report is over (:mod:`streams.alerting.book`);
#: every other kind is a one-off: sent with an end (``info_ttl``) and never resolved otherwise
INCIDENT_KINDS = ("INCIDENT_OPENED", "INCIDENT_WIDENED")
STATEFUL_KINDS = (*INCIDENT_KINDS, "HALT", "COMMAND_UNACKNOWLEDGED")


def alertname(kind: str) -> str:
    """``INCIDENT_OPENED`` -> ``TraintraceIncidentOpened``."""
    return "Traintrace" + "".join(p.capitalize() for p in kind.split("_"))


def iso(ms: int) -> str:
    """RFC 3339 UTC with milliseconds (what Alertmanager's API takes)."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def labels_of(alert: Alert) -> dict[str, str]:
    kind = alert.kind or "UNKNOWN"
    out = {"alertname": alertname(kind), "kind": kind, "severity": SEVERITY.get(kind, "warning"),
           "source": "traintrace"}
    for label, v in (("cohort", alert.cohort_id), ("job", alert.job_id), ("incident", alert.incident_id),
                     ("checkpoint", alert.checkpoint_id)):
        if v:
            out[label] = str(v)
    if kind in INCIDENT_KINDS:  # one page per incident: the widening updates it
        out["alertname"] = alertname("INCIDENT")
        out["kind"] = "INCIDENT"
        out.pop("job", None)
    elif kind not in STATEFUL_KINDS:
        out["alert_id"] = alert.alert_id[:16]
    return out


def action_of(alert: Alert) -> str:
    kind = alert.kind
    job = alert.job_id or "JOB"
    if kind == "HALT":
        return (f"traintrace plans   # why {job} is halted; once the record is complete: "
                f"traintrace release {job} --operator YOU --signing-key operator.key")
    if kind in INCIDENT_KINDS or kind == "REATTRIBUTED":
        return "traintrace plans   # the rollbacks in force; traintrace report --incident " + (alert.incident_id or "ID")
    if kind == "COMMAND_UNACKNOWLEDGED":
        return f"check that {job} is running and polls its client; traintrace plans"
    if kind == "CONTROL_FORGED":
        return "a control record that does not verify: check who may write lineage.control (traintrace acl)"
    if kind == "DELETED_PINNED":
        return f"{job} deleted a checkpoint the referee keeps: check its rotation; traintrace retention --job {job}"
    return "traintrace watch"


def to_alertmanager(alert: Alert, *, page_url: str | None = None, ends_ms: int | None = None,
                    generator_url: str | None = None) -> dict[str, Any]:
    """The ``postableAlert`` of one Alert record; ``ends_ms`` set: resolved (or ending) then."""
    kind = alert.kind or "UNKNOWN"
    details = alert.details or {}
    description = alert.message or kind
    if details:
        description += " (" + ", ".join(f"{k}={v}" for k, v in sorted(details.items())) + ")"
    annotations = {"summary": alert.message or kind, "description": description,
                   "action": action_of(alert), "event": kind}
    if page_url:
        base = page_url.rstrip("/")
        annotations["url"] = base + (f"/#job={alert.job_id}" if alert.job_id else "/")
    out: dict[str, Any] = {"labels": labels_of(alert), "annotations": annotations,
                           "startsAt": iso(alert.ts)}
    if ends_ms is not None:
        out["endsAt"] = iso(ends_ms)
    if generator_url or page_url:
        out["generatorURL"] = generator_url or page_url
    return out


__all__ = ["INCIDENT_KINDS", "SEVERITY", "STATEFUL_KINDS", "action_of", "alertname", "iso", "labels_of",
           "to_alertmanager"]
