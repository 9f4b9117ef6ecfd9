"""The demo's job on real PyTorch (``traintrace demo --framework torch``): the same cohort, the
same story, the same checks as the numpy demo, with every checkpoint, load and rollback going
through :class:`streams.integrations.torch.TorchLineage`.

The model is the numpy demo's MLP (:mod:`streams.demo.model`) as a ``torch.nn.Sequential``
started from the same base weights, trained by ``torch.optim.SGD`` on the same batches; the
training loop, the guard, the waits and the sharing schedule are the numpy job's
(:class:`streams.demo.jobs._TrainingJob`), whose model hooks this job overrides:

- a checkpoint is :meth:`TorchLineage.save` (``torch.save`` bytes into the cohort's
  ``cohort_dir/torch/``, hashed, ``CheckpointWritten``), then published in the cohort registry
  as the numpy job does, so peers find it;
- a share is :meth:`TorchLineage.load` (the gate, the hash of the bytes loaded, then
  ``CheckpointConsumed``; PBT_EXPLOIT copies, MERGE averages, REFERENCE gives a frozen model);
- a rollback is :meth:`TorchLineage.restore` (model and optimizer from the target checkpoint, or
  the start state for ``RESTART_FROM_SCRATCH``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from streams.client.restored import Restored
from streams.demo import model as M
from streams.demo.jobs import ClientFactory, JobResult, JobSpec, Share, _Reference, _TrainingJob
from streams.integrations.store import CheckpointStore

import torch  # noqa: E402 - after streams.demo (one BLAS thread per process)
from streams.integrations.torch import TorchLineage  # noqa: E402

__all__ = ["run_torch_job", "torch_mlp"]


def torch_mlp(theta: np.ndarray, cfg: M.TaskConfig) -> torch.nn.Sequential:
    """The demo's MLP as a torch module holding the flat weights ``theta``."""
    d, h, c = cfg.n_features, cfg.n_hidden, cfg.n_classes
    model = torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.ReLU(), torch.nn.Linear(h, c))
    w1 = theta[:d * h].reshape(d, h)
    b1 = theta[d * h:d * h + h]
    w2 = theta[d * h + h:d * h + h + h * c].reshape(h, c)
    b2 = theta[d * h + h + h * c:]
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(np.ascontiguousarray(w1.T)))
        model[0].bias.copy_(torch.from_numpy(b1.copy()))
        model[2].weight.copy_(torch.from_numpy(np.ascontiguousarray(w2.T)))
        model[2].bias.copy_(torch.from_numpy(b2.copy()))
    return model


class _TorchTrainingJob(_TrainingJob):
    def __init__(self, spec: JobSpec, client_factory: ClientFactory, *, cohort_dir: str | os.PathLike[str],
                 **kw: Any) -> None:
        super().__init__(spec, client_factory, cohort_dir=cohort_dir, **kw)
        self.lineage = TorchLineage(self.client, CheckpointStore(Path(cohort_dir) / "torch"), self.model,
                                    self.optimizer)
        self.lineage.capture_start_state()  # the base model: what RESTART_FROM_SCRATCH restores

    # -- the model hooks of _TrainingJob ------------------------------------------------------------

    def _init_model(self) -> None:
        torch.set_num_threads(1)
        self.model = torch_mlp(M.base_theta(self.cfg), self.cfg)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.spec.lr)

    def _logits(self, model: torch.nn.Module, x: np.ndarray) -> torch.Tensor:
        return model(torch.from_numpy(x))

    def _evaluate(self) -> tuple[float, float]:
        return self._evaluate_model(self.model)

    def _evaluate_model(self, model: torch.nn.Module) -> tuple[float, float]:
        with torch.no_grad():
            logits = self._logits(model, self.task.x_eval)
            y = torch.from_numpy(self.task.y_eval)
            ce = float(torch.nn.functional.cross_entropy(logits, y))
            acc = float((logits.argmax(dim=1) == y).float().mean())
        return ce, acc

    def _forward_backward(self, x: np.ndarray, y: np.ndarray) -> M.StepStats:
        self.optimizer.zero_grad()
        logp = torch.log_softmax(self._logits(self.model, x), dim=1)
        ce = torch.nn.functional.nll_loss(logp, torch.from_numpy(y))
        total = ce
        if self.reference is not None:
            with torch.no_grad():
                ref = torch.softmax(self._logits(self.reference.theta, x), dim=1)
            kl = (ref * (ref.clamp_min(1e-12).log() - logp)).sum(dim=1).mean()
            total = ce + self.reference.coef * kl
        total.backward()
        grads = [p.grad.flatten() for p in self.model.parameters() if p.grad is not None]
        grad_norm = float(torch.linalg.vector_norm(torch.cat(grads)))
        return M.StepStats(loss=float(ce), total=float(total), grad_norm=grad_norm)

    def _update(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()

    def _persist(self, ck_id: str, epoch: int) -> tuple[Path, str]:
        self.lineage.save(self.step, epoch, checkpoint_id=ck_id)
        saved = self.lineage.last_saved
        return saved.path.resolve(), saved.content_hash

    def _consume(self, ck_id: str, entry: dict[str, Any], share: Share) -> None:
        got = self.lineage.load(ck_id, self.step, share.mode, weight=share.weight)
        if share.mode == "REFERENCE":
            self.reference = _Reference(ck_id, got, share.weight)  # a frozen torch model
        elif share.mode == "EVAL_ONLY":
            peer = torch_mlp(M.base_theta(self.cfg), self.cfg)
            peer.load_state_dict(got.model)
            ev_loss, ev_acc = self._evaluate_model(peer)
            self.result.evaluations.append({"checkpoint_id": ck_id, "step": self.step,
                                            "eval_loss": ev_loss, "eval_accuracy": ev_acc})

    def _restore(self, cmd: Any) -> tuple[int, Any]:
        if cmd.action == "ROLLBACK" and cmd.target_checkpoint_id is None:
            raise ValueError(f"{self.spec.job_id}: ROLLBACK command {cmd.command_id} names no checkpoint")
        restored = Restored.of(cmd)
        self.lineage.restore(restored)
        own = self.own.get(restored.checkpoint_id) if restored.checkpoint_id else None
        return restored.step, own.reference if own is not None else None


def run_torch_job(spec: JobSpec, client_factory: ClientFactory, *, cohort_dir: str | os.PathLike[str],
                  nan_wait_s: float = 30.0, peer_wait_s: float = 60.0, halt_wait_s: float | None = 120.0,
                  poll_interval: float = 0.02, window: int = 10, spike_factor: float = 3.0,
                  task: M.Task | None = None) -> JobResult:
    """:func:`streams.demo.jobs.run_job` on PyTorch (same arguments, same result)."""
    job = _TorchTrainingJob(spec, client_factory, cohort_dir=cohort_dir, nan_wait_s=nan_wait_s,
                            peer_wait_s=peer_wait_s, halt_wait_s=halt_wait_s, poll_interval=poll_interval,
                            window=window, spike_factor=spike_factor, task=task)
    return job.run()
