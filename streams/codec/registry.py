"""Confluent Schema Registry binding: register our schemas, resolve schema ids.

Subjects follow the *record name strategy*: the subject of a schema is its full record name
(``traintrace.LineageEvent``), so one schema serves every topic that carries the record and an
encoder needs no topic. ``mock://...`` URLs give confluent-kafka's in-process mock registry (one
store per client; this module keeps one client per URL and configuration, so every codec of a
process configured with the same URL shares it).

``confluent_kafka.schema_registry`` is imported only when a registry is configured (it needs the
``schemaregistry`` extra of confluent-kafka).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Mapping

from .errors import SchemaRegistryUnavailable
from .schemas import SchemaInfo

REGISTRY_URL_ENV = "TRAINTRACE_SCHEMA_REGISTRY_URL"

_clients: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_clients_lock = threading.Lock()


def registry_url_from_env() -> str | None:
    url = os.environ.get(REGISTRY_URL_ENV, "").strip()
    return url or None


def registry_client(url: str, config: Mapping[str, Any] | None = None) -> Any:
    """A (shared, per process) ``SchemaRegistryClient`` for ``url`` (``mock://`` included)."""
    conf = {"url": url, **(dict(config) if config else {})}
    key = (url, tuple(sorted((str(k), repr(v)) for k, v in conf.items())))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as exc:  # pragma: no cover - depends on the installed extras
                raise ImportError(
                    "a Schema Registry needs confluent-kafka's schemaregistry extra "
                    "(pip install 'confluent-kafka[schemaregistry]')"
                ) from exc
            new_client = getattr(SchemaRegistryClient, "new_client", None)
            client = new_client(conf) if new_client is not None else SchemaRegistryClient(conf)
            _clients[key] = client
        return client


def _is_not_found(exc: BaseException) -> bool:
    status = getattr(exc, "http_status_code", None)
    code = getattr(exc, "error_code", None)
    return status == 404 or (isinstance(code, int) and 40400 <= code < 40500)


class RegistryBinding:
    """Schema ids of our schemas in one registry, cached both ways."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._ids: dict[bytes, int] = {}  # fingerprint -> id
        self._lock = threading.Lock()

    @staticmethod
    def subject_for(info: SchemaInfo) -> str:
        return info.fullname

    def schema_id(self, info: SchemaInfo) -> int:
        """The id of ``info`` in the registry, registering it under its subject the first time."""
        sid = self._ids.get(info.fingerprint)
        if sid is not None:
            return sid
        from confluent_kafka.schema_registry import Schema

        with self._lock:
            sid = self._ids.get(info.fingerprint)
            if sid is None:
                try:
                    sid = self.client.register_schema(self.subject_for(info), Schema(info.schema_str, "AVRO"))
                except Exception as exc:
                    raise SchemaRegistryUnavailable(
                        f"cannot register {info.fullname} v{info.version}: {exc}"
                    ) from exc
                self._ids[info.fingerprint] = int(sid)
        return int(sid)

    def fetch(self, schema_id: int) -> str | None:
        """The schema text of ``schema_id``, or ``None`` when the registry does not know it."""
        try:
            schema = self.client.get_schema(schema_id)
        except Exception as exc:
            if _is_not_found(exc):
                return None
            raise SchemaRegistryUnavailable(f"cannot look up schema id {schema_id}: {exc}") from exc
        if getattr(schema, "schema_type", "AVRO") not in (None, "AVRO"):
            return None
        return schema.schema_str


__all__ = ["REGISTRY_URL_ENV", "RegistryBinding", "registry_client", "registry_url_from_env"]
