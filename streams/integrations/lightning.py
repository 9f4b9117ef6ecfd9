"""PyTorch Lightning: a ``Callback`` that keeps the record and a fit loop that obeys the referee.

::

    from traintrace.integrations.lightning import LineageCheckpoint, TraintraceCallback, fit_under_control

    client = traintrace.JobClient("A", "pbt-1", "tiny-mlp", journal_dir="runs/A",
                                  worker_url="http://127.0.0.1:6066")
    lineage = TraintraceCallback(client, "/shared/ckpts")
    make = lambda: pl.Trainer(max_steps=1000, logger=False,
                              callbacks=[lineage, LineageCheckpoint(lineage, every_n_train_steps=50)])
    fit_under_control(make, model, lineage, train_dataloaders=loader)   # ... JobFinished
    # inside training_step, a PBT exploit: lineage.consume("B-400", "PBT_EXPLOIT")

What is recorded (SPEC §4):

- ``JobStarted`` at the first fit start (the model's state there is what ``RESTART_FROM_SCRATCH``
  goes back to); ``Progress`` at each training batch end: the loss from the step's outputs, the
  learning rate of the first optimizer, the gradient norm with ``grad_norm=True``. Its ``step``
  is ``trainer.global_step`` when the batch started — the number of updates the weights that
  computed the loss had had — so the loss of step ``s`` is the loss of checkpoint ``JOB-s``.
- ``CheckpointWritten`` by :class:`LineageCheckpoint`, a ``ModelCheckpoint`` that writes every
  checkpoint to the cohort's store as ``ID.pt`` (Lightning's own format, keeps all of them: they
  are the rollback targets) and records it with the SHA-256 of the file Lightning wrote. Ids are
  ``JOB-STEP``, ``JOB-STEP-iN`` after the N-th rollback (as :class:`TorchLineage`).
- A non-finite loss or gradient norm is a ``DivergenceReported`` at once (DivergenceGuard); the
  fit stops (``trainer.should_stop``) and writes no checkpoint after it.
- :meth:`TraintraceCallback.consume`: another job's checkpoint through the load-time gate (the
  bytes read once, hashed, deserialised with ``weights_only``), ``CheckpointConsumed`` with its
  mode, then applied: ``INIT``/``PBT_EXPLOIT`` copy weights, optimizer and scheduler states;
  ``MERGE`` averages the weights; ``REFERENCE``/``DISTILL`` return a frozen copy of the module.

Control: the callback polls the client at each batch end. A halt waits there until an operator
releases the job. A rollback stops the fit; :func:`fit_under_control` then fits again with
``ckpt_path=`` the target, Lightning's own restore path (model, optimizers, schedulers, loops), or
for ``RESTART_FROM_SCRATCH`` from the start state without one, and ``RolledBack`` is recorded at
the train start of that fit, once Lightning restored (the client's ``on_rollback`` is not used:
the command is taken ``unhandled`` and acknowledged by the restore itself).
"""

from __future__ import annotations

import copy
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

from streams.client.hashing import LoadedContent, hash_file
from streams.client.restored import Restored
from streams.control.commands import ControlCommand
from streams.integrations.errors import IntegrationError, missing_framework
from streams.integrations.fallback import Ancestry, substitute
from streams.integrations.guard import DivergenceGuard
from streams.integrations.safety import Outcomes, after_run, never_raises
from streams.integrations.store import CheckpointStore, checkpoint_id_of

try:
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.callbacks import ModelCheckpoint
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise missing_framework("PyTorch Lightning", "lightning", exc) from exc

from streams.integrations.torch import COPY_MODES, load_file_once, merge_weights  # noqa: E402 - needs torch

__all__ = ["LineageCheckpoint", "TraintraceCallback", "fit_under_control", "read_lightning_checkpoint"]


def read_lightning_checkpoint(path: str | os.PathLike[str]) -> tuple[dict[str, Any], LoadedContent]:
    """A Lightning checkpoint file read once, hashed, and deserialised from those bytes with
    ``weights_only=True`` (a peer's file never runs code here)."""
    p = Path(path)
    try:
        ck, content = load_file_once(p)
    except FileNotFoundError as exc:
        raise IntegrationError(f"checkpoint {p} is not there: {exc}") from exc
    except (RuntimeError, ValueError, OSError, EOFError) as exc:
        raise IntegrationError(f"checkpoint {p} cannot be loaded as a Lightning checkpoint: {exc}") from exc
    if not isinstance(ck, dict) or "state_dict" not in ck:
        raise IntegrationError(f"{p} is not a Lightning checkpoint (no 'state_dict'): write it with LineageCheckpoint")
    return ck, content


def _number(v: Any) -> float | None:
    try:
        return float(v.detach().float().item()) if isinstance(v, torch.Tensor) else float(v)
    except (TypeError, ValueError, RuntimeError):
        return None


def _loss_of(outputs: Any) -> float | None:
    if isinstance(outputs, dict):
        outputs = outputs.get("loss")
    if outputs is None:
        return None
    return float(outputs.detach().float().item()) if isinstance(outputs, torch.Tensor) else float(outputs)


class TraintraceCallback(pl.Callback, Outcomes):
    """One job's Lightning side of the record, around its :class:`~streams.client.JobClient`.

    ``store``: the cohort's checkpoint directory; ``grad_norm``: also record the total gradient
    norm (before each optimizer step); ``halt_wait``: how long a halted job waits for a release
    (None: for ever); ``on_restored(restored, trainer, module)``: called once a rollback's fit
    restored (RolledBack recorded). ``restores`` lists every restore as (checkpoint id, step,
    from_scratch, the trainer's global_step after Lightning restored)."""

    def __init__(self, client: Any, store: str | os.PathLike[str] | CheckpointStore, *,
                 base_checkpoint_id: str | None = None, config_hash: str | None = None,
                 grad_norm: bool = False, halt_wait: float | None = None,
                 on_restored: Callable[[Restored, Any, Any], None] | None = None) -> None:
        super().__init__()
        self.client = client
        client.on_rollback = None  # taken "unhandled": the next fit restores, then RolledBack
        self.store = store if isinstance(store, CheckpointStore) else CheckpointStore(store)
        self.base_checkpoint_id, self.config_hash = base_checkpoint_id, config_hash
        self.track_grad_norm, self.halt_wait, self.on_restored = grad_norm, halt_wait, on_restored
        self.guard = DivergenceGuard(client)
        self.pending: ControlCommand | None = None  # a rollback to apply by the next fit
        self.resume: tuple[Restored, str] | None = None  # what the next fit restores, and its command
        self.initial: dict[str, Any] | None = None
        self.written: dict[str, str] = {}  # checkpoint id -> content hash, this process
        self.last_checkpoint_id: str | None = None
        self.restores: list[tuple[str | None, int, bool, int]] = []
        self.trainer: Any = None
        self.module: Any = None
        self._step = 0
        self._grad_norm: float | None = None
        self.ancestry = Ancestry()  # this job's own checkpoints its weights descend from
        self.gave_up: str | None = None  # why the job stopped for good (JobFinished's status)
        #: rotation through the referee: what a rotation wanted gone and the referee still keeps
        #: (checkpoint id -> how to remove it), what was deleted, the notice version last tried
        self.rotation_pending: dict[str, Callable[[], object]] = {}
        self.pruned: list[str] = []
        self._rotated_at: int | None = None
        self._init_outcomes()

    # -- the record -------------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """This incarnation diverged, a rollback waits or the job gave up: train no further,
        save nothing."""
        return self.guard.tripped or self.pending is not None or self.gave_up is not None

    def checkpoint_id(self, step: int) -> str:
        inc = self.client.incarnation
        return checkpoint_id_of(self.client.job_id, step, inc)

    def start(self, module: Any) -> None:
        """Record ``JobStarted`` once (the fit does it); keeps ``module``'s state for a restart
        from scratch, then loads the base checkpoint's weights when there is one."""
        if self.initial is not None:
            return
        self.initial = copy.deepcopy(module.state_dict())
        self.client.start(base_checkpoint_id=self.base_checkpoint_id, config_hash=self.config_hash)
        if self.base_checkpoint_id is not None:
            self._load_base(module)

    def _load_base(self, module: Any) -> None:
        ck, _ = read_lightning_checkpoint(self.store.locate(self.base_checkpoint_id))
        module.load_state_dict(ck["state_dict"])

    def recorded_checkpoint(self, checkpoint_id: str, path: Path, step: int, epoch: int) -> None:
        """Record a checkpoint Lightning wrote at ``path`` (LineageCheckpoint calls this)."""
        h = self.client.checkpoint_written(checkpoint_id, path, step, epoch, content_hash=hash_file(path))
        self.written[checkpoint_id] = h
        self.last_checkpoint_id = checkpoint_id
        self.ancestry.wrote(checkpoint_id, step)

    def finish(self, status: str = "SUCCEEDED") -> None:
        """Record ``JobFinished`` (with the last checkpoint of the current history) and close."""
        try:
            if self.client.started and not self.client.is_finished:
                self.client.finished(status, final_checkpoint_id=self.last_checkpoint_id)
        finally:
            self.client.close()

    # -- Lightning hooks --------------------------------------------------------------------------

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.trainer, self.module = trainer, pl_module

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.trainer, self.module = trainer, pl_module
        try:
            self.start(pl_module)
        except Exception as exc:  # noqa: BLE001 - no record, no concurrent training
            self.gave_up = "FAILED"
            trainer.should_stop = True
            self.outcome(f"JobStarted could not be recorded ({exc}): the fit stops "
                         "(no record, no concurrent training)")

    @never_raises()
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.resume is None:
            return
        restored, command_id = self.resume
        if trainer.global_step != restored.step:
            self.outcome(f"Lightning restored {restored.checkpoint_id or 'the start state'} at global step "
                         f"{trainer.global_step}, the rollback asked for step {restored.step} (give "
                         "fit_under_control a Trainer factory: a fresh Trainer per fit)")
        self.resume = None
        self.client.rolled_back(restored.checkpoint_id, restored.step, command_id,
                                from_scratch=restored.from_scratch)
        self.restores.append((restored.checkpoint_id, restored.step, restored.from_scratch, trainer.global_step))
        if self.on_restored is not None:
            self.on_restored(restored, trainer, pl_module)

    @never_raises()
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._step, self._grad_norm = trainer.global_step, None

    @never_raises()
    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.track_grad_norm:
            norms = [p.grad.detach().float().norm(2) for p in pl_module.parameters() if p.grad is not None]
            self._grad_norm = float(torch.stack(norms).norm(2)) if norms else None

    @never_raises()
    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        """A NaN or infinite value of any logged metric (``val_acc``, a monitored score...) is
        a divergence too; none of them is recorded as the loss."""
        if trainer.sanity_checking or self.stopping:
            return
        metrics = {k: _number(v) for k, v in trainer.callback_metrics.items()}
        if self.guard.check(trainer.global_step, None, metrics=metrics):
            trainer.should_stop = True

    @never_raises()
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = _loss_of(outputs)
        if loss is not None and not self.guard.tripped:
            lr = None
            if trainer.optimizers and trainer.optimizers[0].param_groups:
                lr = float(trainer.optimizers[0].param_groups[0].get("lr", math.nan))
            self.client.progress(self._step, trainer.current_epoch, loss, self._grad_norm, lr)
            if self.guard.check(self._step, loss, self._grad_norm):
                trainer.should_stop = True  # wait for the referee (fit_under_control)
                return
        self.control()
        if self.rotation_pending and (self.client.retention or {}).get("version") != self._rotated_at:
            self.rotate()
        if self.stopping:
            trainer.should_stop = True

    # -- rotation (SPEC §13) --------------------------------------------------------------------

    def rotate_out(self, checkpoint_id: str, remove: Callable[[], object]) -> bool:
        """A rotation (:class:`LineageCheckpoint`'s ``save_top_k``) wants ``checkpoint_id`` gone:
        deleted now when the referee's last RetentionNotice lists it as deletable
        (``CheckpointDeleted`` first), else kept until it is (:meth:`rotate`, at batch ends).
        Whether it was deleted now; never raises."""
        try:
            if self.client.delete(checkpoint_id, remove):
                self.pruned.append(checkpoint_id)
                self.rotation_pending.pop(checkpoint_id, None)
                return True
        except Exception as exc:  # noqa: BLE001 - a deletion that failed keeps the file: never crash
            self.outcome(f"rotation: {checkpoint_id} not deleted: {exc}")
        self.rotation_pending[checkpoint_id] = remove
        return False

    def rotate(self) -> list[str]:
        """Delete the checkpoints a rotation gave up on that the referee now marks deletable."""
        self._rotated_at = (self.client.retention or {}).get("version")
        done = [c for c in list(self.rotation_pending) if self.rotate_out(c, self.rotation_pending[c])]
        return done

    # -- control ----------------------------------------------------------------------------------

    def control(self, timeout: float = 0.0) -> None:
        """Apply the referee's commands: a rollback becomes :attr:`pending` (the fit stops); a
        halted job waits here until released (``halt_wait`` s at most, then IntegrationError).
        Like ``JobClient.wait_while_halted``, but a rollback arriving meanwhile is kept."""
        self._take(self.client.poll(timeout))
        deadline = None if self.halt_wait is None else time.monotonic() + self.halt_wait
        while self.client.halted and not self.gave_up:
            if deadline is not None and time.monotonic() > deadline:
                self.gave_up = "CANCELLED"
                self.outcome(f"halted ({self.client.halt}) and not released within {self.halt_wait} s: "
                             "the fit stops")
                if self.trainer is not None:
                    self.trainer.should_stop = True
                return
            self._take(self.client.poll(0.5))

    def _take(self, cmds: list[ControlCommand]) -> None:
        for c in cmds:
            if c.outcome == "unhandled":
                self.pending = c  # the effective plan: a later one replaces it

    def wait_for_command(self, timeout: float = 60.0) -> bool:
        """After a divergence: wait for the referee's rollback (True once one is pending)."""
        deadline = time.monotonic() + timeout
        while self.pending is None and not self.gave_up and time.monotonic() < deadline:
            self.control(0.2)
        return self.pending is not None

    def prepare_restore(self, module: Any) -> str | None:
        """Turn the pending rollback into what the next fit restores: returns its ``ckpt_path``
        (the target's file, its hash checked against what this job recorded), or None after
        putting ``module`` back to the start state (from scratch, or the base)."""
        cmd, self.pending = self.pending, None
        if cmd is None:
            raise IntegrationError("prepare_restore() without a pending rollback")
        sub = substitute(Restored.of(cmd), self.ancestry, self._usable)
        restored = sub.restored
        if sub.reason is not None:
            self.outcome(f"rollback by command {cmd.command_id[:12]}: {sub.reason}")
        path: str | None = None
        if restored.checkpoint_id is not None:
            path = str(self.store.locate(restored.checkpoint_id))
        else:
            if self.initial is None:
                raise IntegrationError("a restart before the first fit started: no start state to go back to")
            module.load_state_dict(self.initial)
            if not restored.from_scratch and self.base_checkpoint_id is not None:
                self._load_base(module)
        self.resume = (restored, cmd.command_id)
        self.ancestry.restored(restored.checkpoint_id)
        self.last_checkpoint_id = restored.checkpoint_id or (None if restored.from_scratch else self.base_checkpoint_id)
        return path

    def _usable(self, checkpoint_id: str) -> str | None:
        """Why ``checkpoint_id`` cannot be restored (None: it can)."""
        return self.store.unusable(checkpoint_id, self.written.get(checkpoint_id))

    # -- consuming a peer's checkpoint ------------------------------------------------------------

    def consume(self, checkpoint_id: str, mode: str, *, step: int | None = None, weight: float = 0.5) -> Any:
        """Consume ``checkpoint_id`` (a Lightning checkpoint in the store) in ``mode`` at this
        job's ``step`` (default: ``trainer.global_step``, the step of the weights it replaces;
        consume between steps or before the forward pass): gate, hash of the bytes loaded,
        ``CheckpointConsumed``, then applied to the module being fitted (see the module doc).
        Returns the checkpoint dict, or the frozen module for REFERENCE and DISTILL. Raises
        GateRefused when the gate refuses (nothing recorded, nothing applied)."""
        if self.module is None:
            raise IntegrationError("consume() before the fit started: attach the callback to a Trainer first")
        path = self.store.locate(checkpoint_id)
        got: list[dict[str, Any]] = []

        def loader() -> LoadedContent:
            ck, content = read_lightning_checkpoint(path)
            got.append(ck)
            return content

        at = (self.trainer.global_step if self.trainer is not None else self._step) if step is None else step
        self.client.consumed(checkpoint_id, at, mode, load=loader)
        ck = got[0]
        if mode in COPY_MODES:
            self._apply_all(ck)
        elif mode == "MERGE":
            merge_weights(self.module, ck["state_dict"], weight)
        elif mode in ("REFERENCE", "DISTILL"):
            frozen = copy.deepcopy(self.module)
            frozen.load_state_dict(ck["state_dict"])
            frozen.eval()
            for p in frozen.parameters():
                p.requires_grad_(False)
            return frozen
        return ck

    def _apply_all(self, ck: dict[str, Any]) -> None:
        self.module.load_state_dict(ck["state_dict"])
        if self.trainer is None:
            return
        for opt, state in zip(self.trainer.optimizers, ck.get("optimizer_states") or []):
            opt.load_state_dict(state)
        for cfg, state in zip(self.trainer.lr_scheduler_configs, ck.get("lr_schedulers") or []):
            cfg.scheduler.load_state_dict(state)


class LineageCheckpoint(ModelCheckpoint):
    """A ``ModelCheckpoint`` whose every checkpoint goes to ``lineage``'s store as ``ID.pt``
    and is recorded (``CheckpointWritten``, the hash of the file Lightning wrote); saves nothing
    once the job diverged or a rollback waits. Takes ``every_n_train_steps``,
    ``every_n_epochs``, ``train_time_interval`` and ``save_on_train_epoch_end`` as
    ``ModelCheckpoint`` does; keeps every checkpoint unless given ``save_top_k`` (with
    ``monitor``/``mode``, or alone: the newest k), which rotates the store as Lightning ranks it,
    through the referee (SPEC §13): a checkpoint Lightning drops is deleted only once the
    referee's RetentionNotice lists it as deletable (``CheckpointDeleted`` recorded first), kept
    beyond ``save_top_k`` until then, and never without a notice. A rollback whose target is gone
    anyway (the horizon broken) restores the newest surviving older checkpoint instead (see
    :meth:`TraintraceCallback.prepare_restore`)."""

    def __init__(self, lineage: TraintraceCallback, **kw: Any) -> None:
        fixed = {"dirpath", "save_last", "save_weights_only", "filename", "enable_version_counter"}
        if fixed & set(kw):
            raise IntegrationError(f"LineageCheckpoint sets {', '.join(sorted(fixed & set(kw)))} itself: "
                                   "drop them (checkpoints are whole files ID.pt in the lineage's store)")
        kw.setdefault("save_top_k", -1)
        if kw["save_top_k"] > 1 and not kw.get("monitor"):  # the newest k, as Lightning's docs suggest
            kw.update(monitor="step", mode="max")
        super().__init__(dirpath=str(lineage.store.root), save_last=False, enable_version_counter=False, **kw)
        self.lineage = lineage

    @property
    def state_key(self) -> str:
        return f"LineageCheckpoint[{self.lineage.client.job_id}]"

    def _should_skip_saving_checkpoint(self, trainer: Any) -> bool:
        return self.lineage.stopping or super()._should_skip_saving_checkpoint(trainer)

    def format_checkpoint_name(self, metrics: dict[str, Any], filename: str | None = None,
                               ver: int | None = None, prefix: str | None = None) -> str:
        """``STORE/ID.pt`` of the checkpoint of ``metrics["step"]`` (the trainer's global step):
        the path Lightning saves, ranks and deletes by is the lineage's."""
        step = metrics.get("step")
        step = int(step.item() if isinstance(step, torch.Tensor) else step or 0)
        return str(self.lineage.store.file(self.lineage.checkpoint_id(step)))

    def _remove_checkpoint(self, trainer: Any, filepath: str) -> None:
        """Lightning's rotation through the referee (SPEC §13): the file goes only when the
        referee marks its checkpoint deletable, else it stays until it is
        (:meth:`TraintraceCallback.rotate_out`)."""
        path = Path(filepath)
        if path.parent.resolve() != self.lineage.store.root.resolve() or path.suffix != ".pt":
            super()._remove_checkpoint(trainer, filepath)  # not one of the store's checkpoints
            return
        self.lineage.rotate_out(path.stem, lambda: trainer.strategy.remove_checkpoint(filepath))

    def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
        ck_id = self.lineage.checkpoint_id(trainer.global_step)
        path = self.lineage.store.file(ck_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        super()._save_checkpoint(trainer, str(path))
        self.lineage.recorded_checkpoint(ck_id, path, trainer.global_step, trainer.current_epoch)


def fit_under_control(trainer: Any, model: Any, lineage: TraintraceCallback, *, command_wait: float = 60.0,
                      max_segments: int = 20, **fit_kw: Any) -> Any:
    """``trainer.fit(model, **fit_kw)`` under the referee's control until the job is done, then
    ``JobFinished``. ``trainer``: a ``pl.Trainer`` factory (called for each fit), or one
    Trainer (fitted again; a restart from the start state needs a factory). After a divergence
    it waits ``command_wait`` s for the rollback; each rollback is one more fit with
    ``ckpt_path`` (at most ``max_segments`` fits). Nothing of traintrace's is raised out of it
    once the first fit started: when the job cannot go on (no command came, a halt not
    released, a restart it cannot do) it stops with ``JobFinished`` FAILED or CANCELLED and
    ``lineage.outcomes`` says why; an exception of the training itself propagates, after
    ``JobFinished`` FAILED. Returns the last Trainer."""
    if "ckpt_path" in fit_kw:
        raise IntegrationError("fit_under_control chooses ckpt_path itself (the rollback targets): drop it")
    ckpt_path: str | None = None
    t = None
    status = "SUCCEEDED"
    try:
        for segment in range(max_segments + 1):
            if segment == max_segments:
                status = "FAILED"
                lineage.outcome(f"rolled back {max_segments} times: giving up")
                break
            t = trainer() if callable(trainer) and not isinstance(trainer, pl.Trainer) else trainer
            if lineage not in t.callbacks:
                raise IntegrationError("the Trainer does not hold the TraintraceCallback: pass it in callbacks=[...]")
            t.should_stop = False
            t.fit(model, ckpt_path=ckpt_path, **fit_kw)
            ended = after_run(lineage, command_wait, lineage.control)  # control: a rollback as the fit ended
            if ended is not None:
                status = ended
                break
            if lineage.pending is None:
                break
            ckpt_path = lineage.prepare_restore(model)
            if ckpt_path is None and t is trainer:
                status = "FAILED"
                lineage.outcome("a restart from the start state needs fresh loops, and fit_under_control was "
                                "given one Trainer (give it a factory: lambda: pl.Trainer(...)): the job stops")
                break
    except BaseException:
        if not lineage.client.is_finished:
            try:
                lineage.finish("FAILED")
            except Exception:  # noqa: BLE001 - the original error is the one to see
                pass
        raise
    try:
        lineage.finish(status)
    except Exception as exc:  # noqa: BLE001 - never crash the user's experiment
        lineage.outcome(f"JobFinished could not be recorded: {exc}")
    return t
