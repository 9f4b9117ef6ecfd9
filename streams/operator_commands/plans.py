"""``traintrace plans``: the plans and halts in force, folded from ``lineage.control`` read to
its end (the fold itself is :mod:`streams.control`)."""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

from streams.codec import Codec, DecodeError, SchemaRegistryUnavailable
from streams.control.fold import ControlState, fold_control
from streams.kafka import reader
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.operator_commands.errors import OperatorError
from streams.signing import check_control, unverified_row


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
                 timeout: float = 30.0, trusted: Mapping[str, Any] | None = None) -> ControlState:
    """Read ``topics.control`` to its end and fold it (see :class:`ControlState`).

    With ``trusted`` (a keyring, :func:`streams.signing.load_trusted_keys`) every record is
    verified as a job client verifies it (:func:`streams.signing.check_control`) and one that
    does not verify is left out of the fold, kept in ``state.unverified``: a forged command is
    never shown as the plan in force. Without it ``state.signatures_checked`` is False."""
    codec = codec or Codec()
    messages = reader.read_to_end(kafka, topics.control, timeout)
    if trusted is None:
        return fold_control(_decoded(messages, codec))
    state = ControlState(signatures_checked=True)
    for msg in messages:
        try:
            name, record = codec.decode_record(msg.value)
        except DecodeError as exc:
            state.add_undecodable(exc.reason)
            continue
        except SchemaRegistryUnavailable as exc:
            raise OperatorError(f"cannot decode {msg.topic!r}: {exc}") from exc
        check = check_control(name, record, trusted)
        if not check.ok:
            state.add_unverified({**unverified_row(name, record, check), "partition": msg.partition,
                                  "offset": msg.offset})
            continue
        state.add(name, record)
    return state


def effective_plans(kafka: KafkaSettings | str, topics: TopicNames, codec: Codec | None = None,
                    timeout: float = 30.0) -> dict[str, list[dict[str, Any]]]:
    """The plans and halts in force: ``{"plans": [...], "halts": [...]}`` sorted by job_id.

    Use :func:`read_control` for the counts of records read and undecodable.
    """
    return read_control(kafka, topics, codec, timeout).to_dict()
