"""Hugging Face ``Trainer``: a callback that keeps the record and obeys the referee.

::

    from traintrace.integrations.hf import TraintraceCallback, base_model_of, train_under_control

    client = traintrace.JobClient("A", "pbt-1", base_model_of(model), journal_dir="runs/A",
                                  worker_url="http://127.0.0.1:6066")
    callback = TraintraceCallback(client)
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[callback])
    train_under_control(trainer, callback)   # train; roll back, resume, pause as told; JobFinished

What the callback records (SPEC §4):

- ``JobStarted`` at the first ``on_train_begin`` (``config_hash``: SHA-256 of the model config's
  JSON; a restarted process whose journal already started records nothing);
- ``Progress`` from each training log (``loss``, ``grad_norm``, ``learning_rate``; ``step`` is
  ``state.global_step``); a non-finite loss or grad norm is also a ``DivergenceReported`` at once,
  and training stops before the checkpoint of that step is written. The onset is the first step
  of the logging window whose average went non-finite (conservative when ``logging_steps`` > 1).
  ``logging_nan_inf_filter`` is switched off: with it the Trainer hides a NaN loss by averaging;
- ``CheckpointWritten`` of each ``output_dir/checkpoint-STEP`` folder the Trainer saves, with the
  deterministic hash of the whole folder (``streams.client.hashing.hash_directory``). Ids follow
  the torch integration: ``JOB-STEP``, ``JOB-STEP-iN`` after the N-th rollback; the N-th
  incarnation saves under ``output_dir/incarnation-N`` (the Trainer names folders by step alone),
  so no recorded checkpoint is ever overwritten.

Commands are obeyed between steps (``on_step_end`` polls the client): a halt waits for the
operator's release; a rollback stops the Trainer (nothing more is logged or saved) and
:func:`train_under_control` resumes through the Trainer's own restore path,
``trainer.train(resume_from_checkpoint=<target folder>)`` (model, optimizer, scheduler, RNG, data
position). ``RESTART_FROM_SCRATCH`` (and a restart from the base, which for this callback is the
pretrained model) reloads the weights the model had at the first ``on_train_begin`` and drops the
Trainer's optimizer and scheduler so they are built afresh. The client records ``RolledBack`` as
soon as the command is accepted; the Trainer does not take another step until the restore.

:func:`consume` reads another job's checkpoint folder through the load-time gate (PBT exploit,
INIT, MERGE, ...): refused when tainted or unknown, the folder's hash checked against the record,
then the weights applied and ``CheckpointConsumed`` recorded.

Rotation goes through the referee (SPEC §13): with ``save_total_limit`` set, the callback takes
the limit over from the Trainer (``args.save_total_limit`` is set to None at the first
``on_train_begin``) and applies it the Trainer's way — the newest checkpoints and the best one
are kept — but deletes an older folder only when the referee's last RetentionNotice lists it as
deletable, recording ``CheckpointDeleted`` first; what the referee keeps stays beyond the limit
until it becomes deletable, and with no notice (no settle horizon on the worker, the referee not
heard from) nothing is deleted. Metric direction is the user's: only the training loss of
the Trainer's logs is recorded as ``loss`` (``metric_for_best_model`` / ``greater_is_better``
decide nothing here; a NaN or infinite value of any logged or evaluated metric is a divergence).
When a rollback's target was rotated away (or changed), the newest surviving checkpoint of the
job's ancestry older than it is restored instead, or the pretrained model, and ``RolledBack``
names what was restored (the referee raises a ``RESTORE_SUBSTITUTED`` alert). Nothing of
traintrace's is raised out of ``train_under_control``: see ``callback.outcomes``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from streams.client.hashing import LoadedContent, hash_directory
from streams.client.restored import Restored
from streams.control.commands import ControlCommand
from streams.integrations.errors import IntegrationError, missing_framework
from streams.integrations.fallback import Ancestry, substitute
from streams.integrations.guard import DivergenceGuard
from streams.integrations.safety import Outcomes, after_run, never_raises

try:
    import torch
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise missing_framework("Hugging Face transformers", "hf", exc) from exc

from streams.integrations.store import checkpoint_id_of
from streams.integrations.torch import COPY_MODES, load_folder_stable, merge_weights

__all__ = ["TraintraceCallback", "base_model_of", "config_hash_of", "consume", "load_folder_weights",
           "train_under_control"]

log = logging.getLogger("traintrace.integrations.hf")

WEIGHTS_FILE = "model.safetensors"


def base_model_of(model: Any) -> str:
    """The ``base_model`` of a Hugging Face model: its config's ``name_or_path`` (the hub id or
    folder it was loaded from), else its ``model_type``."""
    config = getattr(model, "config", None)
    name = getattr(config, "name_or_path", "") or getattr(config, "model_type", "")
    if not name:
        raise IntegrationError(f"{type(model).__name__} has no config naming its base model: "
                               "pass base_model to the JobClient yourself")
    return str(name)


def config_hash_of(model: Any) -> str | None:
    """SHA-256 of the model config's JSON (sorted keys), or None without a config."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        return None
    text = json.dumps(config.to_dict(), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _complete(model: torch.nn.Module, weights: dict[str, Any], where: Path) -> dict[str, Any]:
    """``weights`` with the tied tensors ``save_pretrained`` leaves out (e.g. ``lm_head.weight``
    tied to the embeddings) filled in from the tensor they share storage with."""
    own = model.state_dict()
    unexpected = sorted(set(weights) - set(own))
    if unexpected:
        raise IntegrationError(f"{where} holds {len(unexpected)} tensor(s) the model lacks: {unexpected[:5]}")
    by_ptr = {t.data_ptr(): k for k, t in own.items() if k in weights}
    full = dict(weights)
    for k, t in own.items():
        if k not in full:
            twin = by_ptr.get(t.data_ptr())
            if twin is None:
                raise IntegrationError(f"{where} lacks the model's tensor {k!r}: not a checkpoint of this model")
            full[k] = weights[twin]
    return full


def load_folder_weights(folder: str | os.PathLike[str]) -> tuple[dict[str, Any], LoadedContent]:
    """The weights of a Trainer checkpoint folder (``model.safetensors``: no code runs), with
    the hash of the folder, taken before and after reading (they must agree)."""
    from safetensors.torch import load_file

    p = Path(folder)
    try:
        return load_folder_stable(p, lambda: load_file(str(p / WEIGHTS_FILE), device="cpu"))
    except FileNotFoundError as exc:
        raise IntegrationError(f"checkpoint folder {p} has no {WEIGHTS_FILE}: {exc}") from exc
    except (OSError, ValueError, RuntimeError) as exc:
        raise IntegrationError(f"checkpoint folder {p} cannot be read: {exc}") from exc


def _control(args, state, control, **kwargs):
    return control


class TraintraceCallback(TrainerCallback, Outcomes):
    """One job's record and control inside a Hugging Face ``Trainer``, around its
    :class:`~streams.client.JobClient` (see the module doc).

    ``halt_wait``: how long a halted job waits for its release (None: for ever; then the job
    stops, ``JobFinished`` CANCELLED); ``config_hash``: recorded in ``JobStarted`` (default: the
    hash of the model's config). The callback takes the client's ``on_rollback``. ``errors`` and
    ``outcomes`` say what failed on traintrace's side and what was done instead (a substituted
    restore, a stop): nothing of it is raised out of ``Trainer.train()``.
    """

    def __init__(self, client: Any, *, halt_wait: float | None = None, config_hash: str | None = None) -> None:
        self.client = client
        self.halt_wait = halt_wait
        self.config_hash = config_hash
        self.guard = DivergenceGuard(client)
        self.checkpoints: dict[str, tuple[Path, int, str]] = {}  # id -> (folder, step, hash)
        self.last_checkpoint_id: str | None = None
        self.restores: list[Restored] = []  # every restore accepted, in order
        self.pending: Restored | None = None  # accepted, not yet applied by train_under_control
        self.model: torch.nn.Module | None = None
        self._initial: dict[str, Any] | None = None
        self._output_root: Path | None = None  # args.output_dir at the first train begin
        self._last_logged = 0
        self.ancestry = Ancestry()  # this job's own checkpoints its weights descend from
        self.gave_up: str | None = None  # why the job stopped for good (JobFinished's status)
        #: ``save_total_limit`` taken over from the Trainer (None: the user set none)
        self.keep: int | None = None
        self.pruned: list[str] = []  # what the rotation deleted, in order
        self._best: Path | None = None  # state.best_model_checkpoint at the last save
        self._pruned_at: int | None = None  # the notice version the rotation last ran on
        self._init_outcomes()
        client.on_rollback = self._on_rollback

    def checkpoint_id(self, step: int) -> str:
        """``JOB-STEP`` in incarnation 0, ``JOB-STEP-iN`` after the N-th rollback."""
        inc = self.client.incarnation
        return checkpoint_id_of(self.client.job_id, step, inc)

    # -- the Trainer's events ---------------------------------------------------------------------

    @never_raises(_control)
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if args.logging_nan_inf_filter:
            log.info("traintrace: logging_nan_inf_filter switched off so that a NaN loss is logged")
            args.logging_nan_inf_filter = False
        self.model = model
        if args.save_total_limit is not None and hasattr(self.client, "deletable_checkpoints"):
            self.keep = int(args.save_total_limit)
            args.save_total_limit = None
            log.info("traintrace: save_total_limit=%d is applied through the referee: a checkpoint is deleted "
                     "only when it may be (SPEC §13)", self.keep)
        if self._output_root is None:
            self._output_root = Path(args.output_dir)
        if self._initial is None and model is not None:
            self._initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if not self.client.started:
            try:
                self.client.start(config_hash=self.config_hash or config_hash_of(model))
            except Exception as exc:  # noqa: BLE001 - no record, no concurrent training
                self.gave_up = "FAILED"
                self._stop(control)
                self.outcome(f"JobStarted could not be recorded ({exc}): training stopped "
                             "(no record, no concurrent training)")
                return control
        self._last_logged = state.global_step
        return control

    @never_raises(_control)
    def on_step_end(self, args, state, control, **kwargs):
        self.client.poll()
        if self.keep is not None and (self.client.retention or {}).get("version") != self._pruned_at:
            self.prune()
        if self.client.halted and not self.client.wait_while_halted(self.halt_wait):
            self.gave_up = "CANCELLED"
            self.outcome(f"halted ({self.client.halt}) and not released within {self.halt_wait} s: "
                         "training stopped")
        if self.pending is not None or self.guard.tripped or self.gave_up:
            self._stop(control)
        return control

    @never_raises(_control)
    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or self.pending is not None or self.guard.tripped:
            return control
        step = state.global_step
        if "loss" not in logs:  # an evaluation's metrics: no loss to record, but a NaN diverges
            if self.guard.check(step, None, metrics=logs):
                self._stop(control)
            return control
        loss = float(logs["loss"])  # the training loss, averaged over the logging window
        grad_norm = _float(logs.get("grad_norm"))
        self.client.progress(step, int(state.epoch or 0), loss, grad_norm, _float(logs.get("learning_rate")))
        onset = min(step, self._last_logged + 1)  # the logged loss averages (last log, step]
        self._last_logged = step
        if self.guard.check(onset, loss, grad_norm, metrics=logs):
            self._stop(control)
        return control

    @never_raises(_control)
    def on_save(self, args, state, control, **kwargs):
        step = state.global_step
        folder = Path(args.output_dir) / f"checkpoint-{step}"
        if self.pending is not None or self.guard.tripped:
            # a rollback was accepted (by a callback after ours) or the job diverged during this
            # step: these weights belong to the abandoned history; not recorded, nobody loads them
            log.info("traintrace: %s not recorded: a rollback is pending or the job diverged", folder)
            if self.keep is not None and folder.is_dir():  # rotation is ours: never a target, it goes
                import shutil

                shutil.rmtree(folder, ignore_errors=True)
            return control
        if not folder.is_dir():
            self.outcome(f"the Trainer's checkpoint {folder} is not there (output_dir shared, or a custom "
                         "Trainer saving elsewhere?): not recorded, nobody may load it")
            return control
        ck_id = self.checkpoint_id(step)
        h = self.client.checkpoint_written(ck_id, folder, step, int(state.epoch or 0))
        self.checkpoints[ck_id] = (folder, step, h)
        self.last_checkpoint_id = ck_id
        self.ancestry.wrote(ck_id, step)
        self._best = Path(state.best_model_checkpoint).resolve() if state.best_model_checkpoint else None
        if self.keep is not None:
            self.prune()
        return control

    def prune(self) -> list[str]:
        """``save_total_limit`` through the referee: of this job's checkpoint folders, keep the
        newest ``keep`` and the best (as the Trainer does), and delete the older ones the last
        RetentionNotice lists as deletable (``CheckpointDeleted`` recorded first). Returns what
        it deleted; a folder that cannot be removed is an outcome, never an exception."""
        import shutil

        keep = self.keep or 0
        self._pruned_at = (self.client.retention or {}).get("version")
        deletable = set(self.client.deletable_checkpoints())
        if not deletable:
            return []
        order = [c for c, (folder, _s, _h) in sorted(self.checkpoints.items(), key=lambda kv: kv[1][1])
                 if folder.is_dir()]
        best = next((c for c in order if self._best is not None and self.checkpoints[c][0].resolve() == self._best),
                    None)
        if best is not None and len(order) >= 2:  # the Trainer's rule: the best stays among the kept
            order.remove(best)
            order.insert(len(order) - 1, best)
        limit = 2 if keep == 1 and best is not None and order[-1] != best else keep
        protected = set(order[max(0, len(order) - limit):]) if limit else set()
        done: list[str] = []
        for ck_id in order:
            if ck_id in protected or ck_id not in deletable:
                continue
            folder = self.checkpoints[ck_id][0]
            try:
                if self.client.delete(ck_id, lambda f=folder: shutil.rmtree(f)):
                    done.append(ck_id)
            except Exception as exc:  # noqa: BLE001 - a deletion that failed keeps the folder
                self.outcome(f"rotation: {ck_id} ({folder}) not deleted: {exc}")
        self.pruned.extend(done)
        return done

    @never_raises(_control)
    def on_epoch_end(self, args, state, control, **kwargs):
        if self.pending is not None or self.guard.tripped:
            self._stop(control)
        return control

    @never_raises(_control)
    def on_train_end(self, args, state, control, **kwargs):
        """With ``load_best_model_at_end`` the Trainer ends on its best checkpoint's weights:
        that is the checkpoint ``JobFinished`` names."""
        if self.pending is None and not self.guard.tripped and args.load_best_model_at_end \
                and state.best_model_checkpoint:
            best = Path(state.best_model_checkpoint).resolve()
            for ck_id, (folder, _step, _h) in self.checkpoints.items():
                if folder.resolve() == best:
                    self.last_checkpoint_id = ck_id
        return control

    @staticmethod
    def _stop(control) -> None:
        control.should_training_stop = True
        control.should_save = control.should_log = control.should_evaluate = False

    # -- commands ---------------------------------------------------------------------------------

    def _usable(self, checkpoint_id: str) -> str | None:
        """Why ``checkpoint_id`` cannot be restored (None: it can)."""
        if checkpoint_id not in self.checkpoints:
            return "not a checkpoint this job wrote here"
        folder, _step, h = self.checkpoints[checkpoint_id]
        if not folder.is_dir():
            return f"{folder} was deleted (save_total_limit rotated it away?)"
        try:
            if hash_directory(folder) != h:
                return f"{folder} no longer has its recorded content (overwritten?)"
        except OSError as exc:
            return f"{folder} cannot be read: {exc}"
        return None

    def _on_rollback(self, cmd: ControlCommand) -> Restored:
        """Accept a rollback (before the client records ``RolledBack``) and stop the Trainer;
        :func:`train_under_control` restores. When the target is gone (rotated away, changed),
        the newest surviving checkpoint of the job's ancestry older than it is restored
        instead, or the pretrained model: the ``RolledBack`` names what is really restored."""
        sub = substitute(Restored.of(cmd), self.ancestry, self._usable)
        r = sub.restored
        if sub.reason is not None:
            self.outcome(f"rollback by command {cmd.command_id[:12]}: {sub.reason}")
        if r.checkpoint_id is not None:
            r = Restored(r.checkpoint_id, self.checkpoints[r.checkpoint_id][1])
        self.pending = r
        self.restores.append(r)
        self.ancestry.restored(r.checkpoint_id)
        self.last_checkpoint_id = r.checkpoint_id
        return r

    def wait_for_command(self, timeout: float = 120.0, interval: float = 0.2) -> bool:
        """After a divergence: poll until the referee's rollback is accepted (True) or ``timeout``
        (or a halt that is not released within ``halt_wait``: False)."""
        deadline = time.monotonic() + timeout
        while self.pending is None and time.monotonic() < deadline:
            self.client.poll(timeout=interval)
            if self.client.halted and not self.client.wait_while_halted(self.halt_wait):
                self.gave_up = "CANCELLED"
                self.outcome(f"halted ({self.client.halt}) and not released within {self.halt_wait} s")
                return False
        return self.pending is not None

    def prepare_restore(self, trainer: Any, restored: Restored, own_optimizer: bool = True) -> str | None:
        """Make ``trainer`` ready to train again as ``restored`` says; returns the folder to pass
        as ``resume_from_checkpoint`` (None: train from the pretrained weights, step 0).

        The next incarnation saves under ``output_dir/incarnation-N``: the Trainer names a folder
        by step alone, and a step trained again must not overwrite a recorded checkpoint."""
        if self._output_root is not None:
            trainer.args.output_dir = str(self._output_root / f"incarnation-{self.client.incarnation}")
        if restored.checkpoint_id is not None:
            return str(self.checkpoints[restored.checkpoint_id][0])
        trainer.model.load_state_dict(self._initial)
        if own_optimizer:  # the Trainer built them: it builds them afresh
            trainer.optimizer, trainer.lr_scheduler = None, None
        else:
            log.warning("traintrace: restart of %s keeps the optimizer you passed the Trainer: reset its "
                        "state yourself", self.client.job_id)
        return None

    def finish(self, status: str = "SUCCEEDED") -> None:
        """Record ``JobFinished`` (the checkpoint the job ended on) and close the client."""
        try:
            if self.client.started and not self.client.is_finished:
                self.client.finished(status, final_checkpoint_id=self.last_checkpoint_id)
        finally:
            self.client.close()


def _float(x: Any) -> float | None:
    return None if x is None else float(x)


def train_under_control(trainer: Any, callback: TraintraceCallback, *, command_timeout: float = 120.0,
                        finish: bool = True, **train_kwargs: Any) -> Any:
    """``trainer.train()`` under the referee's control: after a rollback stopped it, train again
    from the restored state (``resume_from_checkpoint`` of the target folder); after a divergence,
    wait up to ``command_timeout`` s for the referee's command (none: the job stops, ``JobFinished``
    FAILED, and ``callback.outcomes`` says why). At the end records ``JobFinished`` (``finish``).
    Returns the last ``TrainOutput``. Nothing of traintrace's is raised out of it: what went wrong
    on its side is in ``callback.errors`` / ``callback.outcomes`` (and the log); an exception of
    the training itself propagates, after ``JobFinished`` FAILED."""
    if callback not in trainer.callback_handler.callbacks:
        trainer.add_callback(callback)
    own_optimizer = trainer.optimizer is None
    resume = train_kwargs.pop("resume_from_checkpoint", None)
    status = "SUCCEEDED"
    try:
        while True:
            out = trainer.train(resume_from_checkpoint=resume, **train_kwargs)
            ended = after_run(callback, command_timeout, lambda: _safely(callback, callback.client.poll))
            if ended is not None:
                status = ended
                break
            restored, callback.pending = callback.pending, None
            if restored is None:
                break
            resume = callback.prepare_restore(trainer, restored, own_optimizer)
    except BaseException:
        if finish:
            _safely(callback, callback.finish, "FAILED")
        raise
    if finish:
        _safely(callback, callback.finish, status)
    return out


def _safely(callback: TraintraceCallback, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - never crash the user's experiment
        callback.outcome(f"{getattr(fn, '__name__', fn)} failed: {exc}")
        return None


def consume(source: Any, checkpoint_id: str, folder: str | os.PathLike[str], step: int, mode: str, *,
            model: torch.nn.Module | None = None, weight: float = 0.5) -> Any:
    """Consume another job's Trainer checkpoint ``folder`` (``checkpoint_id``) at this job's
    ``step`` in ``mode``, through the gate: ``source`` is the job's TraintraceCallback (its model
    is used) or JobClient (pass ``model``). INIT and PBT_EXPLOIT load the weights (the optimizer
    is the job's own), MERGE averages them in (``weight`` of the source), REFERENCE and DISTILL
    return a frozen copy holding them, EVAL_ONLY returns the weights. Raises GateRefused
    (nothing recorded, nothing applied)."""
    client = getattr(source, "client", source)
    model = model if model is not None else getattr(source, "model", None)
    if model is None:
        raise IntegrationError("consume needs the model: pass model= (or a callback after on_train_begin)")
    got: list[dict[str, Any]] = []

    def loader() -> LoadedContent:
        weights, content = load_folder_weights(folder)
        got.append(weights if mode == "EVAL_ONLY" else _complete(model, weights, Path(folder)))
        return content

    client.consumed(checkpoint_id, step, mode, load=loader)
    weights = got[0]
    if mode == "EVAL_ONLY":
        return weights
    if mode in COPY_MODES:
        model.load_state_dict(weights)
    elif mode == "MERGE":
        merge_weights(model, weights, weight)
    elif mode in ("REFERENCE", "DISTILL"):
        frozen = copy.deepcopy(model)
        frozen.load_state_dict(weights)
        frozen.eval().requires_grad_(False)
        return frozen
    return weights
