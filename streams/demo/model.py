"""A small real model and task for the demo cohort: numpy only, every step really computed.

The task is a synthetic 8-class classification problem drawn from a fixed seed (the whole cohort
shares it): inputs ``x ~ N(0, I)`` in 64 dimensions, labels sampled from a random two-layer
"teacher" network's softmax, so the best possible loss is well above zero (label noise keeps the
loss curve smooth, which matters to a spike detector). Each job sees the same training set in its
own order (``Task.batch(data_seed, step)``: a pure function of the step, so a job that rolls back
sees again the batches it saw then).

The model is a ReLU MLP (64 → 256 → 8, 18,696 parameters) whose parameters are one flat float32
vector (``theta``; float32 as in real training, which is also why a blown-up run reaches inf/NaN
within a few steps):
averaging, L2 distances and checkpoint bytes are then trivial. Training is plain SGD on
softmax cross-entropy, optionally plus a *reference-model* term ``coef · KL(p_ref ‖ p)`` that
pulls the model's predictions toward a reference model's (as in KL-regularised fine-tuning).

Every job of a cohort starts from the same *base model* (``base_theta``, a seeded init standing in
for a pretrained model): fine-tuned children of one base can be averaged (a "model soup") without
the loss jumping, which is what makes weight averaging between jobs meaningful.

A learning rate ×1000 makes the weights explode at once: the loss measured on the first blown-up
weights is hundreds of times the normal loss, and the weights overflow float32 to inf/NaN about a
dozen steps later (``tests/unit/test_training.py`` checks both).

Step convention (as in real trainers): the loss of step ``s`` is measured on the batch of step
``s`` with the weights *before* update ``s``, and the checkpoint "at step ``s``" holds the weights
*after* update ``s``. So a bad update ``u`` first shows in the loss of step ``u + 1``.

Checkpoints are ``.npy`` files of the flat ``<f4`` vector (``np.save``: a fixed header and the raw
little-endian bytes, no timestamps), written to a temporary file in the same directory and renamed
into place: identical weights give identical bytes, hence identical content hashes.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass

import numpy as np

from streams.files.atomic import atomic_write

__all__ = [
    "TaskConfig",
    "Task",
    "StepStats",
    "base_theta",
    "loss_and_grad",
    "predict_proba",
    "evaluate",
    "sgd_step",
    "average",
    "is_finite",
    "checkpoint_bytes",
    "save_checkpoint",
    "load_checkpoint",
    "content_hash",
]

_DTYPE = np.dtype("<f4")


@dataclass(frozen=True, slots=True)
class TaskConfig:
    """The cohort's task and model shape; ``seed`` fixes the data distribution and the base model."""

    seed: int = 7
    n_features: int = 64
    n_hidden: int = 256
    n_classes: int = 8
    n_train: int = 16384
    n_eval: int = 2048
    batch_size: int = 256
    teacher_hidden: int = 16
    teacher_scale: float = 3.0

    @property
    def n_params(self) -> int:
        d, h, c = self.n_features, self.n_hidden, self.n_classes
        return d * h + h + h * c + c


@dataclass(frozen=True, slots=True)
class StepStats:
    """One forward/backward pass: ``loss`` is the task loss (cross-entropy, what a job reports),
    ``total`` adds the reference term; ``grad_norm`` is the L2 norm of the full gradient."""

    loss: float
    total: float
    grad_norm: float


class Task:
    """The shared data set: a fixed training and evaluation set drawn from the cohort seed."""

    def __init__(self, config: TaskConfig | None = None) -> None:
        self.config = cfg = config or TaskConfig()
        rng = np.random.default_rng([cfg.seed, 0])
        a = rng.normal(0.0, 1.0 / np.sqrt(cfg.n_features), (cfg.n_features, cfg.teacher_hidden))
        b = rng.normal(0.0, 1.0 / np.sqrt(cfg.teacher_hidden), (cfg.teacher_hidden, cfg.n_classes))

        def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
            x = rng.normal(0.0, 1.0, (n, cfg.n_features))
            logits = cfg.teacher_scale * np.tanh(x @ a) @ b * np.sqrt(cfg.teacher_hidden)
            p = _softmax(logits)
            u = rng.random((n, 1))
            y = (p.cumsum(axis=1) < u).sum(axis=1).clip(0, cfg.n_classes - 1)
            return x.astype(_DTYPE), y.astype(np.int64)

        self.x_train, self.y_train = draw(cfg.n_train)
        self.x_eval, self.y_eval = draw(cfg.n_eval)
        self._perm_cache: dict[tuple[int, int], np.ndarray] = {}

    def epoch_of(self, step: int) -> int:
        """The epoch (pass over the training set) that training step ``step`` (1-based) is in."""
        return (max(step, 1) - 1) * self.config.batch_size // self.config.n_train

    def batch(self, data_seed: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The minibatch of training step ``step`` (1-based) for a job whose data order is
        ``data_seed``: each epoch is a fresh permutation of the training set."""
        cfg = self.config
        start = (max(step, 1) - 1) * cfg.batch_size
        epoch, offset = divmod(start, cfg.n_train)
        perm = self._perm(data_seed, epoch)
        idx = perm[offset:offset + cfg.batch_size]
        if idx.size < cfg.batch_size:  # the batch wraps into the next epoch
            idx = np.concatenate([idx, self._perm(data_seed, epoch + 1)[:cfg.batch_size - idx.size]])
        return self.x_train[idx], self.y_train[idx]

    def _perm(self, data_seed: int, epoch: int) -> np.ndarray:
        key = (data_seed, epoch)
        perm = self._perm_cache.get(key)
        if perm is None:
            if len(self._perm_cache) > 8:
                self._perm_cache.clear()
            perm = np.random.default_rng([self.config.seed, 1, data_seed, epoch]).permutation(
                self.config.n_train)
            self._perm_cache[key] = perm
        return perm


def _unpack(theta: np.ndarray, cfg: TaskConfig) -> tuple[np.ndarray, ...]:
    d, h, c = cfg.n_features, cfg.n_hidden, cfg.n_classes
    if theta.shape != (cfg.n_params,):
        raise ValueError(f"theta has shape {theta.shape}, the model needs ({cfg.n_params},)")
    at = (0, d * h, d * h + h, d * h + h + h * c, d * h + h + h * c + c)
    w1 = theta[at[0]:at[1]].reshape(d, h)
    b1 = theta[at[1]:at[2]]
    w2 = theta[at[2]:at[3]].reshape(h, c)
    b2 = theta[at[3]:at[4]]
    return w1, b1, w2, b2


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def base_theta(config: TaskConfig | None = None) -> np.ndarray:
    """The cohort's base model (He-initialised from the cohort seed): every job starts here, and
    ``RESTART_FROM_SCRATCH`` goes back here."""
    cfg = config or TaskConfig()
    rng = np.random.default_rng([cfg.seed, 2])
    d, h, c = cfg.n_features, cfg.n_hidden, cfg.n_classes
    parts = [
        rng.normal(0.0, np.sqrt(2.0 / d), d * h),
        np.zeros(h),
        rng.normal(0.0, np.sqrt(1.0 / h), h * c),
        np.zeros(c),
    ]
    return np.concatenate(parts).astype(_DTYPE)


def _forward(theta: np.ndarray, x: np.ndarray, cfg: TaskConfig):
    w1, b1, w2, b2 = _unpack(theta, cfg)
    z1 = x @ w1 + b1
    a1 = np.maximum(z1, 0.0)
    return z1, a1, a1 @ w2 + b2


def predict_proba(theta: np.ndarray, x: np.ndarray, config: TaskConfig | None = None) -> np.ndarray:
    """The model's class probabilities on ``x``."""
    cfg = config or TaskConfig()
    with np.errstate(all="ignore"):
        return _softmax(_forward(theta, x, cfg)[2])


def loss_and_grad(theta: np.ndarray, x: np.ndarray, y: np.ndarray, config: TaskConfig | None = None,
                  *, ref_probs: np.ndarray | None = None, ref_coef: float = 0.0
                  ) -> tuple[StepStats, np.ndarray]:
    """Cross-entropy of ``theta`` on the batch (plus ``ref_coef · KL(ref_probs ‖ p)``) and its
    gradient, by backpropagation. Overflow is not an error here: a diverging model gives inf/NaN,
    which is what the job's guard looks for."""
    cfg = config or TaskConfig()
    n = x.shape[0]
    w1, _b1, w2, _b2 = _unpack(theta, cfg)
    with np.errstate(all="ignore"):
        z1, a1, logits = _forward(theta, x, cfg)
        logp = _log_softmax(logits)
        p = np.exp(logp)
        ce = float(-logp[np.arange(n), y].mean())
        dlogits = p.copy()
        dlogits[np.arange(n), y] -= 1.0
        total = ce
        if ref_probs is not None and ref_coef:
            safe_ref = np.clip(ref_probs, 1e-12, 1.0)
            kl = float((ref_probs * (np.log(safe_ref) - logp)).sum(axis=1).mean())
            total = ce + ref_coef * kl
            dlogits += ref_coef * (p - ref_probs)
        dlogits /= n
        gw2 = a1.T @ dlogits
        gb2 = dlogits.sum(axis=0)
        da1 = dlogits @ w2.T
        dz1 = da1 * (z1 > 0.0)
        gw1 = x.T @ dz1
        gb1 = dz1.sum(axis=0)
        grad = np.concatenate([gw1.ravel(), gb1, gw2.ravel(), gb2])
        grad_norm = float(np.sqrt(np.dot(grad, grad)))
    return StepStats(loss=ce, total=total, grad_norm=grad_norm), grad


def evaluate(theta: np.ndarray, task: Task) -> tuple[float, float]:
    """(cross-entropy, accuracy) of ``theta`` on the held-out evaluation set."""
    cfg = task.config
    with np.errstate(all="ignore"):
        logp = _log_softmax(_forward(theta, task.x_eval, cfg)[2])
        n = task.y_eval.shape[0]
        ce = float(-logp[np.arange(n), task.y_eval].mean())
        acc = float((logp.argmax(axis=1) == task.y_eval).mean())
    return ce, acc


def sgd_step(theta: np.ndarray, grad: np.ndarray, lr: float) -> np.ndarray:
    """One SGD update (a new float32 vector; ``theta`` is left as it is)."""
    with np.errstate(all="ignore"):
        return (theta - np.float32(lr) * grad).astype(_DTYPE, copy=False)


def average(a: np.ndarray, b: np.ndarray, weight: float = 0.5) -> np.ndarray:
    """Weight averaging: ``(1 - weight) · a + weight · b``."""
    if a.shape != b.shape:
        raise ValueError(f"cannot average weights of shapes {a.shape} and {b.shape}")
    with np.errstate(all="ignore"):
        return ((1.0 - weight) * a + weight * b).astype(_DTYPE, copy=False)


def is_finite(*values: float) -> bool:
    return all(np.isfinite(v) for v in values)


def checkpoint_bytes(theta: np.ndarray) -> bytes:
    """The exact bytes of a checkpoint of ``theta``: an ``.npy`` file of one flat ``<f4`` vector."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(theta, dtype=_DTYPE), allow_pickle=False)
    return buf.getvalue()


def save_checkpoint(path: str | os.PathLike[str], theta: np.ndarray) -> str:
    """Write ``theta`` to ``path`` atomically (temporary file, fsync, rename) and return the
    content hash (hex SHA-256 of the bytes)."""
    data = checkpoint_bytes(theta)
    atomic_write(path, data)
    return hashlib.sha256(data).hexdigest()


def load_checkpoint(path: str | os.PathLike[str], config: TaskConfig | None = None) -> np.ndarray:
    """Read a checkpoint written by :func:`save_checkpoint` (checked against the model's shape)."""
    cfg = config or TaskConfig()
    theta = np.load(path, allow_pickle=False)
    if theta.dtype != _DTYPE or theta.shape != (cfg.n_params,):
        raise ValueError(f"{path}: not a checkpoint of this model "
                         f"(dtype {theta.dtype}, shape {theta.shape}; expected <f4 ({cfg.n_params},))")
    return theta


def content_hash(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes (what ``CheckpointWritten.content_hash`` carries)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
