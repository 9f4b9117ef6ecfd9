"""Sending the mapper's RunEvents through the official ``openlineage-python`` client.

One :class:`Emitter` wraps an ``OpenLineageClient`` with one of its transports, chosen by name:
``http`` (a Marquez or other backend URL, ``/api/v1/lineage``), ``kafka`` (a topic, the producer
configured from :class:`~streams.kafka.settings.KafkaSettings` like every Kafka client here),
``file`` (one JSON event per line, appended) or ``console`` (the client's logger). The client's
own configuration file and ``OPENLINEAGE_*`` variables are not read: the transport is what the
flags say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from streams.openlineage.errors import EmitError, TransportConfigError

TRANSPORTS = ("http", "kafka", "file", "console")


@dataclass(frozen=True)
class TransportSpec:
    """Which transport and where: ``url`` (http), ``topic`` and ``kafka_config`` (kafka: the
    librdkafka producer properties), ``path`` (file), ``api_key`` (http bearer token)."""

    kind: str
    url: str | None = None
    endpoint: str = "api/v1/lineage"
    topic: str | None = None
    kafka_config: Mapping[str, Any] | None = None
    path: str | None = None
    api_key: str | None = None
    timeout: float = 5.0


def build_transport(spec: TransportSpec) -> Any:
    """The openlineage-python transport of ``spec``; :class:`TransportConfigError` when a
    required setting is missing."""
    if spec.kind == "http":
        from openlineage.client.transport.http import HttpConfig, HttpTransport

        if not spec.url:
            raise TransportConfigError("the http transport needs a URL: pass --url (e.g. http://marquez:5000)")
        params: dict[str, Any] = {"url": spec.url, "endpoint": spec.endpoint, "timeout": spec.timeout,
                                  "retry": {"total": 2, "backoff_factor": 0.2}}
        if spec.api_key:
            params["auth"] = {"type": "api_key", "apiKey": spec.api_key}
        return HttpTransport(HttpConfig.from_dict(params))
    if spec.kind == "kafka":
        from openlineage.client.transport.kafka import KafkaConfig, KafkaTransport

        if not spec.topic or spec.kafka_config is None:
            raise TransportConfigError("the kafka transport needs a topic: pass --topic")
        config = {k: str(v) for k, v in spec.kafka_config.items() if not callable(v)}
        return KafkaTransport(KafkaConfig(config=config, topic=spec.topic, flush=False))
    if spec.kind == "file":
        from openlineage.client.transport.file import FileConfig, FileTransport

        if not spec.path:
            raise TransportConfigError("the file transport needs a path: pass --path FILE")
        return FileTransport(FileConfig(log_file_path=spec.path, append=True))
    if spec.kind == "console":
        from openlineage.client.transport.console import ConsoleConfig, ConsoleTransport

        return ConsoleTransport(ConsoleConfig())
    raise TransportConfigError(f"unknown transport {spec.kind!r}: use one of {', '.join(TRANSPORTS)}")


def to_run_event(event: Mapping[str, Any]) -> Any:
    """The client's ``RunEvent`` of a mapper dict (facets stay dicts: they serialize as they are)."""
    from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState

    def datasets(cls: Any, items: Any, extra: str) -> list[Any]:
        out = []
        for d in items or []:
            kwargs = {"namespace": d["namespace"], "name": d["name"], "facets": dict(d.get("facets") or {})}
            if d.get(extra):
                kwargs[extra] = dict(d[extra])
            out.append(cls(**kwargs))
        return out

    return RunEvent(
        eventType=RunState(event["eventType"]),
        eventTime=event["eventTime"],
        run=Run(runId=event["run"]["runId"], facets=dict(event["run"].get("facets") or {})),
        job=Job(namespace=event["job"]["namespace"], name=event["job"]["name"],
                facets=dict(event["job"].get("facets") or {})),
        inputs=datasets(InputDataset, event.get("inputs"), "inputFacets"),
        outputs=datasets(OutputDataset, event.get("outputs"), "outputFacets"),
        producer=event["producer"],
    )


class Emitter:
    """Emits mapper dicts through one transport; counts what it sent."""

    def __init__(self, spec: TransportSpec, transport: Any | None = None) -> None:
        from openlineage.client import OpenLineageClient

        self.spec = spec
        self.client = OpenLineageClient(transport=transport if transport is not None else build_transport(spec))
        self.sent = 0

    def emit(self, event: Mapping[str, Any]) -> None:
        """Send one event; :class:`EmitError` names the transport and the cause when it fails."""
        try:
            self.client.emit(to_run_event(event))
        except Exception as exc:  # the transports raise requests/kafka/OS errors of their own
            raise EmitError(f"OpenLineage {self.spec.kind} transport{self._where()} failed to send a "
                            f"{event.get('eventType')} event of job {event['job']['name']!r}: {exc} "
                            f"(check the backend is up and the URL/topic/path)") from exc
        self.sent += 1

    def close(self, timeout: float = 10.0) -> None:
        try:
            self.client.close(timeout)
        except Exception as exc:
            raise EmitError(f"OpenLineage {self.spec.kind} transport{self._where()} did not flush: {exc}") from exc

    def _where(self) -> str:
        where = self.spec.url or self.spec.topic or self.spec.path
        return f" ({where})" if where else ""


__all__ = ["Emitter", "TRANSPORTS", "TransportSpec", "build_transport", "to_run_event"]
