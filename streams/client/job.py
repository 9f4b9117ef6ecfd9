"""``JobClient``: what a training job links in to keep its record and obey the referee.

A job creates one client, calls :meth:`~JobClient.start` once, then reports as it trains::

    client = JobClient("A", "c1", "llama-3-8b", journal_dir=ckpt_dir,
                       worker_url="http://127.0.0.1:6066", on_rollback=restore)
    client.start()
    for step in ...:
        client.poll()                        # control: rollbacks, halts, quarantines (callbacks run here)
        client.wait_while_halted()           # a halted job waits for an operator's release
        ...train...
        client.progress(step, epoch, loss)
        if step % 100 == 0:
            client.checkpoint_written(f"A-{step}", path, step, epoch)
    client.finished("SUCCEEDED", final_checkpoint_id="A-1000")
    client.close()

What it guarantees:

- **The record.** Every event gets the job's next ``seq``, the current ``incarnation``, ``ts``
  (milliseconds, never decreasing) and the hash chain of SPEC §9 (``prev_hash`` = the previous
  event's ``hash``, ``GENESIS`` for ``JobStarted``; ``hash = chain_hash(prev_hash, event)``), built
  with the core's own event dataclasses and canonical encoding, so the processor verifies exactly
  what the client computed. Events are validated (``parse_event``) and Avro-encoded before
  anything is written; a bad argument raises :class:`ClientError` and emits nothing.
- **Restarts.** The journal (:mod:`streams.client.journal`) records each event before it is
  handed to Kafka. A process that dies at any point and is started again on the same
  ``journal_dir`` continues the chain (same seq, incarnation and head), sends again whatever the
  broker had not acknowledged, and does not apply a command twice; ``start()`` emits nothing for
  a job that already started.
- **Delivery** (:mod:`streams.client.delivery`): an idempotent producer, key ``job_id``; while
  Kafka is unreachable training goes on and events wait (``pending()`` says how many). At
  ``buffer_max`` pending events **every emitting call blocks** until Kafka takes some — up to
  ``buffer_timeout`` seconds (default: no limit), then raises :class:`ClientError`. Nothing is
  ever dropped: with no record there is no concurrent training (SPEC §8).
- **Control** (:mod:`streams.client.control` fetches, :func:`streams.control.obey` decides).
  A background thread only *fetches* the job's records of ``lineage.control``; **callbacks run
  in the thread that calls** :meth:`poll` (or :meth:`wait_while_halted`) — the training loop,
  between steps, where the model may safely be restored. The effective ``RollbackCommand``
  for the current incarnation calls ``on_rollback(cmd)`` (it must return only once the job's
  state is restored to ``cmd.target_checkpoint_id`` — ``None`` for ``RESTART_FROM_BASE`` to
  the base or ``RESTART_FROM_SCRATCH`` from ``base_model`` — at ``cmd.target_step``), then the
  client emits ``RolledBack``, which opens the next incarnation: for a ``RESTART_FROM_SCRATCH``
  with ``from_scratch`` true (SPEC §4: the job consumed nothing, not even its base checkpoint),
  else restoring the command's target. A callback that restored something else says so by returning
  a :class:`~streams.client.restored.Restored` (checkpoint, step, ``from_scratch``); any other
  return value (None) means it did what the command asked. Without ``on_rollback`` the command is
  returned with outcome ``"unhandled"`` and the job calls :meth:`rolled_back` itself. A
  ``HaltCommand`` calls ``on_halt`` and sets :attr:`halted`; :meth:`wait_while_halted` blocks
  until a release (``traintrace release JOB``), which calls ``on_release``. A
  ``QuarantineNotice`` calls ``on_quarantine`` (default: a warning and a ``QUARANTINED`` file in
  ``journal_dir`` naming the checkpoints). ``PlanCleared`` is recorded. Each ``command_id`` is
  applied at most once, across redeliveries and restarts.
- **Authenticated control** (``trusted_keys``, or ``$TRAINTRACE_TRUSTED_KEYS``): with a keyring
  (:func:`streams.signing.load_trusted_keys`: ``processor/`` and ``operator/`` public keys) a
  command is applied only if its signature verifies under a key whose role may sign that kind
  (processor keys: plans and halts; operator keys: releases). Any other — unsigned, unknown key,
  wrong role, bad signature — is dropped *before* the fold decides anything: logged as an error,
  counted (``stats()["commands_rejected"]``), kept in :attr:`rejected_commands` and passed to
  ``on_rejected(cmd, reason)``. (The job's principal writes only ``lineage.events``, so it
  raises no ``Alert`` record itself.) Without a keyring every command is obeyed, as in the local
  demo, and the client warns once, loudly, that control is unauthenticated — on a local
  PLAINTEXT broker only: connected with SASL or TLS (``security.protocol`` not PLAINTEXT), a
  client without a keyring refuses to start (:class:`ClientError`) unless told
  ``allow_unsigned_control=True`` (or ``$TRAINTRACE_ALLOW_UNSIGNED_CONTROL=1``).
- **Sealed events** (:mod:`streams.client.sealing`, SPEC revision 3): only the job can extend
  its record. The job has an Ed25519 key (``job_key``: a key, a PEM path, or
  ``$TRAINTRACE_JOB_KEY``; by default one generated on the first start and kept in
  ``journal_dir`` as ``traintrace-job-key.pem``, mode 0600, so a restarted process goes on with
  it; ``job_key=False``: an unsealed, legacy job). ``JobStarted`` declares its public key and is
  sealed; then every event but ``Progress`` is sealed (``signature`` over its ``hash``), and a
  ``Progress`` once ``seal_every`` (64) events went unsealed or ``seal_ms`` (1000 ms) passed since
  the oldest of them — one seal vouches for every earlier event, since each hash covers the one
  before, and the processor holds an unsealed event of a keyed job until a seal covers it. When
  the job goes quiet with unsealed events (nothing emitted for ``seal_ms``) a background timer
  sends a *seal record* — the head event again, the same content, signed — as do
  :meth:`flush`, :meth:`close` and a restart whose head was left unsealed. A job that declared a
  key must go on with it: a restart without it (the key file gone, another key, ``job_key=False``)
  raises :class:`ClientError`. The key is never logged; ``stats()`` counts ``events_sealed`` and
  ``seal_records``.
- **The load-time gate** (:meth:`consumed`): with ``worker_url``, the checkpoint's status is
  asked before loading; ``tainted`` or ``unknown`` (or no answer) raise :class:`GateRefused` with
  ``gate="refuse"`` (log only with ``"warn"``). An ``EVAL_ONLY`` read of a tainted checkpoint is
  allowed (SPEC §4: evaluation never taints). After ``load()``, the content actually loaded is
  hashed and compared with ``expected_hash`` (or the worker's ``content_hash``); a mismatch
  raises :class:`GateRefused` in both modes (recording it would be a false record). The
  ``base_checkpoint_id`` of :meth:`start` goes through the same status check.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

from streams.client.commands import CommandsMixin
from streams.client.retention import RetentionMixin
from streams.client.control import ControlFetcher, Fetched
from streams.client.delivery import Delivery
from streams.client.errors import ClientError, GateRefused
from streams.client.gate import checkpoint_status
from streams.client.hashing import LoadedContent, hash_path
from streams.client.journal import Journal, WalEntry
from streams.client.sealing import SEAL_EVERY, SEAL_MS, SealingMixin, SealSchedule, resolve_job_key
from streams.codec import Codec, EncodeError
from streams.control.commands import ControlCommand
from streams.core.chain import GENESIS, chain_hash
from streams.core.errors import InvalidEvent
from streams.core.events import CONSUMPTION_MODES, FINISH_STATUSES, Event, parse_event
from streams.core.seals import Sealer, public_key_hex
from streams.kafka.errors import KafkaAdapterError
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.signing import TRUSTED_KEYS_ENV, SigningError, TrustedKeys

log = logging.getLogger("traintrace.client")
_warned_unauthenticated = False
#: a job client on a secured cluster runs without a keyring only when told (``allow_unsigned_control``)
ALLOW_UNSIGNED_ENV = "TRAINTRACE_ALLOW_UNSIGNED_CONTROL"

GATE_MODES = ("refuse", "warn")

Callback = Callable[[ControlCommand], None]
RejectedCallback = Callable[[ControlCommand, str], None]


def _allow_unsigned(allow_unsigned_control: bool | None) -> bool:
    """``allow_unsigned_control`` given, else ``$TRAINTRACE_ALLOW_UNSIGNED_CONTROL`` (1, true, yes)."""
    if allow_unsigned_control is not None:
        return bool(allow_unsigned_control)
    return os.environ.get(ALLOW_UNSIGNED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _trusted_keys(trusted_keys: Any, follow_control: bool, kafka: KafkaSettings | None = None,
                  allow_unsigned_control: bool | None = None) -> TrustedKeys | None:
    """The keyring control is verified with: given, or ``$TRAINTRACE_TRUSTED_KEYS``; None (with
    a loud warning, once per process) when there is none. On a secured cluster (SASL or TLS)
    none is a :class:`ClientError` unless unsigned control is allowed: a job there is not a
    local demo, and would obey a forged command."""
    global _warned_unauthenticated
    if trusted_keys is None:
        trusted_keys = os.environ.get(TRUSTED_KEYS_ENV) or None
    if trusted_keys is None:
        secured = kafka is not None and kafka.protocol != "PLAINTEXT"
        if follow_control and secured and not _allow_unsigned(allow_unsigned_control):
            raise ClientError(
                f"no trusted keys on a {kafka.protocol} cluster: this job would obey any RollbackCommand/"
                f"HaltCommand anyone writes to the control topic; pass trusted_keys= (or set "
                f"{TRUSTED_KEYS_ENV}) to the keyring of the processor's and operators' public keys, or "
                f"allow_unsigned_control=True ({ALLOW_UNSIGNED_ENV}=1) to run unauthenticated anyway")
        if follow_control and not _warned_unauthenticated:
            _warned_unauthenticated = True
            log.warning("traintrace client: NO TRUSTED KEYS — control is UNAUTHENTICATED: this job obeys any "
                        "RollbackCommand/HaltCommand anyone writes to lineage.control (local demo only; set "
                        "trusted_keys= or %s)", TRUSTED_KEYS_ENV)
        return None
    try:
        return TrustedKeys.of(trusted_keys)
    except SigningError as exc:
        raise ClientError(f"{exc} (JobClient trusted_keys)") from exc


def _check_arguments(job_id: str, cohort_id: str, base_model: str, gate: str, buffer_max: int) -> None:
    for name, value in (("job_id", job_id), ("cohort_id", cohort_id), ("base_model", base_model)):
        if not isinstance(value, str) or not value or "\x00" in value:
            raise ClientError(f"{name} must be a non-empty string without NUL, got {value!r}")
    if gate not in GATE_MODES:
        raise ClientError(f"gate must be one of {GATE_MODES}, got {gate!r}")
    if buffer_max < 1:
        raise ClientError(f"buffer_max must be >= 1, got {buffer_max}")


def _kafka_settings(bootstrap: KafkaSettings | str | None) -> KafkaSettings:
    """The client's Kafka settings: given, or those of the environment with ``bootstrap`` (or
    ``$KAFKA_BOOTSTRAP_SERVERS``) as the servers."""
    if isinstance(bootstrap, KafkaSettings):
        return bootstrap
    try:
        return KafkaSettings.from_env(bootstrap=bootstrap or None)
    except KafkaAdapterError as exc:  # no servers anywhere, an unreadable TRAINTRACE_KAFKA_CONFIG
        raise ClientError(f"{exc} (JobClient: pass bootstrap=)") from exc


class JobClient(CommandsMixin, SealingMixin, RetentionMixin):
    """The training job's client (see the module doc).

    :param job_id, cohort_id, base_model: the job (SPEC §2, §4 ``JobStarted``).
    :param journal_dir: the job's local journal lives here (next to its checkpoints).
    :param bootstrap: Kafka bootstrap servers (default ``$KAFKA_BOOTSTRAP_SERVERS``), or the
        :class:`~streams.kafka.settings.KafkaSettings` of every client it makes.
    :param topics: topic names (default :meth:`TopicNames.from_env`).
    :param worker_url: a worker's HTTP address (``http://127.0.0.1:6066``) for the load-time
        gate; None turns the gate off.
    :param gate: ``"refuse"`` or ``"warn"``.
    :param on_rollback, on_halt, on_release, on_quarantine: control callbacks, run in the thread
        calling :meth:`poll` / :meth:`wait_while_halted`.
    :param buffer_max: events kept unacknowledged while Kafka is unreachable before emitting
        blocks; ``buffer_timeout``: how long it blocks before :class:`ClientError` (None: no limit).
    :param gate_timeout: seconds per HTTP request to the worker; ``gate_unknown_wait``: how long
        to keep asking while the worker says ``unknown`` (default 10 s: a checkpoint written a
        moment ago is not folded yet while the worker lags, and refusing it would refuse e.g. every
        PBT exploit of a fresh checkpoint on a loaded cluster; 0: ask once).
    :param fsync: the journal is fsynced before an event is handed to the producer (default; one
        fsync in a background thread for every event written meanwhile: group commit, see
        :mod:`streams.client.delivery`); turn off only for tests/benchmarks.
    :param producer_overrides: extra librdkafka producer settings.
    :param follow_control: start the control fetcher (default True).
    :param trusted_keys: the keyring control records must be signed by (a directory, a file, or
        a loaded :class:`~streams.signing.TrustedKeys`; default ``$TRAINTRACE_TRUSTED_KEYS``);
        ``on_rejected(cmd, reason)`` is called for each command refused for its signature.
        Connected with SASL or TLS, a client without one refuses to start (:class:`ClientError`)
        unless ``allow_unsigned_control=True`` (default ``$TRAINTRACE_ALLOW_UNSIGNED_CONTROL=1``).
    :param job_key: the job's sealing key (module doc, "Sealed events"): an
        ``Ed25519PrivateKey``, a path to a PEM private key, ``True`` (the key kept in
        ``journal_dir``, generated on the first start), ``False`` (no sealing), or None (default:
        the path in ``$TRAINTRACE_JOB_KEY``, else as ``True``). Since every client has a
        ``journal_dir``, every client seals unless ``job_key=False`` (or the job started unsealed).
    :param seal_every, seal_ms: the seal policy (:class:`~streams.client.sealing.SealSchedule`).
    """

    def __init__(
        self,
        job_id: str,
        cohort_id: str,
        base_model: str,
        *,
        journal_dir: str | os.PathLike[str],
        bootstrap: KafkaSettings | str | None = None,
        topics: TopicNames | None = None,
        worker_url: str | None = None,
        gate: str = "refuse",
        on_rollback: Callback | None = None,
        on_halt: Callback | None = None,
        on_release: Callback | None = None,
        on_quarantine: Callback | None = None,
        buffer_max: int = 100_000,
        buffer_timeout: float | None = None,
        gate_timeout: float = 2.0,
        gate_unknown_wait: float = 10.0,
        codec: Codec | None = None,
        fsync: bool = True,
        producer_overrides: Mapping[str, Any] | None = None,
        follow_control: bool = True,
        trusted_keys: Any = None,
        allow_unsigned_control: bool | None = None,
        on_rejected: RejectedCallback | None = None,
        job_key: Any = None,
        seal_every: int = SEAL_EVERY,
        seal_ms: float = SEAL_MS,
    ) -> None:
        _check_arguments(job_id, cohort_id, base_model, gate, buffer_max)
        self.kafka = _kafka_settings(bootstrap)
        self.trusted_keys = _trusted_keys(trusted_keys, follow_control, self.kafka, allow_unsigned_control)
        self.on_rejected = on_rejected
        self.job_id = job_id
        self.cohort_id = cohort_id
        self.base_model = base_model
        self.bootstrap = self.kafka.bootstrap
        self.topics = topics or TopicNames.from_env()
        self.worker_url = worker_url
        self.gate = gate
        self.on_rollback = on_rollback
        self.on_halt = on_halt
        self.on_release = on_release
        self.on_quarantine = on_quarantine
        self.buffer_max = buffer_max
        self.buffer_timeout = buffer_timeout
        self.gate_timeout = gate_timeout
        self.gate_unknown_wait = gate_unknown_wait
        self.codec = codec or Codec()
        self.journal_dir = Path(journal_dir)

        self._lock = threading.RLock()
        self._poll_lock = threading.RLock()  # one poll() at a time (its callbacks run inside it)
        self._closed = False
        self._inbox: list[Fetched] = []
        self._entries: dict[int, WalEntry] = {}   # unacknowledged events (for WAL compaction)
        self._queue: queue.Queue[Fetched] = queue.Queue()
        self._fetcher: ControlFetcher | None = None
        self.commands_applied = 0
        self.commands_seen = 0
        self.commands_rejected = 0
        #: the commands refused for their signature, with why (the last MAX_REJECTED_KEPT)
        self.rejected_commands: list[tuple[ControlCommand, str]] = []
        self._job_key_arg = job_key
        self._key: Any = None          # the job's Ed25519PrivateKey, or None (unsealed job)
        self._seals: Sealer | None = None  # seals with it (the key converted once)
        self._seal_policy = SealSchedule(seal_every, float(seal_ms))
        self._head_data: dict[str, Any] | None = None  # the head event's Avro dict (for a seal record)
        self._sealer: threading.Thread | None = None
        self._sealer_stop = threading.Event()
        self.events_sealed = 0
        self.seal_records = 0
        self._load_retention()
        self._open(fsync, producer_overrides, follow_control)

    def _open(self, fsync: bool, producer_overrides: Mapping[str, Any] | None, follow_control: bool) -> None:
        """Open the journal, the delivery (sending again what the last run left unacknowledged)
        and the control fetcher; whatever was opened is closed again if a step fails."""
        # group commit: the training thread writes the journal line, the delivery's sync thread
        # fsyncs (once for everything written meanwhile) before the producer sees the events
        self._journal = Journal(self.journal_dir, self.job_id, self.cohort_id, self.base_model, fsync=fsync,
                                group_commit=fsync)
        delivery: Delivery | None = None
        try:
            st = self._journal.state
            self._key = resolve_job_key(self._job_key_arg, self.journal_dir, st.public_key, st.started)
            self._seals = Sealer(self._key) if self._key is not None else None
            self._delivery = delivery = Delivery(self.kafka, self.topics.events, self.job_id,
                                                 buffer_max=self.buffer_max, overrides=producer_overrides,
                                                 sync=self._journal.sync if fsync else None)
            self._resend_unacked()
            self._seal_restarted_head()
            if self._key is not None:
                self._sealer = threading.Thread(target=self._seal_loop, name=f"traintrace-sealer-{self.job_id}",
                                                daemon=True)
                self._sealer.start()
            if follow_control:
                st = self._journal.state
                positions = st.control_positions if st.control_topic == self.topics.control else {}
                self._fetcher = ControlFetcher(self.kafka, self.topics.control, self.job_id, positions,
                                               self._queue, self.codec)
                self._fetcher.start()
        except BaseException:
            self._sealer_stop.set()
            if delivery is not None:
                delivery.close(0)
            self._journal.close()
            raise

    def _resend_unacked(self) -> None:
        """Hand the delivery every event the journal says the broker never acknowledged."""
        resend, self._journal.unacked = self._journal.unacked, []
        for e in resend:
            self._entries[e.seq] = e
            self._delivery.send(e.seq, e.value, self._event_headers(e.type))
        if resend:
            log.info("traintrace client %s: sending again %d event(s) not acknowledged before the "
                     "last exit (seq %d..%d)", self.job_id, len(resend), resend[0].seq, resend[-1].seq)

    # -- properties ------------------------------------------------------------------------------

    @property
    def incarnation(self) -> int:
        return self._journal.state.incarnation

    @property
    def seq(self) -> int:
        """The seq of the last event emitted (-1 before the first)."""
        return self._journal.state.next_seq - 1

    @property
    def next_seq(self) -> int:
        return self._journal.state.next_seq

    @property
    def head_hash(self) -> str | None:
        """The hash of the last event emitted (the chain head; None before the first)."""
        return self._journal.state.head_hash

    @property
    def public_key(self) -> str | None:
        """The public key (hex) the job's events are sealed with; None for an unsealed job."""
        return public_key_hex(self._key) if self._key is not None else None

    @property
    def halted(self) -> bool:
        return self._journal.state.halt is not None

    @property
    def halt(self) -> dict[str, Any] | None:
        """The halt in force (``command_id``, ``reason``, ``detail``, ``issued_ts``) or None."""
        h = self._journal.state.halt
        return dict(h) if h else None

    @property
    def started(self) -> bool:
        return self._journal.state.started

    @property
    def is_finished(self) -> bool:
        """The current incarnation emitted ``JobFinished``."""
        return self._journal.state.finished

    @property
    def applied_commands(self) -> list[str]:
        return list(self._journal.state.applied_commands)

    def pending(self) -> int:
        """Events not yet acknowledged by the broker."""
        return self._delivery.pending()

    def wait_control_ready(self, timeout: float | None = None) -> bool:
        """Wait until the control fetcher has caught up with ``lineage.control`` once."""
        return self._fetcher is not None and self._fetcher.caught_up.wait(timeout)

    def stats(self) -> dict[str, Any]:
        d, f = self._delivery, self._fetcher
        return {
            "job_id": self.job_id,
            "next_seq": self.next_seq,
            "incarnation": self.incarnation,
            "pending": d.pending(),
            "acked": d.acked,
            "delivery_failures": d.failures,
            "resends": d.resends,
            "kafka_down_since": d.down_since,
            "last_delivery_error": d.last_error,
            # the cluster's refusal of this client in one line ("... authentication failed ...",
            # a denied WRITE, a wrong security.protocol), until a delivery gets through
            "kafka_refused": str(d.refused) if d.refused is not None else None,
            "control_caught_up": bool(f and f.caught_up.is_set()),
            "control_records": f.records_seen if f else 0,
            "control_error": f.last_error if f else None,
            "commands_seen": self.commands_seen,
            "commands_applied": self.commands_applied,
            "commands_rejected": self.commands_rejected,
            "control_authenticated": self.trusted_keys is not None,
            "halted": self.halted,
            "sealed": self._key is not None,
            "events_sealed": self.events_sealed,
            "seal_records": self.seal_records,
        }

    # -- events ----------------------------------------------------------------------------------

    def start(self, base_checkpoint_id: str | None = None, config_hash: str | None = None) -> Event | None:
        """Emit ``JobStarted`` (seq 0, ``prev_hash`` GENESIS). A job whose journal says it already
        started emits nothing and returns None (a restarted process continues)."""
        with self._lock:
            if self._journal.state.started:
                log.info("traintrace client %s: already started (seq %d, incarnation %d): continuing",
                         self.job_id, self.seq, self.incarnation)
                return None
            if base_checkpoint_id is not None and self.worker_url:
                self._gate_check(base_checkpoint_id, "INIT")
            return self._emit("JobStarted", {"cohort_id": self.cohort_id, "base_model": self.base_model,
                                             "base_checkpoint_id": base_checkpoint_id,
                                             "config_hash": config_hash, "public_key": self.public_key})

    def progress(self, step: int, epoch: int, loss: float | None, grad_norm: float | None = None,
                 lr: float | None = None) -> Event:
        """Emit ``Progress``. ``loss``: the training loss (lower is better), or None when the job
        has none to report (an accuracy or a reward is not a loss: it must not feed the
        processor's spike rule); a NaN or infinite loss or grad norm is a divergence."""
        return self._emit("Progress", {"step": step, "epoch": epoch, "loss": loss,
                                       "grad_norm": grad_norm, "lr": lr})

    def checkpoint_written(self, checkpoint_id: str, path: str | os.PathLike[str], step: int, epoch: int,
                           uri: str | None = None, content_hash: str | None = None) -> str:
        """Hash the checkpoint at ``path`` (file or directory, streamed; see
        :mod:`streams.client.hashing`), emit ``CheckpointWritten`` and return the content hash.
        ``uri`` defaults to the path's ``file://`` URI; ``content_hash`` skips the hashing when
        the caller already has it."""
        p = Path(path)
        h = content_hash or hash_path(p)
        self._emit("CheckpointWritten", {"checkpoint_id": checkpoint_id, "step": step, "epoch": epoch,
                                         "content_hash": h, "uri": uri or p.resolve().as_uri()})
        return h

    def consumed(self, source_checkpoint_id: str, step: int, mode: str,
                 load: Callable[[], str | os.PathLike[str] | LoadedContent] | None = None,
                 expected_hash: str | None = None) -> str | None:
        """Record that the job read ``source_checkpoint_id`` at its ``step`` in ``mode``.

        Gate first (with ``worker_url``): see the module doc. Then ``load()`` (when given) is
        called and must return the path it actually loaded (that content is hashed) or a
        :class:`~streams.client.hashing.LoadedContent` (the loader hashed the bytes it loaded);
        the hash is compared with ``expected_hash`` or the worker's ``content_hash``. Returns the verified content
        hash (None when nothing was compared). Raises :class:`GateRefused` (nothing emitted).
        """
        if mode not in CONSUMPTION_MODES:
            raise ClientError(f"mode must be one of {', '.join(CONSUMPTION_MODES)}, got {mode!r}")
        info: dict[str, Any] = {}
        if self.worker_url:
            info = self._gate_check(source_checkpoint_id, mode)
        verified = None
        if load is not None:
            loaded = load()
            want = expected_hash or info.get("content_hash")
            if want:
                got = loaded.content_hash if isinstance(loaded, LoadedContent) else hash_path(loaded)
                loaded = loaded.path if isinstance(loaded, LoadedContent) else loaded
                if got != want:
                    raise GateRefused(
                        f"loaded content of {loaded} (sha256 {got}) does not match the recorded "
                        f"content_hash {want} of checkpoint {source_checkpoint_id!r}",
                        source_checkpoint_id, "mismatch",
                        {"loaded_path": str(loaded), "loaded_hash": got, "recorded_hash": want})
                verified = got
        self._emit("CheckpointConsumed", {"source_checkpoint_id": source_checkpoint_id, "step": step,
                                          "mode": mode})
        return verified

    def diverged(self, onset_step: int, detector: str, reason: str) -> Event:
        return self._emit("DivergenceReported", {"onset_step": onset_step, "detector": detector,
                                                 "reason": reason})

    def finished(self, status: str = "SUCCEEDED", final_checkpoint_id: str | None = None) -> Event:
        if status not in FINISH_STATUSES:
            raise ClientError(f"status must be one of {', '.join(FINISH_STATUSES)}, got {status!r}")
        return self._emit("JobFinished", {"status": status, "final_checkpoint_id": final_checkpoint_id})

    def rolled_back(self, restored_checkpoint_id: str | None, resumed_step: int,
                    command_id: str | None = None, *, from_scratch: bool = False) -> Event:
        """Emit ``RolledBack`` (opens the next incarnation). :meth:`poll` does this after
        ``on_rollback``; call it yourself for a command returned ``"unhandled"`` or a manual
        rollback (``command_id`` None). ``from_scratch``: the job restarted from its pretrained
        ``base_model`` alone, as a ``RESTART_FROM_SCRATCH`` asks (``restored_checkpoint_id``
        must then be None); a plain None restore goes back to the base, re-consuming the base
        checkpoint. A ``command_id`` already applied raises ClientError."""
        if not isinstance(from_scratch, bool):
            raise ClientError(f"from_scratch must be a bool, got {from_scratch!r}")
        with self._lock:
            if command_id is not None and command_id in self._journal.state.applied_commands:
                raise ClientError(f"command {command_id} was already applied")
            return self._emit("RolledBack", {"restored_checkpoint_id": restored_checkpoint_id,
                                             "resumed_step": resumed_step, "command_id": command_id,
                                             "from_scratch": from_scratch},
                              incarnation=self._journal.state.incarnation + 1)

    def _emit(self, etype: str, fields: dict[str, Any], incarnation: int | None = None) -> Event:
        with self._lock:
            if self._closed:
                raise ClientError("the client is closed")
            st = self._journal.state
            if etype != "JobStarted" and not st.started:
                raise ClientError(f"{etype} before start(): call start() first")
            if not self._delivery.wait_capacity(self.buffer_timeout):
                raise ClientError(
                    f"{self._delivery.pending()} events are not acknowledged by Kafka at "
                    f"{self.bootstrap} (buffer_max {self.buffer_max}) after {self.buffer_timeout}s; "
                    f"last error: {self._delivery.last_error}")
            seq = st.next_seq
            inc = st.incarnation if incarnation is None else incarnation
            ts = max(int(time.time() * 1000), st.last_ts)
            prev = GENESIS if etype == "JobStarted" else (st.head_hash or GENESIS)
            data = {"type": etype, "job_id": self.job_id, "seq": seq, "incarnation": inc, "ts": ts,
                    "prev_hash": prev, "hash": None, **fields}
            try:
                ev = parse_event(data)
            except InvalidEvent as exc:
                raise ClientError(f"{etype}: {exc}") from exc
            ev = replace(ev, hash=chain_hash(ev.prev_hash, ev))
            # the checked dict itself is encoded, with its hash: parse_event changed nothing in
            # it but ints given for doubles, which Avro writes the same
            data["hash"] = ev.hash
            now = time.monotonic() * 1000
            sealed = self._key is not None and self._seal_policy.wants_seal(etype, now)
            if sealed:
                data["signature"] = self._seals.seal(ev.hash)
                ev = replace(ev, signature=data["signature"])
            try:
                value = self.codec.encode_event(data)
            except EncodeError as exc:
                raise ClientError(f"{etype}: field {exc.field!r}: {exc.message}") from exc
            entry = WalEntry(seq, inc, ev.hash, ts, etype, value,
                             fields.get("command_id") if etype == "RolledBack" else None,
                             sealed=sealed, public_key=fields.get("public_key") if etype == "JobStarted" else None)
            self._journal.append(entry)        # durable (the delivery's sync) before the producer sees it
            self._entries[seq] = entry
            self._delivery.send(seq, value, self.codec.headers.event(etype))
            if self._key is not None:
                self._seal_policy.emitted(sealed, now)
                self._head_data = data
                self.events_sealed += sealed
            self._maybe_compact()
            return ev

    # -- seals: SealingMixin (streams.client.sealing) ----------------------------------------------

    def _event_headers(self, etype: str) -> list | None:
        """The Kafka headers of an event of type ``etype`` (None for a type this codec does not
        know: a journal entry of another version is sent again without them)."""
        try:
            return self.codec.headers.event(etype)
        except KeyError:
            return None

    def _maybe_compact(self) -> None:
        pending = self._delivery.pending()
        if len(self._entries) > 2 * self._journal.compact_at:
            unacked = self._delivery.unacked()
            self._entries = {s: e for s, e in self._entries.items() if s in unacked}
        if self._journal.needs_compaction(pending):
            unacked = self._delivery.unacked()
            self._entries = {s: e for s, e in self._entries.items() if s in unacked}
            self._journal.compact(self._delivery.acked_through(self._journal.state.next_seq),
                                  self._entries.values())

    # -- the gate --------------------------------------------------------------------------------

    def _gate_check(self, checkpoint_id: str, mode: str) -> dict[str, Any]:
        assert self.worker_url
        info = checkpoint_status(self.worker_url, checkpoint_id, self.gate_timeout)
        deadline = time.monotonic() + self.gate_unknown_wait
        while info["status"] == "unknown" and time.monotonic() < deadline:
            time.sleep(0.25)
            info = checkpoint_status(self.worker_url, checkpoint_id, self.gate_timeout)
        status = info["status"]
        if status == "clean":
            return info
        if status == "tainted" and mode == "EVAL_ONLY":
            log.info("traintrace client %s: %s is tainted; an EVAL_ONLY read is allowed", self.job_id,
                     checkpoint_id)
            return info
        if status == "tainted":
            why = f"checkpoint {checkpoint_id!r} is tainted (incidents {', '.join(info.get('incident_ids') or [])})"
        else:
            why = f"checkpoint {checkpoint_id!r} is unknown to the referee" + (
                f" ({info['error']})" if info.get("error") else "")
        if self.gate == "refuse":
            raise GateRefused(f"job {self.job_id!r} may not load it: {why}", checkpoint_id, status, info)
        log.warning("traintrace client %s: %s; gate=warn: loading it anyway", self.job_id, why)
        return info

    # -- control: CommandsMixin (streams.client.commands) -------------------------------------------

    # -- flushing and closing --------------------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> int:
        """Seal the head if events wait unsealed, then wait until every event (and seal record)
        is acknowledged (at most ``timeout`` s); the number of events pending."""
        with self._lock:
            self._seal_pending("flush")
        left = self._delivery.flush(timeout)
        with self._lock:
            if not self._closed:
                self._journal.state.acked_seq = self._delivery.acked_through(self._journal.state.next_seq)
                self._journal.save()
        return left

    def close(self, timeout: float = 30.0) -> int:
        """Flush (up to ``timeout`` s), stop the background threads, save the journal. Returns the
        number of events still unacknowledged: they stay in the journal and are sent again by
        the next client on the same ``journal_dir``."""
        with self._lock:
            if self._closed:
                return 0
            self._seal_pending("close")
        self._sealer_stop.set()
        if self._sealer is not None:
            self._sealer.join(5)
        if self._fetcher is not None:
            self._fetcher.stop()
        left = self._delivery.close(timeout)
        with self._lock:
            self._closed = True
            acked = self._delivery.acked_through(self._journal.state.next_seq)
            if left == 0:
                self._journal.compact(acked, ())
            else:
                self._journal.state.acked_seq = acked
                self._journal.save()
                log.warning("traintrace client %s: closed with %d event(s) not acknowledged; they are "
                            "in the journal and will be sent by the next client", self.job_id, left)
            self._journal.close()
        return left

    def __enter__(self) -> "JobClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
