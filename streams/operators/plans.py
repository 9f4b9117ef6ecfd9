"""``traintrace plans``: the plans and halts in force, folded from ``lineage.control`` read to
its end (the fold itself is :mod:`streams.control`)."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from streams.codec import Codec, DecodeError, SchemaRegistryUnavailable
from streams.control.fold import ControlState, fold_control
from streams.kafka import reader
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.operators.errors import OperatorError


def _decoded(messages: Iterable[reader.Message], codec: Codec
             ) -> Iterator[tuple[str, dict[str, Any]] | BaseException]:
    for msg in messages:
        try:
            yield codec.decode_record(msg.value)  # a tombstone (None) is DecodeError EMPTY
        except DecodeError as exc:
            yield exc
        except SchemaRegistryUnavailable as exc:
            raise OperatorError(f"cannot decode {msg.topic!r}: {exc}") from exc


def read_control(kafka: KafkaSettings | str, topics: TopicNames, codec: Codec | None = None,
                 timeout: float = 30.0) -> ControlState:
    """Read ``topics.control`` to its end and fold it (see :class:`ControlState`)."""
    codec = codec or Codec()
    return fold_control(_decoded(reader.read_to_end(kafka, topics.control, timeout), codec))


def effective_plans(kafka: KafkaSettings | str, topics: TopicNames, codec: Codec | None = None,
                    timeout: float = 30.0) -> dict[str, list[dict[str, Any]]]:
    """The plans and halts in force: ``{"plans": [...], "halts": [...]}`` sorted by job_id.

    Use :func:`read_control` for the counts of records read and undecodable.
    """
    return read_control(kafka, topics, codec, timeout).to_dict()
