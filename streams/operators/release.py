"""``traintrace release``: an operator lifts a job's halt (``HaltCommand`` with reason
``RELEASE``), signed with the operator's key when one is given (a job client with a trusted
keyring obeys only a release signed by a key in its ``operator/`` keys)."""

from __future__ import annotations

import getpass
import os
import time
from typing import Any, Callable

from confluent_kafka import KafkaException

from streams.codec import Codec
from streams.core.ids import hash_parts
from streams.kafka import reader
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.operators.errors import OperatorError
from streams.operators.publish import _producer


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
    :class:`BrokerUnreachable` or :class:`OperatorError` (delivery failed).
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
    producer = _producer(kafka, timeout)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err.str() if hasattr(err, "str") else str(err))

    try:
        producer.produce(topic, key=job_id.encode("utf-8"), value=value, headers=headers,
                         on_delivery=on_delivery)
    except KafkaException as exc:
        raise OperatorError(f"cannot produce to {topic!r} on {bootstrap}: {exc}") from exc
    remaining = producer.flush(timeout + 5)
    if errors or remaining:
        raise OperatorError(f"the release of {job_id!r} was not delivered to {topic!r} on "
                            f"{bootstrap}: {errors[0] if errors else 'timed out'}")
    return {**record, "type": "HaltCommand"}
