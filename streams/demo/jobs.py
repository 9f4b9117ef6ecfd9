"""One training job of the demo cohort, as a function: :func:`run_job`.

The loop is the one of a real fine-tuning job, with the lineage client
(``streams.client.JobClient``, or any object with its methods) at the points a real trainer
would call it:

- ``start()``; then, every step: ``poll()`` (commands run their callbacks here, in this thread),
  ``wait_while_halted()``, one real forward/backward pass and SGD update on the job's own
  minibatch, ``progress()`` every ``progress_every`` steps, a checkpoint every
  ``checkpoint_every`` steps (``checkpoint_written()``, then published to the cohort registry),
  then the sharing actions the spec schedules at this step; at the end a last checkpoint and
  ``finished("SUCCEEDED", last_checkpoint_id)``.
- Sharing (``Share``): the peer's checkpoint is looked up in the cohort registry (waiting for it,
  while still polling, if the peer has not written it yet), read through
  ``consumed(..., load=...)`` and applied: ``PBT_EXPLOIT`` copies the weights, ``MERGE`` averages
  them with the job's own, ``REFERENCE`` adds a KL pull toward the peer's predictions to the loss
  from then on, ``EVAL_ONLY`` evaluates them on held-out data and changes nothing. A consumption the
  client's gate refuses (``GateRefused``) is skipped: the job trains on with its own weights.
  A sharing action is done once: a rollback restores weights, not the schedule.
- The job's own detector, checked on every step (not only the logged ones): ``nan-guard`` when
  the loss or the gradient norm is not finite (the update is then skipped: a NaN gradient cannot
  be applied), ``spike-guard`` when the loss is above ``spike_factor`` × the median of the
  incarnation's previous ``window`` losses (SPEC §5's rule, defaults 3 and 10; checked at the end
  of the step, after its progress, checkpoint and sharing, as a training callback would). The
  job logs the step that tripped it (``progress``), reports ``diverged(step, detector, reason)``
  once per incarnation, and stops stepping: it polls for a command for up to ``nan_wait_s``
  seconds and, without one, finishes ``FAILED``. (Waiting rather than training on keeps a job
  that copied exploded weights from finishing before its rollback arrives.)
- Commands: ``ROLLBACK`` restores the target checkpoint's exact weights (and the reference model
  that was in force when it was written), sets the step to ``target_step`` and trains on with the
  job's normal learning rate (a scheduled learning-rate blow-up belongs to incarnation 0 only);
  ``RESTART_FROM_BASE`` restores the base (the target checkpoint when the command names one, else
  the cohort's base model), ``RESTART_FROM_SCRATCH`` the base model, both at step 0 unless the
  command gives a step. Every applied command opens a new incarnation, and checkpoint ids of
  incarnation *i* > 0 are ``f"{job_id}-{step}-i{i}"`` so they stay unique.

Peers find each other's checkpoints through the cohort registry (:class:`CohortRegistry`): one
JSON file per job under ``cohort_dir/registry/``, written only by its job, atomically (temporary
file + rename), listing every checkpoint the job wrote (id, path, step, incarnation, loss, content
hash) and its latest. Readers never see a half-written file, and no two writers share a file.

Step convention (see :mod:`streams.demo.model`): the loss of step ``s`` is measured before update
``s``; the checkpoint of step ``s`` holds the weights after it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from streams.files.atomic import atomic_write
from streams.demo import model as M

__all__ = [
    "SHARE_MODES",
    "Share",
    "JobSpec",
    "JobResult",
    "CohortRegistry",
    "JobClientFactory",
    "run_job",
]

log = logging.getLogger("streams.demo.jobs")

SHARE_MODES = ("PBT_EXPLOIT", "MERGE", "REFERENCE", "EVAL_ONLY")
NAN_GUARD = "nan-guard"
SPIKE_GUARD = "spike-guard"


# ---------------------------------------------------------------------------------------- specs


@dataclass(frozen=True, slots=True)
class Share:
    """A sharing action: after its own step ``step`` the job reads ``peer``'s checkpoint.

    ``peer_step`` names the checkpoint ``f"{peer}-{peer_step}"`` (the peer's incarnation-0 id;
    the job waits for it to be written); ``None`` takes the peer's latest checkpoint at that moment.
    ``weight``: for ``MERGE`` the peer's share of the average, for ``REFERENCE`` the coefficient of
    the KL pull; unused otherwise.
    """

    step: int
    mode: str
    peer: str
    peer_step: int | None = None
    weight: float = 0.5

    def __post_init__(self) -> None:
        if self.mode not in SHARE_MODES:
            raise ValueError(f"Share.mode must be one of {SHARE_MODES}, not {self.mode!r}")
        if self.step < 1:
            raise ValueError(f"Share.step must be >= 1, not {self.step}")
        if not 0.0 <= self.weight <= 1.0 and self.mode == "MERGE":
            raise ValueError(f"MERGE weight must be in [0, 1], not {self.weight}")

    @property
    def checkpoint_id(self) -> str | None:
        return None if self.peer_step is None else f"{self.peer}-{self.peer_step}"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of a cohort. ``seed`` fixes the job's data order; the task (and the base model)
    are the cohort's (``task``). ``lr_blowup_step``: from that update on, in incarnation 0 only,
    the learning rate is multiplied by ``lr_blowup_factor`` (the fault the demo injects)."""

    job_id: str
    cohort_id: str
    seed: int
    lr: float
    steps: int
    shares: tuple[Share, ...] = ()
    base_model: str = "mlp-64x256x8-base"
    progress_every: int = 5
    checkpoint_every: int = 10
    lr_blowup_step: int | None = None
    lr_blowup_factor: float = 1000.0
    task: M.TaskConfig = field(default_factory=M.TaskConfig)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.progress_every < 1 or self.checkpoint_every < 1:
            raise ValueError("steps, progress_every and checkpoint_every must be >= 1")
        for sh in self.shares:
            if sh.peer == self.job_id:
                raise ValueError(f"{self.job_id}: a share names the job itself")

    def lr_at(self, update: int, incarnation: int) -> float:
        """The learning rate of update ``update`` (1-based) in ``incarnation``."""
        if incarnation == 0 and self.lr_blowup_step is not None and update >= self.lr_blowup_step:
            return self.lr * self.lr_blowup_factor
        return self.lr

    def config_hash(self) -> str:
        """Hex SHA-256 of the job's training configuration (what ``JobStarted.config_hash`` holds)."""
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(slots=True)
class JobResult:
    """What a job did (returned by :func:`run_job`; ``to_dict()`` for a process boundary)."""

    job_id: str
    status: str = "RUNNING"
    step: int = 0
    incarnation: int = 0
    final_checkpoint_id: str | None = None
    final_loss: float | None = None
    eval_loss: float | None = None
    eval_accuracy: float | None = None
    steps_computed: int = 0
    checkpoints: list[str] = field(default_factory=list)
    consumed: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    divergences: list[dict[str, Any]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    notices: list[dict[str, Any]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------- the registry


def _atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, text.encode("utf-8"))


class CohortRegistry:
    """The cohort's shared checkpoint directory: ``root/registry/<job_id>.json`` per job.

    Each job writes only its own file (:meth:`publish`, atomic rename), with every checkpoint it
    wrote and its latest; anyone reads (:meth:`find`, :meth:`latest`, :meth:`entries`).
    """

    def __init__(self, cohort_dir: str | os.PathLike[str]) -> None:
        self.root = Path(cohort_dir)
        self.dir = self.root / "registry"
        self._own: dict[str, list[dict[str, Any]]] = {}

    def job_dir(self, job_id: str) -> Path:
        """Where ``job_id`` writes its checkpoint files."""
        return self.root / "jobs" / job_id

    def _file(self, job_id: str) -> Path:
        return self.dir / f"{job_id}.json"

    def publish(self, entry: dict[str, Any]) -> None:
        """Add a checkpoint of ``entry["job_id"]`` (written by this process) and make it latest."""
        job_id = entry["job_id"]
        own = self._own.setdefault(job_id, [])
        own.append(dict(entry))
        doc = {"job_id": job_id, "latest": own[-1], "checkpoints": own}
        _atomic_write_text(self._file(job_id), json.dumps(doc, indent=1, sort_keys=True))

    def _read(self, job_id: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._file(job_id).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def jobs(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(p.stem for p in self.dir.glob("*.json"))

    def entries(self, job_id: str | None = None) -> list[dict[str, Any]]:
        """Every published checkpoint (of one job, or of all), in publication order per job."""
        out: list[dict[str, Any]] = []
        for j in [job_id] if job_id is not None else self.jobs():
            doc = self._read(j)
            if doc is not None:
                out.extend(doc["checkpoints"])
        return out

    def latest(self, job_id: str) -> dict[str, Any] | None:
        doc = self._read(job_id)
        return None if doc is None else doc["latest"]

    def find(self, checkpoint_id: str) -> dict[str, Any] | None:
        """The entry of ``checkpoint_id``; its writer is looked at first (ids start with it)."""
        jobs = self.jobs()
        jobs.sort(key=lambda j: (not checkpoint_id.startswith(j + "-"), j))
        for j in jobs:
            for e in self.entries(j):
                if e["checkpoint_id"] == checkpoint_id:
                    return e
        return None


# ---------------------------------------------------------------------------------- the client


class TrainingClient(Protocol):  # the part of streams.client.JobClient a job uses
    def start(self, base_checkpoint_id: str | None = None, config_hash: str | None = None) -> Any: ...
    def progress(self, step: int, epoch: int, loss: float, grad_norm: float | None = None,
                 lr: float | None = None) -> Any: ...
    def checkpoint_written(self, checkpoint_id: str, path: str, step: int, epoch: int,
                           uri: str | None = None) -> str | None: ...
    def consumed(self, source_checkpoint_id: str, step: int, mode: str, load: Callable[[], str],
                 expected_hash: str | None = None) -> Any: ...
    def diverged(self, onset_step: int, detector: str, reason: str) -> Any: ...
    def finished(self, status: str = "SUCCEEDED", final_checkpoint_id: str | None = None) -> Any: ...
    def poll(self, timeout: float = 0.0) -> list[Any]: ...
    def wait_while_halted(self, timeout: float | None = None) -> bool: ...
    def close(self) -> Any: ...


ClientFactory = Callable[..., TrainingClient]
"""``factory(job_id, cohort_id, base_model, *, on_rollback, on_halt, on_release, on_quarantine)``"""


class JobClientFactory:
    """A picklable factory of the real ``streams.client.JobClient`` for :func:`run_job`: each job
    gets ``journal_dir = journal_root / job_id``; the other keyword arguments (``bootstrap``,
    ``topics``, ``worker_url``, ``gate``) are passed through."""

    def __init__(self, journal_root: str | os.PathLike[str], **client_kwargs: Any) -> None:
        self.journal_root = Path(journal_root)
        self.client_kwargs = client_kwargs

    def __call__(self, job_id: str, cohort_id: str, base_model: str, **callbacks: Any) -> TrainingClient:
        from streams.client import JobClient  # imported here: the demo model needs no Kafka

        return JobClient(job_id, cohort_id, base_model, journal_dir=self.journal_root / job_id,
                         **self.client_kwargs, **callbacks)


def _is_gate_refusal(exc: BaseException) -> bool:
    # matched by name so this module does not import the Kafka client (fakes may define their own)
    return any(cls.__name__ == "GateRefused" for cls in type(exc).__mro__)


# ------------------------------------------------------------------------------------ the job


@dataclass(slots=True)
class _Reference:
    checkpoint_id: str
    theta: np.ndarray
    coef: float


@dataclass(slots=True)
class _OwnCheckpoint:
    checkpoint_id: str
    path: str
    step: int
    incarnation: int
    reference: _Reference | None


class _Restored(Exception):
    """Raised out of a wait when a command restored the job's state."""


class _HaltedTooLong(Exception):
    """The job stayed halted longer than it may wait: it finishes CANCELLED."""


class _TrainingJob:
    def __init__(self, spec: JobSpec, client_factory: ClientFactory, *, cohort_dir: str | os.PathLike[str],
                 nan_wait_s: float, peer_wait_s: float, halt_wait_s: float | None,
                 poll_interval: float, window: int, spike_factor: float,
                 task: M.Task | None) -> None:
        self.spec = spec
        self.cfg = spec.task
        self.task = task if task is not None and task.config == spec.task else M.Task(spec.task)
        self.registry = CohortRegistry(cohort_dir)
        self.dir = self.registry.job_dir(spec.job_id)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.nan_wait_s = nan_wait_s
        self.peer_wait_s = peer_wait_s
        self.halt_wait_s = halt_wait_s
        self.poll_interval = poll_interval
        self.window = window
        self.spike_factor = spike_factor

        self._init_model()
        self.step = 0
        self.incarnation = 0
        self.reference: _Reference | None = None
        self.own: dict[str, _OwnCheckpoint] = {}
        self.done_shares: set[int] = set()
        self.kept: list[float] = []  # the last `window` unflagged losses of the incarnation
        self.reported = False  # a divergence was reported in the current incarnation
        self.restored = False  # set by a command callback; checked by the waits
        self.last_loss: float | None = None
        self.result = JobResult(spec.job_id)
        self.client = client_factory(spec.job_id, spec.cohort_id, spec.base_model,
                                     on_rollback=self._on_rollback, on_halt=self._on_halt,
                                     on_release=self._on_release, on_quarantine=self._on_quarantine)

    # ------------------------------------------------------------------ the loop

    def run(self) -> JobResult:
        t0 = time.monotonic()
        spec, client = self.spec, self.client
        try:
            client.start(base_checkpoint_id=None, config_hash=spec.config_hash())
            status = "SUCCEEDED"
            try:
                while self.step < spec.steps:
                    client.poll()
                    self._halt_gate()
                    if not self._train_one_step():
                        status = "FAILED"
                        break
            except _HaltedTooLong:
                log.error("[%s] halted for more than %ss: cancelled", spec.job_id, self.halt_wait_s)
                status = "CANCELLED"
            final = None
            if status == "SUCCEEDED":
                final = self._last_checkpoint_id()
                last = self.own.get(final) if final is not None else None
                if last is None or (last.step, last.incarnation) != (self.step, self.incarnation):
                    final = self._write_checkpoint()  # the final weights, unless just saved
                ev_loss, ev_acc = self._evaluate()
                self.result.eval_loss, self.result.eval_accuracy = ev_loss, ev_acc
            client.finished(status, final_checkpoint_id=final)
            self.result.status = status
            self.result.final_checkpoint_id = final
            log.info("[%s] finished %s at step %d (incarnation %d), final %s", spec.job_id, status,
                     self.step, self.incarnation, final)
        except BaseException:
            self.result.status = "CRASHED"
            raise
        finally:
            self.result.step = self.step
            self.result.incarnation = self.incarnation
            self.result.final_loss = self.last_loss
            self.result.wall_s = time.monotonic() - t0
            try:
                client.close()
            except Exception:  # closing must not hide the real outcome
                log.exception("[%s] client.close failed", spec.job_id)
        return self.result

    def _train_one_step(self) -> bool:
        """One step, then the guard. False: the job diverged and no command came (it gives up)."""
        spec = self.spec
        s = self.step + 1
        x, y = self.task.batch(spec.seed, s)
        stats = self._forward_backward(x, y)
        self.result.steps_computed += 1
        lr = spec.lr_at(s, self.incarnation)
        epoch = self.task.epoch_of(s)
        if not M.is_finite(stats.loss, stats.grad_norm):
            # no update from a non-finite gradient: the weights stay as they are
            self.client.progress(s, epoch, stats.loss, grad_norm=stats.grad_norm, lr=lr)
            return self._guard(s, NAN_GUARD, f"non-finite loss {stats.loss!r} / grad norm "
                                             f"{stats.grad_norm!r} at step {s}")
        spike = self._spike(stats.loss)
        self.last_loss = stats.loss
        self._update(lr)
        self.step = s
        logged = s % spec.progress_every == 0 or spike is not None  # the guard logs what tripped it
        if logged:
            self.client.progress(s, epoch, stats.loss, grad_norm=stats.grad_norm, lr=lr)
            self.result.loss_curve.append((s, stats.loss))
        if s % spec.checkpoint_every == 0:
            self._write_checkpoint()
        for i, share in enumerate(spec.shares):
            if share.step == s and i not in self.done_shares:
                try:
                    self._share(i, share)
                except _Restored:
                    return True  # a command moved the job; the loop goes on from there
        if spike is not None:
            return self._guard(s, SPIKE_GUARD, spike)
        return True

    # --------------------------------------------------------------- detection

    def _spike(self, loss: float) -> str | None:
        """The SPEC §5 spike rule on every step of the incarnation: ``loss`` above
        ``spike_factor`` × the median of the previous ``window`` losses. None: not a spike."""
        kept = self.kept
        verdict = None
        if len(kept) >= self.window:
            med = statistics.median(kept[-self.window:])
            if loss > self.spike_factor * med:
                verdict = (f"loss {loss:.4g} > {self.spike_factor:g} x median {med:.4g} "
                           f"of the last {self.window} steps")
        if verdict is None:
            kept.append(loss)
            del kept[:-self.window]
        return verdict

    def _guard(self, s: int, detector: str, reason: str) -> bool:
        """Report the divergence (once per incarnation), then stop and wait for a command."""
        if not self.reported:
            self.reported = True
            self.client.diverged(s, detector, reason)
            self.result.divergences.append({"incarnation": self.incarnation, "onset_step": s,
                                            "detector": detector, "reason": reason})
            log.warning("[%s] diverged at step %d (%s: %s); waiting up to %.0fs for a command",
                        self.spec.job_id, s, detector, reason, self.nan_wait_s)
        try:
            self._wait(self.nan_wait_s, lambda: False)
        except _Restored:
            return True
        log.error("[%s] no command within %.0fs after its divergence: giving up", self.spec.job_id,
                  self.nan_wait_s)
        return False

    # ------------------------------------------------------------------- waits

    def _wait(self, timeout: float, ready: Callable[[], Any]) -> Any:
        """Poll the client until ``ready()`` is truthy (returned) or ``timeout`` passes (None).
        Raises :class:`_Restored` as soon as a command restored the job's state."""
        deadline = time.monotonic() + timeout
        self.restored = False
        while True:
            got = ready()
            if got:
                return got
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.client.poll(timeout=min(self.poll_interval, remaining))
            self._halt_gate()
            if self.restored:
                raise _Restored()

    def _halt_gate(self) -> None:
        """Block while the job is halted; raises :class:`_HaltedTooLong` when the halt outlasts
        ``halt_wait_s``."""
        if not self.client.wait_while_halted(timeout=self.halt_wait_s):
            raise _HaltedTooLong()

    # ----------------------------------------------------------------- sharing

    def _share(self, index: int, share: Share) -> None:
        spec = self.spec
        want = share.checkpoint_id

        def lookup() -> dict[str, Any] | None:
            if want is not None:
                return self.registry.find(want)
            return self.registry.latest(share.peer)

        entry = self._wait(self.peer_wait_s, lookup)  # may raise _Restored: the share stays to do
        self.done_shares.add(index)
        record = {"step": self.step, "mode": share.mode, "peer": share.peer,
                  "incarnation": self.incarnation}
        if entry is None:
            record["why"] = f"{want or share.peer + ' latest'} not published within {self.peer_wait_s:.0f}s"
            self.result.skipped.append(record)
            log.warning("[%s] skipped %s: %s", spec.job_id, share.mode, record["why"])
            return
        ck_id = entry["checkpoint_id"]
        record["checkpoint_id"] = ck_id
        try:
            self._consume(ck_id, entry, share)
        except Exception as exc:
            if not _is_gate_refusal(exc):
                raise
            record["why"] = str(exc)
            self.result.refused.append(record)
            log.warning("[%s] gate refused %s of %s: %s", spec.job_id, share.mode, ck_id, exc)
            return
        self.result.consumed.append(record)
        log.info("[%s] step %d: %s %s", spec.job_id, self.step, share.mode, ck_id)

    # ------------------------------------------------------------ checkpoints

    def _checkpoint_id(self, step: int) -> str:
        base = f"{self.spec.job_id}-{step}"
        return base if self.incarnation == 0 else f"{base}-i{self.incarnation}"

    def _last_checkpoint_id(self) -> str | None:
        return self.result.checkpoints[-1] if self.result.checkpoints else None

    def _write_checkpoint(self) -> str:
        ck_id = self._checkpoint_id(self.step)
        epoch = self.task.epoch_of(self.step)
        path, content_hash = self._persist(ck_id, epoch)
        uri = path.as_uri()
        self.own[ck_id] = _OwnCheckpoint(ck_id, str(path), self.step, self.incarnation, self.reference)
        self.result.checkpoints.append(ck_id)
        self.registry.publish({
            "checkpoint_id": ck_id, "job_id": self.spec.job_id, "path": str(path), "uri": uri,
            "step": self.step, "epoch": epoch, "incarnation": self.incarnation,
            "loss": self.last_loss if self.last_loss is None or math.isfinite(self.last_loss) else None,
            "content_hash": content_hash, "ts": int(time.time() * 1000),
        })
        return ck_id

    def _resolve(self, checkpoint_id: str) -> tuple[str, int, _Reference | None]:
        """(path, step, reference in force) of a checkpoint: the job's own, else the registry's."""
        own = self.own.get(checkpoint_id)
        if own is not None:
            return own.path, own.step, own.reference
        entry = self.registry.find(checkpoint_id)
        if entry is None:
            raise LookupError(f"{self.spec.job_id}: checkpoint {checkpoint_id!r} is neither the "
                              f"job's own nor in the cohort registry")
        return entry["path"], int(entry["step"]), None

    # --------------------------------------------------------------- commands

    def _on_rollback(self, cmd: Any) -> None:
        """Restore what ``cmd`` says. The client has already dropped stale, superseded and
        duplicate commands and emits ``RolledBack`` when this returns, so every call is applied
        (or raises: a command the job cannot apply must not be recorded as done)."""
        command_id = getattr(cmd, "command_id", None)
        action = cmd.action
        target = cmd.target_checkpoint_id
        step, reference = self._restore(cmd)
        self.step, self.reference = int(step), reference
        self.incarnation += 1
        self.kept = []
        self.reported = False
        self.restored = True
        self.result.commands.append({"command_id": command_id, "action": action,
                                     "target_checkpoint_id": target, "target_step": self.step,
                                     "incarnation": self.incarnation})
        log.warning("[%s] %s to %s: step %d, incarnation %d", self.spec.job_id, action, target,
                    self.step, self.incarnation)

    # ------------------------------------------------------- the model (numpy)

    def _init_model(self) -> None:
        self.theta = M.base_theta(self.cfg)

    def _evaluate(self) -> tuple[float, float]:
        return M.evaluate(self.theta, self.task)

    def _forward_backward(self, x: np.ndarray, y: np.ndarray) -> M.StepStats:
        ref_probs = None
        if self.reference is not None:
            ref_probs = M.predict_proba(self.reference.theta, x, self.cfg)
        stats, self._grad = M.loss_and_grad(self.theta, x, y, self.cfg, ref_probs=ref_probs,
                                            ref_coef=self.reference.coef if self.reference else 0.0)
        return stats

    def _update(self, lr: float) -> None:
        self.theta = M.sgd_step(self.theta, self._grad, lr)

    def _persist(self, ck_id: str, epoch: int) -> tuple[Path, str]:
        """Write the checkpoint ``ck_id`` of the current weights and record it: (path, hash)."""
        path = (self.dir / f"{ck_id}.npy").resolve()
        digest = M.save_checkpoint(path, self.theta)
        got = self.client.checkpoint_written(ck_id, str(path), self.step, epoch, uri=path.as_uri())
        return path, got if isinstance(got, str) and got else digest

    def _consume(self, ck_id: str, entry: dict[str, Any], share: Share) -> None:
        """Load ``ck_id`` (the registry's ``entry``) through the gate and apply it as ``share``
        says; a gate refusal propagates (nothing applied)."""
        loaded: dict[str, np.ndarray] = {}

        def load() -> str:
            loaded["theta"] = M.load_checkpoint(entry["path"], self.cfg)
            return entry["path"]

        self.client.consumed(ck_id, self.step, share.mode, load=load, expected_hash=entry.get("content_hash"))
        peer = loaded["theta"] if "theta" in loaded else M.load_checkpoint(entry["path"], self.cfg)
        if share.mode == "PBT_EXPLOIT":
            self.theta = peer.copy()
        elif share.mode == "MERGE":
            self.theta = M.average(self.theta, peer, share.weight)
        elif share.mode == "REFERENCE":
            self.reference = _Reference(ck_id, peer, share.weight)
        elif share.mode == "EVAL_ONLY":
            ev_loss, ev_acc = M.evaluate(peer, self.task)
            self.result.evaluations.append({"checkpoint_id": ck_id, "step": self.step,
                                            "eval_loss": ev_loss, "eval_accuracy": ev_acc})

    def _restore(self, cmd: Any) -> tuple[int, Any]:
        """Restore the weights ``cmd`` asks for: (the step training resumes at, the reference
        model in force there)."""
        action, target = cmd.action, cmd.target_checkpoint_id
        if action == "ROLLBACK":
            if target is None:
                raise ValueError(f"{self.spec.job_id}: ROLLBACK command {getattr(cmd, 'command_id', None)} names no checkpoint")
            path, ck_step, reference = self._resolve(target)
            self.theta = M.load_checkpoint(path, self.cfg)
            return (cmd.target_step if cmd.target_step is not None else ck_step), reference
        if action == "RESTART_FROM_BASE":
            self.theta = (M.load_checkpoint(self._resolve(target)[0], self.cfg) if target is not None
                          else M.base_theta(self.cfg))
            return cmd.target_step or 0, None
        if action == "RESTART_FROM_SCRATCH":
            self.theta = M.base_theta(self.cfg)
            return 0, None
        raise ValueError(f"{self.spec.job_id}: command {getattr(cmd, 'command_id', None)} has an unknown action {action!r}")

    def _on_halt(self, cmd: Any) -> None:
        self._notice("halt", cmd)

    def _on_release(self, cmd: Any) -> None:
        self._notice("release", cmd)

    def _on_quarantine(self, cmd: Any) -> None:
        self._notice("quarantine", cmd)

    def _notice(self, what: str, cmd: Any) -> None:
        self.result.notices.append({"kind": what, "command_id": getattr(cmd, "command_id", None),
                                    "step": self.step})
        log.warning("[%s] %s: %s", self.spec.job_id, what, getattr(cmd, "command_id", cmd))


def run_job(spec: JobSpec, client_factory: ClientFactory, *, cohort_dir: str | os.PathLike[str],
            nan_wait_s: float = 30.0, peer_wait_s: float = 60.0, halt_wait_s: float | None = 120.0,
            poll_interval: float = 0.02, window: int = 10, spike_factor: float = 3.0,
            task: M.Task | None = None) -> JobResult:
    """Run one job of the cohort to its end and return what it did.

    ``client_factory(job_id, cohort_id, base_model, *, on_rollback, on_halt, on_release,
    on_quarantine)`` builds the lineage client (:class:`JobClientFactory` for the real one).
    ``cohort_dir``: the cohort's shared directory (checkpoints under ``jobs/<job_id>/``, the
    registry under ``registry/``). ``nan_wait_s``: how long a diverged job waits for a command
    before it finishes ``FAILED``; ``peer_wait_s``: how long a sharing action waits for the peer's
    checkpoint before it is skipped; ``halt_wait_s``: how long a halt may last before the job
    finishes ``CANCELLED`` (None: forever). ``window``/``spike_factor``: the guard's onset rule.
    ``task``: a prebuilt :class:`~streams.demo.model.Task` to share between jobs of one process.
    """
    job = _TrainingJob(spec, client_factory, cohort_dir=cohort_dir, nan_wait_s=nan_wait_s,
                       peer_wait_s=peer_wait_s, halt_wait_s=halt_wait_s, poll_interval=poll_interval,
                       window=window, spike_factor=spike_factor, task=task)
    return job.run()

