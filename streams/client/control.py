"""The job's side of ``lineage.control``: the commands, which one to apply, and the fetcher.

- :class:`ControlCommand`: one control record for the job (``RollbackCommand``,
  ``QuarantineNotice``, ``PlanCleared`` or ``HaltCommand``), flattened; ``outcome`` says what the
  client made of it.
- :func:`decide`: pure — given the job's state and a batch of its control records in topic order,
  which to act on. Plans: only the job's **effective** plan record (the last of its
  ``RollbackCommand`` / ``QuarantineNotice`` / ``PlanCleared`` records; every earlier one is
  superseded) is acted on; a ``RollbackCommand`` only for the job's current incarnation (an older
  one is stale: the job already rolled back), each ``command_id`` at most once. Halts: the last
  ``HaltCommand`` decides (reason ``RELEASE`` lifts the halt); a callback runs only when the
  halted state changes; a halt or release already applied (same ``command_id``) is ignored.
- :class:`ControlFetcher`: a background thread with a confluent-kafka consumer that *only
  fetches*: it assigns every partition of the control topic itself (no consumer group), starts at
  the positions kept in the journal (the beginning the first time), keeps the records keyed by
  the job's id and puts them on a queue. The first time it catches up (to the end offsets found
  when it starts) it hands over everything read so far as one batch, so a restarted or late job
  sees a command and the one superseding it together.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from streams.kafka.settings import client_logger
from streams.codec import Codec, DecodeError

log = logging.getLogger("traintrace.client")

PLAN_KINDS = ("RollbackCommand", "QuarantineNotice", "PlanCleared")
CONTROL_KINDS = (*PLAN_KINDS, "HaltCommand")

# outcomes of decide()
ROLLBACK = "rollback"          # apply: on_rollback, then RolledBack
QUARANTINE = "quarantine"      # apply: on_quarantine
HALT = "halt"                  # apply: on_halt, halted
RELEASE = "release"            # apply: on_release, not halted
SUPERSEDED = "superseded"      # a later plan record of the job replaces it
STALE = "stale"                # for an older incarnation: the job already moved on
FUTURE = "future"              # for an incarnation the job has not reached (journal lost?)
DUPLICATE = "duplicate"        # this command_id was already applied
FINISHED = "finished"          # a rollback for a job that has finished: nothing to roll back
CLEARED = "cleared"            # PlanCleared: recorded, nothing to do
NO_CHANGE = "no-change"        # a halt while halted / a release while running / folded away
ACTIONS = (ROLLBACK, QUARANTINE, HALT, RELEASE)


@dataclass(frozen=True)
class ControlCommand:
    """One record of ``lineage.control`` for this job.

    ``kind``: the record name. ``action``: ``ROLLBACK`` / ``RESTART_FROM_BASE`` /
    ``RESTART_FROM_SCRATCH`` (RollbackCommand), ``QUARANTINE``, ``CLEAR`` (PlanCleared), or the
    halt reason (``UNREGISTERED``, ..., ``RELEASE``) of a HaltCommand. ``record`` is the decoded
    record as it was on the topic; ``outcome`` what :meth:`JobClient.poll` did with it.
    """

    kind: str
    command_id: str
    job_id: str
    action: str
    incarnation: int | None = None
    target_checkpoint_id: str | None = None
    target_step: int | None = None
    incident_ids: tuple[str, ...] = ()
    quarantined_checkpoint_ids: tuple[str, ...] = ()
    supersedes: str | None = None
    reason: str | None = None
    detail: str | None = None
    issued_ts: int | None = None
    partition: int | None = None
    offset: int | None = None
    record: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    outcome: str | None = None

    @property
    def is_plan(self) -> bool:
        return self.kind in PLAN_KINDS

    @property
    def is_release(self) -> bool:
        return self.kind == "HaltCommand" and self.action == "RELEASE"


def command_from_record(name: str, rec: Mapping[str, Any], partition: int | None = None,
                        offset: int | None = None) -> ControlCommand | None:
    """The :class:`ControlCommand` of a decoded control record, None for other records."""
    if name not in CONTROL_KINDS:
        return None
    common = dict(kind=name, command_id=rec["command_id"], job_id=rec["job_id"],
                  issued_ts=rec.get("issued_ts"), partition=partition, offset=offset, record=dict(rec))
    if name == "RollbackCommand":
        return ControlCommand(action=rec["action"], incarnation=rec["incarnation"],
                              target_checkpoint_id=rec.get("target_checkpoint_id"),
                              target_step=rec.get("target_step"),
                              incident_ids=tuple(rec.get("incident_ids") or ()),
                              supersedes=rec.get("supersedes"), **common)
    if name == "QuarantineNotice":
        return ControlCommand(action="QUARANTINE", incarnation=rec["incarnation"],
                              incident_ids=tuple(rec.get("incident_ids") or ()),
                              quarantined_checkpoint_ids=tuple(rec.get("quarantined_checkpoint_ids") or ()),
                              supersedes=rec.get("supersedes"), **common)
    if name == "PlanCleared":
        return ControlCommand(action="CLEAR", incarnation=rec["incarnation"], supersedes=rec.get("supersedes"),
                              reason=rec.get("reason"), **common)
    return ControlCommand(action=rec["reason"], reason=rec["reason"], detail=rec.get("detail"), **common)


@dataclass(frozen=True)
class Restored:
    """What a job restored, when ``on_rollback`` says so itself (it may return one of these).

    ``checkpoint_id``: the checkpoint loaded, None for the base; ``step``: the step training
    resumes at; ``from_scratch``: the job restarted from its pretrained ``base_model`` alone,
    loading no checkpoint, not even its base checkpoint (SPEC §4, revision 2; then
    ``checkpoint_id`` must be None). The client sends it as the ``RolledBack`` event.
    """

    checkpoint_id: str | None
    step: int
    from_scratch: bool = False

    @classmethod
    def of(cls, cmd: "ControlCommand") -> "Restored":
        """What obeying ``cmd`` restores: ``RESTART_FROM_SCRATCH`` is a restart from the
        pretrained model (``from_scratch``), anything else restores ``target_checkpoint_id``
        (None: the base) at ``target_step``."""
        if cmd.action == "RESTART_FROM_SCRATCH":
            return cls(None, cmd.target_step or 0, True)
        return cls(cmd.target_checkpoint_id, cmd.target_step or 0, False)


@dataclass
class JobView:
    """What :func:`decide` needs to know about the job."""

    incarnation: int
    applied: set[str]
    halted: bool
    finished: bool = False


def decide(view: JobView, batch: Iterable[ControlCommand]) -> list[ControlCommand]:
    """Each command of ``batch`` (the job's records in topic order) with its ``outcome``.

    Pure. The commands whose outcome is in :data:`ACTIONS` are to be applied, in the order
    returned (topic order). See the module doc for the rules.
    """
    cmds = list(batch)
    out: list[ControlCommand] = [c for c in cmds]
    plan_idx = [i for i, c in enumerate(cmds) if c.is_plan]
    effective = plan_idx[-1] if plan_idx else None
    for i in plan_idx:
        c = cmds[i]
        if c.command_id in view.applied:
            outcome = DUPLICATE
        elif i != effective:
            outcome = SUPERSEDED
        elif c.kind == "PlanCleared":
            outcome = CLEARED
        elif c.kind == "QuarantineNotice":
            outcome = QUARANTINE
        elif c.incarnation is not None and c.incarnation < view.incarnation:
            outcome = STALE
        elif c.incarnation is not None and c.incarnation > view.incarnation:
            outcome = FUTURE
        elif view.finished:
            outcome = FINISHED
        else:
            outcome = ROLLBACK
        out[i] = replace(c, outcome=outcome)

    halt_idx = [i for i, c in enumerate(cmds) if c.kind == "HaltCommand"]
    halted = view.halted
    last_change: int | None = None
    for i in halt_idx:
        c = cmds[i]
        if c.command_id in view.applied:
            out[i] = replace(c, outcome=DUPLICATE)
            continue
        out[i] = replace(c, outcome=NO_CHANGE)
        now = not c.is_release
        if now != halted:
            halted = now
            last_change = i
    if halted != view.halted and last_change is not None:
        c = out[last_change]
        out[last_change] = replace(c, outcome=HALT if halted else RELEASE)
    return out


@dataclass
class Fetched:
    """One item of the fetcher's queue: the job's commands (maybe none) and the positions
    (partition -> next offset) the fetcher had read up to when it queued them."""

    commands: list[ControlCommand]
    positions: dict[int, int]


class ControlFetcher(threading.Thread):
    """Fetches the job's control records into ``out`` (see the module doc)."""

    def __init__(self, bootstrap: str, topic: str, job_id: str, positions: Mapping[int, int],
                 out: "queue.Queue[Fetched]", codec: Codec, *, poll_interval: float = 0.2,
                 marker_interval: float = 1.0) -> None:
        super().__init__(name=f"traintrace-control-{job_id}", daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.key = job_id.encode("utf-8")
        self.positions: dict[int, int] = dict(positions)
        self.out = out
        self.codec = codec
        self.poll_interval = poll_interval
        self.marker_interval = marker_interval
        self.caught_up = threading.Event()
        self.records_seen = 0       # records of the job fetched
        self.undecodable = 0
        self.last_error: str | None = None
        self._stopping = threading.Event()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout)

    # -- the thread ------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            consumer = Consumer({
                "bootstrap.servers": self.bootstrap,
                # librdkafka wants a group id even for assign(); it is never joined nor committed to
                "group.id": f"traintrace-client-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "allow.auto.create.topics": False,
                "enable.partition.eof": True,
                "reconnect.backoff.max.ms": 2000,
                "logger": client_logger,
                "error_cb": self._on_error,
            })
        except Exception as exc:  # pragma: no cover - configuration errors
            self.last_error = f"cannot create the control consumer: {exc}"
            log.error("traintrace client: %s", self.last_error)
            return
        try:
            self._run(consumer)
        except Exception as exc:  # pragma: no cover - never expected; keep the reason
            self.last_error = f"control fetcher stopped: {exc!r}"
            log.exception("traintrace client: control fetcher failed")
        finally:
            consumer.close()

    def _on_error(self, err: KafkaError) -> None:
        self.last_error = err.str()

    def _partitions(self, consumer: Consumer) -> dict[int, int] | None:
        """partition -> high watermark, or None while the topic or the broker is not there."""
        try:
            md = consumer.list_topics(topic=self.topic, timeout=2.0)
            meta = md.topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return None
            highs = {}
            for p in sorted(meta.partitions):
                _lo, hi = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5.0)
                highs[p] = hi
            return highs
        except KafkaException as exc:
            self.last_error = str(exc)
            return None

    def _run(self, consumer: Consumer) -> None:
        highs = None
        while not self._stopping.is_set():
            highs = self._partitions(consumer)
            if highs is not None:
                break
            self._stopping.wait(1.0)
        if highs is None:
            return
        consumer.assign([TopicPartition(self.topic, p, self.positions.get(p, OFFSET_BEGINNING))
                         for p in sorted(highs)])
        behind = {p for p, hi in highs.items() if self.positions.get(p, 0) < hi}
        held: list[ControlCommand] | None = []
        if not behind:
            self._release_held(held)
            held = None
        moved = False
        last_marker = time.monotonic()
        while not self._stopping.is_set():
            msg = consumer.poll(self.poll_interval)
            if msg is not None:
                err = msg.error()
                p = msg.partition()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        behind.discard(p)
                    else:
                        self.last_error = err.str()
                else:
                    off = msg.offset()
                    self.positions[p] = off + 1
                    moved = True
                    if held is not None and off + 1 >= highs.get(p, 0):
                        behind.discard(p)
                    if msg.key() == self.key:
                        cmd = self._decode(msg.value(), p, off)
                        if cmd is not None:
                            self.records_seen += 1
                            if held is not None:
                                held.append(cmd)
                            else:
                                self.out.put(Fetched([cmd], dict(self.positions)))
                                moved = False
                                last_marker = time.monotonic()
            if held is not None and not behind:
                self._release_held(held)
                held = None
                moved = False
                last_marker = time.monotonic()
            elif held is None and moved and time.monotonic() - last_marker >= self.marker_interval:
                # other jobs' records moved the positions: let the journal keep up
                self.out.put(Fetched([], dict(self.positions)))
                moved = False
                last_marker = time.monotonic()

    def _release_held(self, held: list[ControlCommand]) -> None:
        self.out.put(Fetched(held, dict(self.positions)))
        self.caught_up.set()

    def _decode(self, value: bytes | None, partition: int, offset: int) -> ControlCommand | None:
        try:
            name, rec = self.codec.decode_record(value)
            cmd = command_from_record(name, rec, partition, offset)
        except (DecodeError, KeyError, TypeError) as exc:
            self.undecodable += 1
            log.warning("traintrace client: control record at %s[%d]@%d skipped: %s",
                        self.topic, partition, offset, exc)
            return None
        if cmd is None:
            log.debug("traintrace client: control record %s at %s[%d]@%d ignored", name, self.topic,
                      partition, offset)
        return cmd
