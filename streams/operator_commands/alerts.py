"""``traintrace watch``: the ``Alert`` records of ``lineage.alerts``, to the end or following."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from streams.codec import Codec, DecodeError, SchemaRegistryUnavailable
from streams.kafka import reader
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.operator_commands.errors import OperatorError
from streams.records import Alert


def alerts(kafka: KafkaSettings | str, topics: TopicNames, codec: Codec | None = None, follow: bool = False,
           from_beginning: bool = False, *, idle_timeout: float | None = None,
           max_messages: int | None = None,
           on_skip: Callable[[reader.Message, str], None] | None = None) -> Iterator[Alert]:
    """The ``Alert`` records of ``topics.alerts``, typed.

    Without ``follow``: the whole topic read to its end. With ``follow``: new alerts as they
    arrive (from the beginning with ``from_beginning``) until interrupted, ``idle_timeout``
    seconds without a record, or ``max_messages`` alerts. Records that do not decode or are not
    alerts are skipped (``on_skip(message, reason)`` is told).
    """
    codec = codec or Codec()
    if max_messages is not None and max_messages <= 0:
        return
    if follow:
        messages: Iterable[reader.Message] = reader.follow(
            kafka, topics.alerts, from_beginning, idle_timeout=idle_timeout)
    else:
        messages = reader.read_to_end(kafka, topics.alerts)
    seen = 0
    for msg in messages:
        try:
            name, rec = codec.decode_record(msg.value)
        except DecodeError as exc:
            if on_skip is not None:
                on_skip(msg, exc.reason)
            continue
        except SchemaRegistryUnavailable as exc:
            raise OperatorError(f"cannot decode {msg.topic!r}: {exc}") from exc
        if name != "Alert":
            if on_skip is not None:
                on_skip(msg, f"a {name}, not an Alert")
            continue
        yield Alert.from_value(rec)
        seen += 1
        if max_messages is not None and seen >= max_messages:
            return
