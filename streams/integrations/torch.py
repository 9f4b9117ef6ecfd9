"""PyTorch: checkpoints that record themselves, loads through the gate, rollbacks that restore.

::

    import traintrace
    from traintrace.integrations.torch import TorchLineage

    client = traintrace.JobClient("A", "pbt-1", "tiny-mlp", journal_dir="runs/A",
                                  worker_url="http://127.0.0.1:6066")
    lineage = TorchLineage(client, "/shared/ckpts", model, optimizer, scheduler)
    lineage.start()
    step = 0
    while step < 1000:
        step = lineage.poll(step)           # a rollback restores everything and returns its step
        loss = train_one_step(...)
        lineage.progress(step, loss.item()) # a non-finite loss is reported and stops the job
        if step % 50 == 0:
            lineage.save(step)              # torch.save, hashed, CheckpointWritten
        if exploit:
            lineage.load("B-400", step, "PBT_EXPLOIT")   # gate, hash check, CheckpointConsumed
        step += 1
    lineage.finish()

What each part records (SPEC §4):

- :meth:`TorchLineage.save` serialises model, optimizer and scheduler state (and ``extra``) to
  bytes, writes them atomically to the cohort's :class:`~streams.integrations.store.CheckpointStore`
  (``ID.pt``, or with ``format="safetensors"`` a folder ``ID/`` holding ``model.safetensors`` and
  ``training_state.pt``), and records ``CheckpointWritten`` with the SHA-256 of exactly those
  bytes. Checkpoint ids are ``JOB-STEP`` in incarnation 0 and ``JOB-STEP-iN`` after the N-th
  rollback, so a step trained again after a rollback never reuses an id.
- :meth:`TorchLineage.load` asks the worker first (the load-time gate: tainted or unknown is
  refused with :class:`~streams.client.GateRefused`, except an ``EVAL_ONLY`` read of a tainted
  one), reads the bytes once, hashes them, deserialises those same bytes with
  ``weights_only=True`` (a peer's file never runs code here) and refuses a hash that differs
  from the recorded one; only then is ``CheckpointConsumed`` recorded with its mode, and the
  state applied as the mode says: ``INIT`` and ``PBT_EXPLOIT`` copy model, optimizer and
  scheduler; ``MERGE`` averages the weights (``weight`` of the source); ``REFERENCE`` and
  ``DISTILL`` return a frozen copy of the model holding the source's weights; ``EVAL_ONLY``
  returns the checkpoint untouched.
- A ``RollbackCommand`` (through :meth:`poll`) restores model, optimizer and scheduler from its
  target in the store — the base checkpoint for ``RESTART_FROM_BASE``, and for
  ``RESTART_FROM_SCRATCH`` the state the job had at :meth:`start` (the pretrained model, before
  any consumption) — and the client records ``RolledBack``. A halt waits in :meth:`poll` until
  an operator releases the job.
"""

from __future__ import annotations

import copy
import io
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from streams.client.hashing import LoadedContent, hash_directory
from streams.client.restored import Restored
from streams.control.commands import ControlCommand
from streams.files.atomic import atomic_write
from streams.integrations.errors import IntegrationError, missing_framework
from streams.integrations.fallback import Ancestry, substitute
from streams.integrations.guard import DivergenceGuard
from streams.integrations.safety import Outcomes
from streams.integrations.store import CheckpointStore, checkpoint_id_of

try:
    import torch
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise missing_framework("PyTorch", "torch", exc) from exc

__all__ = ["TorchCheckpoint", "TorchLineage", "checkpoint_bytes", "merge_weights", "read_checkpoint"]

MODEL_FILE = "model.safetensors"
STATE_FILE = "training_state.pt"
FORMATS = ("torch", "safetensors")
#: the modes that copy the whole training state (weights, optimizer, scheduler)
COPY_MODES = ("INIT", "PBT_EXPLOIT")


@dataclass
class TorchCheckpoint:
    """A checkpoint as loaded: the model's state dict, and the optimizer's and scheduler's when
    it holds them; ``step``, ``epoch`` and ``extra`` as saved."""

    model: dict[str, Any]
    optimizer: dict[str, Any] | None = None
    scheduler: dict[str, Any] | None = None
    step: int = 0
    epoch: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    checkpoint_id: str | None = None
    content_hash: str | None = None


def checkpoint_bytes(model: torch.nn.Module, optimizer=None, scheduler=None, *, step: int = 0,
                     epoch: int = 0, extra: dict[str, Any] | None = None) -> bytes:
    """The one-file checkpoint (``torch.save`` of a plain dict) as bytes."""
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(),
                "optimizer": optimizer.state_dict() if optimizer is not None else None,
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "step": step, "epoch": epoch, "extra": dict(extra or {})}, buf)
    return buf.getvalue()


def _from_dict(d: Any, where: Path) -> TorchCheckpoint:
    if not isinstance(d, dict) or "model" not in d:
        raise IntegrationError(f"{where} is not a traintrace torch checkpoint (no 'model' state)")
    return TorchCheckpoint(d["model"], d.get("optimizer"), d.get("scheduler"), int(d.get("step") or 0),
                           int(d.get("epoch") or 0), dict(d.get("extra") or {}))


def load_file_once(path: Path) -> tuple[Any, LoadedContent]:
    """``torch.load`` of a file's bytes read once (``weights_only``: no code runs), with the
    hash of those very bytes. Library errors propagate (the caller names the checkpoint)."""
    data = path.read_bytes()
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True), LoadedContent.of_bytes(path, data)


def load_folder_stable(folder: Path, read: Callable[[], Any]) -> tuple[Any, LoadedContent]:
    """``read()`` a checkpoint folder, with the tree hash taken before and after (they must
    agree: the folder did not change while it was read)."""
    before = hash_directory(folder)
    got = read()
    after = hash_directory(folder)
    if after != before:
        raise IntegrationError(f"checkpoint folder {folder} changed while it was read: try again")
    return got, LoadedContent(folder, after)


def read_checkpoint(path: str | os.PathLike[str]) -> tuple[TorchCheckpoint, LoadedContent]:
    """Load the checkpoint at ``path`` (file or safetensors folder) without running code
    (``weights_only``); with the content hash of exactly what was deserialised (for a file:
    the bytes read once; for a folder: the tree hashed before and after, which must agree)."""
    p = Path(path)
    try:
        if p.is_dir():
            from safetensors.torch import load_file

            def read() -> dict[str, Any]:
                state = torch.load(p / STATE_FILE, map_location="cpu", weights_only=True)
                return {**state, "model": load_file(str(p / MODEL_FILE), device="cpu")}

            state, content = load_folder_stable(p, read)
            return _from_dict(state, p), content
        state, content = load_file_once(p)
        return _from_dict(state, p), content
    except FileNotFoundError as exc:
        raise IntegrationError(f"checkpoint {p} is not there: {exc}") from exc
    except (RuntimeError, ValueError, OSError, EOFError) as exc:
        raise IntegrationError(f"checkpoint {p} cannot be loaded: {exc}") from exc


def merge_weights(model: torch.nn.Module, source: dict[str, Any], weight: float = 0.5) -> None:
    """Average ``source`` into ``model`` in place: floating point tensors become
    ``(1 - weight) * own + weight * source``; others (integer buffers) are kept."""
    if not 0.0 <= weight <= 1.0:
        raise IntegrationError(f"merge weight must be within [0, 1], got {weight}")
    own = model.state_dict()
    missing = sorted(set(own) - set(source))
    if missing:
        raise IntegrationError(f"the merged checkpoint lacks {len(missing)} tensor(s) of the model: {missing[:5]}")
    with torch.no_grad():
        for name, t in own.items():
            if torch.is_floating_point(t):
                t.mul_(1.0 - weight).add_(source[name].to(t.dtype), alpha=weight)


class TorchLineage(Outcomes):
    """One job's PyTorch side of the record, around its :class:`~streams.client.JobClient`.

    ``store``: the cohort's checkpoint directory (a path or a CheckpointStore); ``model``,
    ``optimizer``, ``scheduler``: what a save holds and a rollback restores; ``format``:
    ``"torch"`` (one file) or ``"safetensors"`` (a folder); ``halt_wait``: how long
    :meth:`poll` waits for an operator to release a halted job (None: for ever).

    The lineage becomes the client's ``on_rollback`` unless the client has one already (then
    that callback may call :meth:`on_rollback` or :meth:`restore`); ``on_restored(restored)`` is
    called after each restore (a framework resets its own loop).
    """

    def __init__(self, client: Any, store: str | os.PathLike[str] | CheckpointStore,
                 model: torch.nn.Module, optimizer: Any = None, scheduler: Any = None, *,
                 format: str = "torch", halt_wait: float | None = None,
                 on_restored: Callable[[Restored], None] | None = None, keep: int | None = None) -> None:
        if format not in FORMATS:
            raise IntegrationError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
        self.client = client
        self.store = store if isinstance(store, CheckpointStore) else CheckpointStore(store)
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        if keep is not None and keep < 0:
            raise IntegrationError(f"keep must be None (keep everything) or >= 0, got {keep}")
        self.format = format
        #: rotation (SPEC §13): after each save, delete this job's checkpoints beyond the newest
        #: ``keep`` that the referee marked deletable (:meth:`prune`); None: delete nothing
        self.keep = keep
        self.pruned: list[str] = []  # what prune() deleted, in order
        self.halt_wait = halt_wait
        self.on_restored = on_restored
        self.guard = DivergenceGuard(client)
        self.base_checkpoint_id: str | None = None
        self.last_checkpoint_id: str | None = None
        self.restored: Restored | None = None  # the last restore, until poll() hands it over
        self.last_saved: LoadedContent | None = None  # where the last save went, and its hash
        self._initial: TorchCheckpoint | None = None
        self.ancestry = Ancestry()  # this job's own checkpoints its weights descend from
        self.written: dict[str, str] = {}  # checkpoint id -> content hash, this process
        self._init_outcomes()
        if getattr(client, "on_rollback", None) is None:  # else the job wired on_rollback itself
            client.on_rollback = self.on_rollback

    # -- the record -------------------------------------------------------------------------------

    def start(self, base_checkpoint_id: str | None = None, config_hash: str | None = None) -> None:
        """Record ``JobStarted``; with ``base_checkpoint_id`` the job starts from that checkpoint
        of the store (gated, hash-checked, then loaded into model, optimizer and scheduler).
        The state at this point is what ``RESTART_FROM_SCRATCH`` goes back to."""
        self.capture_start_state()
        self.base_checkpoint_id = base_checkpoint_id
        self.client.start(base_checkpoint_id=base_checkpoint_id, config_hash=config_hash)
        if base_checkpoint_id is not None:
            ck, _ = read_checkpoint(self.store.locate(base_checkpoint_id))
            self._apply_all(ck)

    def capture_start_state(self) -> None:
        """Remember the current state as what ``RESTART_FROM_SCRATCH`` restores (:meth:`start`
        does this; a job that records ``JobStarted`` itself calls it first)."""
        self._initial = self._snapshot()

    def checkpoint_id(self, step: int) -> str:
        inc = self.client.incarnation
        return checkpoint_id_of(self.client.job_id, step, inc)

    def progress(self, step: int, loss: float, epoch: int = 0, grad_norm: float | None = None,
                 lr: float | None = None) -> bool:
        """Record ``Progress`` (``lr`` defaults to the optimizer's first group's); a non-finite
        loss or grad norm is also reported as a divergence. Returns whether training may go on
        (False once this incarnation diverged: wait for the referee in :meth:`poll`)."""
        if lr is None and self.optimizer is not None and self.optimizer.param_groups:
            lr = float(self.optimizer.param_groups[0].get("lr", math.nan))
        self.client.progress(step, epoch, float(loss), grad_norm, lr)
        return not self.guard.check(step, float(loss), grad_norm)

    def save(self, step: int, epoch: int = 0, extra: dict[str, Any] | None = None,
             checkpoint_id: str | None = None) -> str:
        """Write a checkpoint of model, optimizer and scheduler to the store and record it;
        returns its id."""
        ck_id = checkpoint_id or self.checkpoint_id(step)
        if self.format == "torch":
            data = checkpoint_bytes(self.model, self.optimizer, self.scheduler, step=step, epoch=epoch,
                                    extra=extra)
            path = self.store.file(ck_id)
            atomic_write(path, data)
            content = LoadedContent.of_bytes(path, data)
        else:
            content = self._save_folder(ck_id, step, epoch, extra)
        self.client.checkpoint_written(ck_id, content.path, step, epoch, content_hash=content.content_hash)
        self.last_checkpoint_id, self.last_saved = ck_id, content
        self.written[ck_id] = content.content_hash
        self.ancestry.wrote(ck_id, step)
        if self.keep is not None:
            self.prune()
        return ck_id

    def prune(self, keep: int | None = None) -> list[str]:
        """Rotate through the referee (SPEC §13): delete this job's checkpoints that the last
        RetentionNotice lists as deletable, except the newest ``keep`` (default: the lineage's
        ``keep``, else 0); each deletion is recorded (``CheckpointDeleted``) before its files go.
        Whatever the referee keeps stays, beyond the limit, until it becomes deletable; with no
        notice (no settle horizon, the referee not heard from) nothing is deleted. Never raises
        for a file that cannot be removed (an outcome says so). Returns what it deleted."""
        keep = self.keep if keep is None else keep
        keep = keep or 0
        client = self.client
        deletable = client.deletable_checkpoints() if hasattr(client, "deletable_checkpoints") else []
        if not deletable:
            return []
        order = [c for c in deletable if c not in self.written] + list(self.written)
        protected = set(order[max(0, len(order) - keep):]) if keep else set()
        done: list[str] = []
        for ck_id in deletable:
            if ck_id in protected:
                continue
            try:
                if client.delete(ck_id, lambda c=ck_id: self.store.remove(c)):
                    done.append(ck_id)
                    self.written.pop(ck_id, None)
            except Exception as exc:  # noqa: BLE001 - a deletion that failed keeps the files: never crash
                self.outcome(f"prune: {ck_id} not deleted: {exc}")
        self.pruned.extend(done)
        return done

    def _save_folder(self, ck_id: str, step: int, epoch: int, extra: dict[str, Any] | None) -> LoadedContent:
        from safetensors.torch import save as st_save

        final = self.store.folder(ck_id)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{ck_id}.", dir=final.parent))
        try:
            weights = {k: v.detach().contiguous().cpu() for k, v in self.model.state_dict().items()}
            atomic_write(tmp / MODEL_FILE, st_save(weights))
            buf = io.BytesIO()
            torch.save({"optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
                        "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
                        "step": step, "epoch": epoch, "extra": dict(extra or {})}, buf)
            atomic_write(tmp / STATE_FILE, buf.getvalue())
            h = hash_directory(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return LoadedContent(final, h)

    def load(self, checkpoint_id: str, step: int, mode: str, *, weight: float = 0.5) -> Any:
        """Consume another job's checkpoint in ``mode`` at this job's ``step`` (see the module
        doc for what each mode does); returns the TorchCheckpoint, or for ``REFERENCE`` and
        ``DISTILL`` the frozen model. Raises GateRefused when the gate refuses (nothing recorded,
        nothing applied)."""
        path = self.store.locate(checkpoint_id)
        got: list[TorchCheckpoint] = []

        def loader() -> LoadedContent:
            ck, content = read_checkpoint(path)
            got.append(ck)
            return content

        h = self.client.consumed(checkpoint_id, step, mode, load=loader)
        ck = got[0]
        ck.checkpoint_id, ck.content_hash = checkpoint_id, h
        if mode in COPY_MODES:
            self._apply_all(ck)
        elif mode == "MERGE":
            merge_weights(self.model, ck.model, weight)
        elif mode in ("REFERENCE", "DISTILL"):
            frozen = copy.deepcopy(self.model)
            frozen.load_state_dict(ck.model)
            frozen.eval()
            for p in frozen.parameters():
                p.requires_grad_(False)
            return frozen
        return ck

    def finish(self, status: str = "SUCCEEDED") -> None:
        """Record ``JobFinished`` (with the last checkpoint saved) and close the client."""
        self.client.finished(status, final_checkpoint_id=self.last_checkpoint_id)
        self.client.close()

    # -- control ----------------------------------------------------------------------------------

    def poll(self, step: int | None = None) -> int | None:
        """Apply the referee's commands (between steps): returns the step to go on from — the
        restored step after a rollback, else ``step``. A halted job waits here until released
        (``halt_wait`` seconds at most; then IntegrationError)."""
        self.client.poll()
        if self.client.halted and not self.client.wait_while_halted(self.halt_wait):
            raise IntegrationError(f"job {self.client.job_id!r} is halted ({self.client.halt}) "
                                   f"and was not released within {self.halt_wait} s")
        if self.restored is not None:
            restored, self.restored = self.restored, None
            return restored.step
        return step

    def wait_for_command(self, timeout: float = 60.0, interval: float = 0.2) -> bool:
        """After a divergence: wait for the referee's rollback (True when one was applied)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.client.poll(timeout=interval)
            if self.restored is not None:
                return True
            if self.client.halted:
                self.poll()
        return False

    def restore(self, restored: Restored) -> None:
        """Restore model, optimizer and scheduler as ``restored`` says (checkpoint, base, or the
        start state for from-scratch)."""
        if restored.from_scratch:
            if self._initial is None:
                raise IntegrationError("RESTART_FROM_SCRATCH before start(): no start state to go back to")
            self._apply_all(self._initial)
        else:
            target = restored.checkpoint_id or self.base_checkpoint_id
            if target is None:
                if self._initial is None:
                    raise IntegrationError("a restart from the base before start()")
                self._apply_all(self._initial)  # no base checkpoint: the base is the start state
            else:
                ck, _ = read_checkpoint(self.store.locate(target))
                self._apply_all(ck)
        self.restored = restored
        if self.on_restored is not None:
            self.on_restored(restored)

    def on_rollback(self, cmd: ControlCommand) -> Restored:
        """The client's ``on_rollback``: restore what ``cmd`` asks, say what was restored. A
        target that is gone or changed (a user's own rotation deleted it) is replaced by the
        newest surviving checkpoint of the job's ancestry older than it, else the base."""
        sub = substitute(Restored.of(cmd), self.ancestry, self._usable)
        if sub.reason is not None:
            self.outcome(f"rollback by command {cmd.command_id[:12]}: {sub.reason}")
        self.restore(sub.restored)
        self.ancestry.restored(sub.restored.checkpoint_id)
        return sub.restored

    def _usable(self, checkpoint_id: str) -> str | None:
        """Why ``checkpoint_id`` cannot be restored (None: it can)."""
        return self.store.unusable(checkpoint_id, self.written.get(checkpoint_id))

    # -- state ------------------------------------------------------------------------------------

    def _snapshot(self) -> TorchCheckpoint:
        return TorchCheckpoint(copy.deepcopy(self.model.state_dict()),
                               copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None,
                               copy.deepcopy(self.scheduler.state_dict()) if self.scheduler is not None else None)

    def _apply_all(self, ck: TorchCheckpoint) -> None:
        self.model.load_state_dict(ck.model)
        if self.optimizer is not None and ck.optimizer is not None:
            self.optimizer.load_state_dict(ck.optimizer)
        if self.scheduler is not None and ck.scheduler is not None:
            self.scheduler.load_state_dict(ck.scheduler)
