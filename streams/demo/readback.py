"""The run read back once the pipeline is quiescent: events (decoded, per partition in offset
order: each job's events in its order, as ``traintrace analyze`` wants them), control records,
manifests, alerts, the effective plans and the workers' ``/incidents`` view."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.demo.roles import DemoKafka
from streams.demo.workers import worker_views
from streams.kafka.settings import KafkaSettings


@dataclass
class ReadBack:
    """What the run's topics and workers hold at its end."""

    events: list[dict[str, Any]]
    undecodable: int
    control: list[tuple[str, dict[str, Any]]]
    alerts: list[dict[str, Any]]
    plans: dict[str, Any]
    incidents: list[dict[str, Any]]
    incidents_from: str


def _read_topic(kafka: KafkaSettings, topic: str) -> list[Any]:
    """Every record of ``topic``, per partition in offset order (partitions in order)."""
    from streams.kafka.reader import read_to_end

    msgs = list(read_to_end(kafka, topic))
    msgs.sort(key=lambda m: (m.partition, m.offset))
    return msgs


def _decode_events(kafka: KafkaSettings, topic: str, codec: Any) -> tuple[list[dict[str, Any]], int]:
    """The decoded events of ``topic`` and how many did not decode."""
    from streams.codec import DecodeError

    out, bad = [], 0
    for m in _read_topic(kafka, topic):
        try:
            ev = codec.decode_event(m.value)
        except DecodeError:
            bad += 1
            continue
        out.append(ev)
    return out, bad


def _decode_records(kafka: KafkaSettings, topic: str, codec: Any, name: str | None = None
                    ) -> list[tuple[str, dict[str, Any]]]:
    """The decoded ``(record name, record)`` of ``topic`` (only those named ``name`` if given)."""
    from streams.codec import DecodeError

    out = []
    for m in _read_topic(kafka, topic):
        try:
            out.append(codec.decode_record(m.value))
        except DecodeError:
            continue
    return [x for x in out if name is None or x[0] == name]


def _incidents(workers: list[Any], manifests: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The incidents of the workers' ``/incidents`` view (one per id), or of the manifests if
    no worker answered; each with its latest manifest's version and commitment root."""
    incidents = list({x["incident_id"]: x for x in reversed(
        worker_views(workers, "/incidents", "incidents"))}.values())  # one per id
    incidents_from = "worker /incidents"
    latest: dict[str, dict[str, Any]] = {}
    for m in manifests:
        if m["incident_id"] not in latest or m["version"] > latest[m["incident_id"]]["version"]:
            latest[m["incident_id"]] = m
    if not incidents and latest:
        incidents, incidents_from = [dict(m) for m in latest.values()], "lineage.manifests"
    incidents = sorted(incidents, key=lambda x: x["incident_id"])
    for x in incidents:
        m = latest.get(x["incident_id"])
        x["manifest_versions"] = m["version"] if m else 0
        x["commitment_root"] = m.get("commitment_root") if m else None
    return incidents, incidents_from


def read_back(kafka: DemoKafka | KafkaSettings | str, topics: Any, codec: Any, workers: list[Any]) -> ReadBack:
    """The run's topics (read as the auditor) and the plans in force (as the operator reads them
    with ``traintrace plans``), the workers' incidents (see the module doc)."""
    from streams.operator_commands.plans import effective_plans

    roles = DemoKafka.of(kafka)
    auditor = roles.auditor
    events, undecodable = _decode_events(auditor, topics.events, codec)
    control = _decode_records(auditor, topics.control, codec)
    manifests = [r for _n, r in _decode_records(auditor, topics.manifests, codec, "DivergenceManifest")]
    alerts = [r for _n, r in _decode_records(auditor, topics.alerts, codec, "Alert")]
    plans = effective_plans(roles.operator, topics, codec)
    incidents, incidents_from = _incidents(workers, manifests)
    return ReadBack(events, undecodable, control, alerts, plans, incidents, incidents_from)


def write_events(events: list[dict[str, Any]], path: Path) -> None:
    """The events as JSON Lines (NaN kept: ``traintrace analyze`` reads them)."""
    with open(path, "w", encoding="utf-8") as fh:
        for e in events:
            fh.write(json.dumps(e) + "\n")
