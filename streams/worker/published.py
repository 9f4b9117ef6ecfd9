"""What is already on ``lineage.control``: a worker taking a partition over reads it to its end
so it never publishes a command twice, nor one a later record superseded (the fold is
:mod:`streams.control.fold`)."""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from streams.codec import Codec, DecodeError
from streams.control.commands import ControlCommand
from streams.control.fold import ControlState
from streams.kafka import reader
from streams.kafka.settings import KafkaSettings
from streams.signing import check_control
from streams.worker import metrics
from streams.worker.settings import TAKEOVER_PATIENCE_S, WorkerSettings

log = logging.getLogger("traintrace.worker")

#: seconds to wait for the broker (metadata, end offsets, any stretch of the read without progress)
TIMEOUT = TAKEOVER_PATIENCE_S


def own_keyring(settings: WorkerSettings) -> dict[str, Any] | None:
    """The processor's own public key ({key_id: key}) when the worker signs, else None."""
    if settings.signing_key is None:
        return None
    from streams.signing import CommitmentSigner

    signer = CommitmentSigner.from_file(settings.signing_key)
    return {signer.key_id: signer.public_key}


class OnControl(NamedTuple):
    """What ``lineage.control`` holds, for a worker taking a partition over."""

    #: every command id on the topic, or superseded by one there
    command_ids: set[str]
    #: job_id -> (record name, command_id) of the job's last plan record
    last_plans: dict[str, tuple[str, str]]
    #: job_id -> the job's last plan record
    in_force: dict[str, ControlCommand]


def read_published_commands(settings: WorkerSettings, codec: Codec) -> OnControl:
    """Every command_id already on ``lineage.control`` (read to its end) or superseded by one
    there, and the last plan record of each job. A control topic that does not exist yet holds
    nothing.

    A worker that signs counts a record only when its signature verifies under the
    processor's own key: a forged record on the control topic (unsigned, another key) must
    not make a new owner skip a genuine command or take a forged plan for the one in force.
    Records it leaves out are counted and told in one line (an operator's signed release is
    among them: the processor never publishes those, so they change nothing it decides)."""
    kafka = KafkaSettings.of(settings.kafka or settings.bootstrap)
    state = ControlState()
    keyring = own_keyring(settings)
    unverified: dict[str, int] = {}
    try:
        for msg in reader.read_to_end(kafka, settings.topics.control, TIMEOUT, connect_timeout=TIMEOUT):
            try:
                name, rec = codec.decode_record(msg.value)
            except DecodeError as exc:
                state.add_undecodable(exc.reason)
                continue
            if keyring is not None:
                check = check_control(name, rec, keyring)
                if not check.ok:
                    unverified[check.reason] = unverified.get(check.reason, 0) + 1
                    continue
            state.add(name, rec)
    except reader.TopicNotFound:
        pass
    if unverified:
        metrics.CONTROL_UNVERIFIED.inc(sum(unverified.values()))
        log.warning("%s: %s record(s) not signed by this processor's key left out of what is published "
                    "(%s): forged, or an operator's release", settings.topics.control, sum(unverified.values()),
                    ", ".join(f"{k} {v}" for k, v in sorted(unverified.items())))
    return OnControl(state.command_ids, state.last_plans, state.in_force)
