"""``traintrace release``: an operator lifts a job's halt (``HaltCommand`` with reason
``RELEASE``), signed with the operator's key when one is given (a job client with a trusted
keyring obeys only a release signed by a key in its ``operator/`` keys)."""

from __future__ import annotations

import getpass
import os
import time
from typing import Any, Callable

from confluent_kafka import KafkaError, KafkaException

from streams.codec import Codec
from streams.core.ids import hash_parts
from streams.kafka import reader
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.operator_commands.errors import OperatorError
from streams.operator_commands.publish import _not_delivered, _producer


def release_command_id(job_id: str, issued_ts: int) -> str:
    """SHA-256 over ("RELEASE", job_id, issued_ts), SPEC §10 encoding."""
    return hash_parts(("RELEASE", job_id, issued_ts))


def _operator_name() -> str:
    name = os.environ.get("USER")
    if name:
        return name
    try:
        return getpass.getuser()
    except Exception:  # no user name anywhere (containers)
        return "unknown"


def release_job(kafka: KafkaSettings | str, topics: TopicNames, job_id: str, operator: str | None = None,
                cohort_id: str | None = None, *, codec: Codec | None = None,
                issued_ts: int | None = None, timeout: float = 30.0,
                signer: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Release a halted job: produce a ``HaltCommand`` with reason ``RELEASE`` to
    ``topics.control`` keyed by ``job_id``, and return the record.

    ``detail`` names the operator (``$USER`` by default). ``signer`` (e.g.
    :class:`streams.signing.ControlSigner` of the operator's key) signs the record. Raises :class:`TopicNotFound`,
    :class:`BrokerUnreachable`, :class:`OperatorError` (delivery failed) or
    :class:`~streams.kafka.errors.KafkaSecurityError` (the cluster refused the write, in one line).
    """
    if not job_id:
        raise ValueError("job_id must not be empty")
    kafka = KafkaSettings.of(kafka)
    bootstrap = kafka.bootstrap
    codec = codec or Codec()
    topic = topics.control
    reader.topic_partitions(kafka, topic)
    ts = int(time.time() * 1000) if issued_ts is None else int(issued_ts)
    record = {
        "command_id": release_command_id(job_id, ts),
        "job_id": job_id,
        "cohort_id": cohort_id,
        "reason": "RELEASE",
        "detail": f"released by operator {operator or _operator_name()}",
        "seq": None,
        "issued_ts": ts,
    }
    if signer is not None:
        record = signer("HaltCommand", record)
    value = codec.encode_record("HaltCommand", record)
    headers = codec.headers.record("HaltCommand")
    producer, watch = _producer(kafka, timeout)
    errors: list[KafkaError] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    what = f"the release of {job_id!r} was not delivered to {topic!r}"
    try:
        producer.produce(topic, key=job_id.encode("utf-8"), value=value, headers=headers,
                         on_delivery=on_delivery)
        deadline = time.monotonic() + timeout + 5
        remaining = producer.flush(1.0)
        while remaining and not errors and watch.failure is None and time.monotonic() < deadline:
            remaining = producer.flush(1.0)
    except Exception as exc:  # a fatal producer error (no IDEMPOTENT_WRITE), maybe as a SystemError
        raise _not_delivered(kafka, watch, exc, topic, what) from exc
    if errors or watch.failure is not None:
        raise _not_delivered(kafka, watch, errors[0] if errors else KafkaException(), topic, what)
    if remaining:
        raise OperatorError(f"{what} on {bootstrap}: timed out after {timeout + 5:g}s")
    return {**record, "type": "HaltCommand"}
