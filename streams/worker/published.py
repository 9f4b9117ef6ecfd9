"""What is already on ``lineage.control``: a worker taking a partition over reads it to its end
so it never publishes a command twice, nor one a later record superseded (the fold is
:mod:`streams.control.fold`)."""

from __future__ import annotations

from streams.codec import Codec, DecodeError
from streams.control.fold import ControlState
from streams.kafka import reader
from streams.kafka.settings import KafkaSettings
from streams.worker.settings import WorkerSettings

#: seconds to wait for the broker (metadata, end offsets, any stretch of the read without progress)
TIMEOUT = 30.0


def read_published_commands(settings: WorkerSettings, codec: Codec) -> tuple[set[str], dict[str, tuple[str, str]]]:
    """Every command_id already on ``lineage.control`` (read to its end) or superseded by one
    there, and the last plan record of each job (job_id -> (record name, command_id)).
    A control topic that does not exist yet holds nothing."""
    kafka = KafkaSettings.of(settings.kafka or settings.bootstrap)
    state = ControlState()
    try:
        for msg in reader.read_to_end(kafka, settings.topics.control, TIMEOUT, connect_timeout=TIMEOUT):
            try:
                name, rec = codec.decode_record(msg.value)
            except DecodeError as exc:
                state.add_undecodable(exc.reason)
                continue
            state.add(name, rec)
    except reader.TopicNotFound:
        pass
    return state.command_ids, state.last_plans
