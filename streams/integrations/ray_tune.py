"""Ray Tune population-based training: every trial a job, every exploit recorded, through the gate.

PBT's exploit step copies one trial's checkpoint into another: the very sharing the lineage
exists to record. :class:`LineagePBT` is Ray's ``PopulationBasedTraining`` with the lineage's part
done in the Tune driver, so the trainable is the user's own, unchanged::

    from ray import tune
    from traintrace.integrations.ray import LineagePBT

    pbt = LineagePBT(journal_dir="runs/journals", cohort="pbt-1", base_model="tiny-mlp",
                     client_kwargs={"worker_url": "http://127.0.0.1:6066"},
                     time_attr="training_iteration", perturbation_interval=2,
                     hyperparam_mutations={"lr": tune.loguniform(1e-4, 1e-1)})
    tuner = tune.Tuner(train_fn, param_space={"lr": tune.loguniform(1e-4, 1e-1)},
                       tune_config=tune.TuneConfig(scheduler=pbt, metric="loss", mode="min",
                                                   num_samples=4))
    tuner.fit()

What it records (SPEC §4), one :class:`~streams.client.JobClient` per trial living in the driver
(job id: the trial id; cohort: ``cohort`` or the experiment's directory name):

- ``JobStarted`` when Tune adds the trial; each result is ``Progress`` (step: the
  ``training_iteration``; loss: ``loss_metric``, by default PBT's ``metric``); a non-finite loss
  is a ``DivergenceReported`` at once (:class:`~streams.integrations.guard.DivergenceGuard`), and
  the trial is paused until the referee says what to do.
- A result that carries a checkpoint (``tune.report(..., checkpoint=...)``) is
  ``CheckpointWritten`` of the persisted directory (:func:`~streams.client.hashing.hash_directory`)
  *before* PBT decides on that result, so a trial's own checkpoint precedes its exploit. Ids are
  ``TRIAL-ITER``, ``-iN`` after the N-th rollback and ``-xK`` after the K-th exploit (an exploit
  resets Tune's iteration counter, and an id is never written twice).
- Every exploit is ``CheckpointConsumed(PBT_EXPLOIT)`` of exactly the checkpoint Ray restores
  into the trial, at the trial's iteration: the load-time gate is asked first and the hash of
  that directory checked against the record. A tainted or unknown source is refused, and the
  exploit goes to another trial of the upper quantile (or is skipped when none is clean).
- The referee's commands are obeyed between results: a rollback pauses the trial and restores it
  through Ray's own restore path (the trial's latest checkpoint set to the target, with the
  config it had, as PBT's exploit does; to no checkpoint for a restart from the base), then the
  client records ``RolledBack``; a halt pauses the trial until an operator releases it.
- A completed trial is ``JobFinished`` (``SUCCEEDED``, ``FAILED`` on an error, ``CANCELLED``
  when Tune removes it unfinished).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import math
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from streams.client.errors import GateRefused
from streams.client.hashing import LoadedContent, hash_directory
from streams.client.restored import Restored
from streams.control.commands import ControlCommand
from streams.integrations.errors import IntegrationError, missing_framework
from streams.integrations.fallback import Ancestry, substitute
from streams.integrations.guard import DivergenceGuard
from streams.integrations.store import checkpoint_id_of

try:
    from ray.train._internal.session import _FutureTrainingResult, _TrainingResult
    from ray.tune import Checkpoint
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import PopulationBasedTraining, TrialScheduler
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise missing_framework("Ray Tune", "ray", exc) from exc

__all__ = ["LineagePBT", "TrialJob"]

log = logging.getLogger("traintrace.integrations.ray")
ITERATION = "training_iteration"
CHECKPOINT_DIR = "checkpoint_dir_name"


@dataclass
class _Written:
    """A checkpoint recorded: where it is, the result it was reported with, the trial's config,
    its step (the trial's iteration) and content hash."""

    trial_id: str
    path: str
    metrics: dict[str, Any]
    config: dict[str, Any]
    step: int = 0
    content_hash: str = ""


@dataclass
class TrialJob:
    """One trial's side of the record: its client, its guard, and what the driver knows of it."""

    trial: Any
    client: Any
    guard: DivergenceGuard
    exploits: int = 0
    last_result: tuple | None = None
    last_checkpoint_id: str | None = None
    held_since: float | None = None  # paused for the referee (diverged) or an operator (halted)
    restores: list[Restored] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # exploit sources the gate refused
    consumed: list[str] = field(default_factory=list)  # exploit sources recorded, in order
    #: the trial's own checkpoints its current weights descend from (SPEC §7's ancestry), oldest first
    ancestry: Ancestry = field(default_factory=Ancestry)
    #: what went wrong on our side and what was done instead, e.g. "restore-substituted: ..."
    outcomes: list[str] = field(default_factory=list)
    #: Tune's ``CheckpointConfig.num_to_keep``, taken over (None: the user set none)
    keep: int | None = None
    #: its ``checkpoint_score_attribute`` and ``checkpoint_score_order`` (None: by recency)
    score_attr: str | None = None
    score_max: bool = True
    #: the checkpoints the rotation deleted, in order; the notice version it last ran on
    pruned: list[str] = field(default_factory=list)
    rotated_at: int | None = None

    @property
    def job_id(self) -> str:
        return self.client.job_id


def _safe(default: Any = None) -> Callable:
    """A scheduler hook that never raises into Tune: a failure of ours is logged and counted
    (``LineagePBT.errors``) and the hook returns ``default`` — or, for the hooks that must
    answer Tune, what plain PBT would (the ``fallback`` method)."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def hook(self: "LineagePBT", *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - never crash the user's experiment
                self.errors += 1
                log.exception("traintrace: %s failed (%s): the experiment goes on", fn.__name__, exc)
                fallback = getattr(super(LineagePBT, self), fn.__name__, None)
                if fallback is None or default is not _PLAIN_PBT:
                    return default
                try:  # PBT's own bookkeeping still runs (it may have failed inside it: then not again)
                    return fallback(*args, **kwargs)
                except Exception:  # noqa: BLE001
                    log.exception("traintrace: PopulationBasedTraining.%s failed too", fn.__name__)
                    return None
        return hook
    return wrap


_PLAIN_PBT = object()  # a hook's default: what PopulationBasedTraining itself does


class LineagePBT(PopulationBasedTraining):
    """``PopulationBasedTraining`` that records every trial (see the module doc).

    ``journal_dir``: each trial's client journal lives in ``journal_dir/TRIAL``; ``cohort``: the
    cohort id (default: the experiment's directory name); ``base_model``: what ``JobStarted``
    names; ``client_kwargs``: passed to each ``JobClient`` (``bootstrap``, ``topics``,
    ``worker_url`` for the gate, ``trusted_keys``…) or ``client_factory(job_id, cohort,
    base_model)`` builds the client itself; ``loss_metric``: the result key recorded as the
    training loss (see :meth:`loss_key`; ``False``: never record a loss); ``hold_timeout``:
    seconds a trial waits for the referee or an operator before it is stopped (None: for ever).
    Every other argument is PBT's.
    """

    def __init__(self, *, journal_dir: str | os.PathLike[str] | None = None, cohort: str | None = None,
                 base_model: str = "ray-trial", client_kwargs: dict[str, Any] | None = None,
                 client_factory: Callable[[str, str, str], Any] | None = None,
                 loss_metric: str | bool | None = None, hold_timeout: float | None = 600.0, **pbt: Any) -> None:
        if journal_dir is None and client_factory is None:
            raise IntegrationError("LineagePBT needs journal_dir= (or client_factory=) "
                                   "for the trials' journals")
        if loss_metric is True or (loss_metric is not None and loss_metric is not False
                                   and not isinstance(loss_metric, str)):
            raise IntegrationError(f"loss_metric must be a result key, False or None, got {loss_metric!r}")
        super().__init__(**pbt)
        self.journal_dir = Path(journal_dir) if journal_dir is not None else None
        self.cohort = cohort
        self.base_model = base_model
        self.client_kwargs = dict(client_kwargs or {})
        self.client_factory = client_factory
        self.loss_metric = loss_metric
        self.hold_timeout = hold_timeout
        self.jobs: dict[str, TrialJob] = {}
        self.checkpoints: dict[str, _Written] = {}   # checkpoint id -> where and what
        self._by_path: dict[str, str] = {}           # resolved directory -> checkpoint id
        self._controller: Any = None
        self.unrecorded: set[str] = set()  # trials whose client could not start: stopped
        self.errors = 0  # failures of ours, logged, that the experiment went on through

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles its config: no clients, no threads
        state = self.__dict__.copy()
        state.update(jobs={}, checkpoints={}, _by_path={}, _controller=None)
        return state

    # -- the record -------------------------------------------------------------------------------

    def loss_key(self, result: dict[str, Any]) -> str | None:
        """The result key recorded as ``Progress.loss``, or None (progress without a loss).

        Only a training loss, lower when better, is a loss: ``loss_metric`` when given (False:
        never); else the trainable's own ``loss`` when it reports one; else PBT's ``metric`` when
        PBT minimises it (``mode="min"``) and its name says it is a loss (``loss``,
        ``mean_loss``, ``train_loss``...). An accuracy, a reward or a score that PBT maximises
        (``mode="max"``) never feeds the processor's spike rule; a non-finite value of any
        reported metric is still a divergence."""
        if self.loss_metric is False:
            return None
        if isinstance(self.loss_metric, str):
            return self.loss_metric if self.loss_metric in result else None
        if "loss" in result:
            return "loss"
        metric = self._metric
        if metric and self._mode == "min" and "loss" in metric.lower() and metric in result:
            return metric
        return None

    def _client(self, trial: Trial) -> Any:
        cohort = self.cohort or trial.storage.experiment_dir_name
        if self.client_factory is not None:
            return self.client_factory(trial.trial_id, cohort, self.base_model)
        from streams.client.job import JobClient

        return JobClient(trial.trial_id, cohort, self.base_model,
                         journal_dir=self.journal_dir / trial.trial_id, **self.client_kwargs)

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        super().on_trial_add(tune_controller, trial)
        try:
            client = self._client(trial)
            job = TrialJob(trial, client, DivergenceGuard(client))
            client.on_rollback = lambda cmd, job=job: self._rollback(job, cmd)
            client.on_halt = lambda cmd, job=job: self._hold(job)
            client.start()
            self._take_rotation(job, trial)
        except Exception as exc:  # noqa: BLE001 - no record, no concurrent training: stop the trial
            self.errors += 1
            self.unrecorded.add(trial.trial_id)
            log.error("traintrace: trial %s cannot be recorded (%s): it will be stopped at its first result "
                      "(no record, no concurrent training)", trial.trial_id, exc)
            return
        self.jobs[trial.trial_id] = job

    def checkpoint_id(self, job: TrialJob, iteration: int) -> str:
        inc = job.client.incarnation
        return (checkpoint_id_of(job.job_id, iteration, inc)
                + (f"-x{job.exploits}" if job.exploits else ""))

    def _written(self, job: TrialJob, path: str, metrics: dict[str, Any]) -> str:
        """Record the checkpoint directory ``path`` of ``job`` once; its id. A directory seen again
        with another iteration holds a new checkpoint (Tune wrote into a directory it had used,
        :meth:`_past_written_checkpoints`): that one is recorded too, never taken for the old."""
        key = str(Path(path).resolve())
        iteration = int(metrics.get(ITERATION, 0))
        seen = self._by_path.get(key)
        if seen is not None:
            if ITERATION not in metrics or self.checkpoints[seen].step == iteration:
                return seen  # the same checkpoint (a result without an iteration says nothing else)
            job.outcomes.append(f"checkpoint-overwritten: {seen} (its directory now holds iteration {iteration})")
            log.error("traintrace: trial %s wrote iteration %d into %s, the directory of its checkpoint %s: "
                      "that checkpoint is gone", job.job_id, iteration, path, seen)
        ck_id = self.checkpoint_id(job, iteration)
        try:
            h = hash_directory(path)
        except OSError as exc:
            raise IntegrationError(f"checkpoint {path} of trial {job.job_id} cannot be read: {exc}") from exc
        job.client.checkpoint_written(ck_id, path, iteration, 0, content_hash=h)
        self._by_path[key] = ck_id
        self.checkpoints[ck_id] = _Written(job.job_id, path, dict(metrics), copy.deepcopy(job.trial.config),
                                           iteration, h)
        job.last_checkpoint_id = ck_id
        job.ancestry.wrote(ck_id, iteration)
        return ck_id

    def _record(self, job: TrialJob, result: dict[str, Any]) -> None:
        """``Progress`` (and the divergence guard), then the result's checkpoint; once per result."""
        key = (result.get(ITERATION), result.get("time_total_s"), result.get(CHECKPOINT_DIR))
        if key == job.last_result or ITERATION not in result:
            return
        job.last_result = key
        step = int(result[ITERATION])
        name = self.loss_key(result)
        loss = _number(result.get(name)) if name is not None else None
        job.client.progress(step, 0, loss)
        job.guard.check(step, loss, metrics={k: v for k, v in result.items() if k != name})
        if result.get(CHECKPOINT_DIR):
            path = os.path.join(job.trial.path, result[CHECKPOINT_DIR])
            try:
                self._written(job, path, result)
            except IntegrationError as exc:
                job.outcomes.append(f"checkpoint-unrecorded: {exc}")
                log.error("traintrace: %s: not recorded (a checkpoint nobody may load)", exc)

    @_safe(TrialScheduler.CONTINUE)
    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        self._controller = tune_controller
        job = self.jobs.get(trial.trial_id)
        if job is None:
            if trial.trial_id in self.unrecorded:
                return TrialScheduler.STOP
            return super().on_trial_result(tune_controller, trial, result)
        self._record(job, result)
        self._obey(job)
        if trial.status == Trial.PAUSED:  # rolled back or halted just now
            return TrialScheduler.NOOP
        if job.guard.tripped:  # diverged: no more steps, no exploit, until the referee decides
            self._hold(job)
            return TrialScheduler.NOOP
        return super().on_trial_result(tune_controller, trial, result)

    @_safe(_PLAIN_PBT)
    def on_trial_complete(self, tune_controller: Any, trial: Trial, result: dict) -> None:
        job = self.jobs.get(trial.trial_id)
        if job is not None and not job.client.is_finished:
            self._record(job, result)
            if job.keep is not None:  # the last rotation, by what the referee listed so far
                self._rotate(job)
            self._finish(job, "SUCCEEDED")
        super().on_trial_complete(tune_controller, trial, result)

    @_safe(_PLAIN_PBT)
    def on_trial_error(self, tune_controller: Any, trial: Trial) -> None:
        job = self.jobs.get(trial.trial_id)
        if job is not None and not job.client.is_finished:
            self._finish(job, "FAILED")
        super().on_trial_error(tune_controller, trial)

    @_safe(_PLAIN_PBT)
    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        job = self.jobs.get(trial.trial_id)
        if job is not None and not job.client.is_finished:
            self._finish(job, "CANCELLED" if job.held_since is None else "FAILED")
        super().on_trial_remove(tune_controller, trial)

    def _finish(self, job: TrialJob, status: str) -> None:
        try:
            job.client.finished(status, final_checkpoint_id=job.last_checkpoint_id)
        finally:
            job.client.close()

    # -- the exploit ------------------------------------------------------------------------------

    def _resolved(self, trial: Trial) -> Any:
        """``trial``'s last PBT checkpoint (a pending save resolved, as PBT does), or None."""
        state = self._trial_state[trial]
        ck = state.last_checkpoint
        if isinstance(ck, _FutureTrainingResult):
            got = ck.resolve()
            if got:
                state.last_result, state.last_checkpoint = got.metrics, got.checkpoint
            ck = state.last_checkpoint if got else None
        return ck or None

    @_safe(None)
    def _exploit(self, tune_controller: Any, trial: Trial, trial_to_clone: Trial) -> None:
        """Gate, record and exploit the first clean candidate: ``trial_to_clone``, then the rest of
        the upper quantile in random order; no exploit when every one is refused."""
        job = self.jobs.get(trial.trial_id)
        if job is None:  # not recorded: it is being stopped
            return
        step = int(self._trial_state[trial].last_train_time)
        others = [t for t in self._quantiles()[1] if t is not trial and t is not trial_to_clone]
        random.shuffle(others)
        for candidate in [trial_to_clone, *others]:
            source_job = self.jobs.get(candidate.trial_id)
            ck = self._resolved(candidate) if source_job is not None else None
            if ck is None:
                continue
            metrics = self._trial_state[candidate].last_result or {}
            try:
                source = self._written(source_job, ck.path, metrics)
                job.client.consumed(source, step, "PBT_EXPLOIT",
                                    load=lambda p=ck.path: LoadedContent(p, hash_directory(p)))
            except GateRefused as exc:
                log.warning("traintrace: trial %s may not exploit %s (%s); trying another", trial.trial_id,
                            exc.checkpoint_id, exc.status)
                job.refused.append(exc.checkpoint_id)
                continue
            except (IntegrationError, OSError) as exc:  # the source's files are gone or changed
                log.warning("traintrace: trial %s cannot exploit trial %s's checkpoint (%s); trying another",
                            trial.trial_id, candidate.trial_id, exc)
                job.outcomes.append(f"exploit-skipped: {exc}")
                continue
            super()._exploit(tune_controller, trial, candidate)
            self._forget_decision(tune_controller, trial)
            self._past_written_checkpoints(trial)
            job.exploits += 1
            job.consumed.append(source)
            return
        log.warning("traintrace: no clean checkpoint in the upper quantile for trial %s: no exploit",
                    trial.trial_id)

    # -- control ----------------------------------------------------------------------------------

    def _obey(self, job: TrialJob) -> None:
        if not job.client.is_finished:
            job.client.poll()
        if job.keep is not None and (job.client.retention or {}).get("version") != job.rotated_at:
            self._rotate(job)

    # -- rotation through the referee (SPEC §13) ----------------------------------------------------

    @staticmethod
    def _take_rotation(job: TrialJob, trial: Trial) -> None:
        """Take ``CheckpointConfig(num_to_keep=k)`` over from the trial's checkpoint manager (it
        then deletes nothing) and apply it in :meth:`_rotate`, through the referee. A Tune whose
        checkpoint manager is not where this expects keeps its own rotation (an outcome says so:
        a rollback target it deletes is then substituted, issue 22)."""
        try:
            cm = trial.run_metadata.checkpoint_manager
            cfg = cm._checkpoint_config
            if cfg.num_to_keep is None:
                return
            job.keep = int(cfg.num_to_keep)
            job.score_attr = cfg.checkpoint_score_attribute
            job.score_max = cfg.checkpoint_score_order != "min"
            cm._checkpoint_config = dataclasses.replace(cfg, num_to_keep=None)
        except Exception as exc:  # noqa: BLE001 - another Ray: its own rotation stays
            job.outcomes.append(f"rotation-not-taken: Tune keeps its own num_to_keep rotation ({exc!r})")

    def _rotate(self, job: TrialJob) -> list[str]:
        """Tune's ``num_to_keep`` through the referee: of this trial's checkpoints still on disk,
        keep the best ``keep`` as Tune ranks them (by ``checkpoint_score_attribute``, else the
        newest) and its latest, delete the older ones the last RetentionNotice
        lists as deletable (``CheckpointDeleted`` first) and drop them from Tune's bookkeeping;
        the others stay until they are deletable. Never raises."""
        job.rotated_at = (job.client.retention or {}).get("version")
        deletable = set(job.client.deletable_checkpoints())
        if not deletable:
            return []
        mine = [c for c, w in self.checkpoints.items() if w.trial_id == job.trial.trial_id and Path(w.path).is_dir()]
        if job.score_attr:  # Tune's order: worst first (nan < -inf < a number), the best kept
            mine.sort(key=lambda c: _score(self.checkpoints[c].metrics.get(job.score_attr or ""), job.score_max))
        keep = job.keep or 0
        protected = set(mine[max(0, len(mine) - keep):]) if keep else set()
        protected.add(job.last_checkpoint_id or "")
        done = []
        for ck_id in mine:
            if ck_id in protected or ck_id not in deletable:
                continue
            path = self.checkpoints[ck_id].path
            try:
                if job.client.delete(ck_id, lambda p=path: shutil.rmtree(p)):
                    done.append(ck_id)
                    self._forget_in_tune(job.trial, path)
            except Exception as exc:  # noqa: BLE001 - a deletion that failed keeps the directory
                job.outcomes.append(f"rotation: {ck_id} not deleted: {exc}")
        job.pruned.extend(done)
        return done

    @staticmethod
    def _forget_in_tune(trial: Trial, path: str) -> None:
        """Drop a deleted checkpoint from the trial's checkpoint manager (best_checkpoints)."""
        try:
            cm = trial.run_metadata.checkpoint_manager
            gone = str(Path(path).resolve())
            cm._checkpoint_results = [r for r in cm._checkpoint_results
                                      if str(Path(r.checkpoint.path).resolve()) != gone]
        except Exception:  # noqa: BLE001 - bookkeeping only
            log.debug("traintrace: Tune's checkpoint list not updated for %s", path)

    def _pause(self, trial: Trial) -> None:
        if trial.status == Trial.RUNNING and self._controller is not None:
            self._controller.pause_trial(trial, should_checkpoint=False)

    def _hold(self, job: TrialJob) -> None:
        self._pause(job.trial)
        if job.held_since is None:
            job.held_since = time.monotonic()

    def _usable(self, checkpoint_id: str) -> str | None:
        """Why ``checkpoint_id`` cannot be restored here (None: it can)."""
        w = self.checkpoints.get(checkpoint_id)
        if w is None:
            return "not a checkpoint this experiment wrote"
        if not Path(w.path).exists():
            return "deleted (Tune's num_to_keep rotated it away)"
        try:
            if w.content_hash and hash_directory(w.path) != w.content_hash:
                return "its content changed since it was recorded"
        except OSError as exc:
            return f"unreadable: {exc}"
        return None

    def _rollback(self, job: TrialJob, cmd: ControlCommand) -> Restored:
        """Obey a rollback through Ray's restore path: pause the trial, make the target its latest
        checkpoint (with the config it was written under), and let Tune restore it on resume.
        When the target is gone, the newest surviving checkpoint of the trial's ancestry older
        than it is restored instead, or the trial restarts afresh (its base); the ``RolledBack``
        names what was restored."""
        sub = substitute(Restored.of(cmd), job.ancestry, self._usable)
        restored = sub.restored
        if sub.reason is not None:
            self.errors += 1
            job.outcomes.append(f"restore-substituted: {sub.reason}")
            log.error("traintrace: rollback of trial %s (command %s): %s", job.job_id, cmd.command_id[:12],
                      sub.reason)
        trial = job.trial
        self._pause(trial)
        self._forget_decision(self._controller, trial)
        manager = trial.run_metadata.checkpoint_manager
        if restored.checkpoint_id is None:  # the base of a PBT trial: no checkpoint, a fresh start
            manager._latest_checkpoint_result = None
        else:
            w = self.checkpoints[restored.checkpoint_id]
            manager._latest_checkpoint_result = _TrainingResult(
                checkpoint=Checkpoint.from_directory(w.path), metrics=dict(w.metrics))
            trial.set_config(copy.deepcopy(w.config))
        self._past_written_checkpoints(trial)
        state = self._trial_state[trial]
        state.last_train_time = restored.step
        # synchronous PBT: the others wait at the next synchronisation point for this trial too, so
        # it must stop there (PBT stops a trial once ``perturbation_interval`` has passed since its
        # last perturbation; counted from the restored step it ran past it, and if it finished
        # before the next one the others waited forever: a hang seen in CI)
        state.last_perturbation_time = restored.step if not self._synch else \
            min(restored.step, self._next_perturbation_sync - self._perturbation_interval)
        state.last_score, state.last_checkpoint = None, None
        job.last_result = None
        job.held_since = None if not job.client.halted else job.held_since
        job.ancestry.restored(restored.checkpoint_id)
        job.last_checkpoint_id = restored.checkpoint_id
        job.restores.append(restored)
        return restored

    @staticmethod
    def _forget_decision(controller: Any, trial: Trial) -> None:
        """Drop a decision Tune keeps for ``trial`` once it is paused. Tune caches a trial's next
        decision while the trial saves (``TuneController._cached_trial_decisions``) and executes
        it when the save resolves. A trial paused without a checkpoint while it was still saving
        (PBT exploiting, at a synchronisation point, a trial that had just begun saving its pause
        checkpoint) has that save dropped and a STOP cached, which nothing clears: the trial's
        first save after it is resumed or restored executed it, and the trial ended one iteration
        later as if finished (CI: a trial rolled back by the referee stopped at step 3 of 8; it
        ends an exploited trial alike). A paused trial has no save pending, so whatever is cached
        for it is stale. Never raises."""
        inner = getattr(controller, "__dict__", {}).get("_tune_controller", controller)  # PBT gets a wrapper
        try:
            if trial.status == Trial.PAUSED:
                stale = inner._cached_trial_decisions.pop(trial.trial_id, None)
                if stale is not None:
                    log.debug("traintrace: trial %s: Tune's stale %s decision dropped", trial.trial_id, stale)
        except Exception:  # noqa: BLE001 - another Ray: nothing cached there
            log.debug("traintrace: Tune's cached decisions of trial %s not checked", trial.trial_id)

    @staticmethod
    def _past_written_checkpoints(trial: Trial) -> None:
        """Make Tune write the trial's next checkpoint past every ``checkpoint_NNNNNN`` directory the
        trial has. Tune names it from the index of ``trial.storage``, which its driver raises only
        when it registers a checkpoint; the checkpoint of the result at which PBT exploited for the
        trial was written but, when Tune paused the trial before it registered it, never
        registered. So the trial's next checkpoint was written into it: after a rollback to that
        very checkpoint (seen: the target's directory then held the next iteration, and the
        record's content hash no longer matched), and after the exploit itself (seen in Ray's own
        ``pbt_function`` example: the exploiter's final checkpoint overwrote its own from before
        the exploit, and was taken for it). Called after both. Never raises."""
        try:
            storage = trial.storage
            indices = (p.name.removeprefix("checkpoint_") for p in Path(trial.path).iterdir()
                       if p.name.startswith("checkpoint_"))
            top = max((int(i) for i in indices if i.isdigit()), default=-1)
            if storage.current_checkpoint_index < top:
                storage.current_checkpoint_index = top
        except Exception:  # noqa: BLE001 - another Ray: its naming stays
            log.debug("traintrace: the checkpoint index of trial %s not raised", trial.trial_id)

    def _blocked(self, job: TrialJob) -> bool:
        """Whether ``job`` must not run: halted, or diverged and waiting for its rollback."""
        self._obey(job)
        blocked = job.client.halted or job.guard.tripped
        if not blocked:
            job.held_since = None
        elif job.held_since is None:
            # held without passing through _hold (it diverged in the result of a step Tune had
            # paused it after): the hold timeout counts from now, or Tune's loop asks forever
            job.held_since = time.monotonic()
        elif self.hold_timeout is not None and time.monotonic() - job.held_since > self.hold_timeout:
            log.error("traintrace: trial %s waited %.0f s for the referee or a release: stopping it",
                      job.job_id, self.hold_timeout)
            job.outcomes.append(f"stopped: held for more than {self.hold_timeout} s")
            self._controller.stop_trial(job.trial)
        return blocked

    @_safe(_PLAIN_PBT)
    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        """PBT's choice among the paused and pending trials, leaving out those held (halted or
        diverged); the held trials' commands are applied here, while they wait."""
        self._controller = tune_controller
        candidates = []
        for trial in tune_controller.get_trials():
            job = self.jobs.get(trial.trial_id)
            if trial.status not in (Trial.PENDING, Trial.PAUSED) or job is None or job.client.is_finished:
                if job is None and trial.status in (Trial.PENDING, Trial.PAUSED) \
                        and trial.trial_id not in self.unrecorded:
                    candidates.append(trial)
                continue
            if self._blocked(job):
                continue
            if not self._synch or self._trial_state[trial].last_train_time < self._next_perturbation_sync:
                candidates.append(trial)
        if not candidates and self._synch:
            candidates = self._unstick(tune_controller)
        candidates.sort(key=lambda t: self._trial_state[t].last_train_time)
        return candidates[0] if candidates else None

    def _unstick(self, tune_controller: Any) -> list[Trial]:
        """Synchronous PBT with nothing to run: the paused trials wait at the synchronisation
        point for a trial that can no longer reach it (it finished, failed or was stopped before
        it). Ray's PBT would wait forever (the perturbation only runs when a trial reports at that
        point), and so would the user's ``Tuner.fit()``: the point is passed without a perturbation
        and they go on. Nothing is done while a trial runs, or one that may still reach the point is
        held for the referee (the hold timeout ends that)."""
        live = [t for t in tune_controller.get_trials() if t.status in (Trial.RUNNING, Trial.PENDING, Trial.PAUSED)]
        if not live or any(t.status == Trial.RUNNING for t in live):
            return []
        sync = self._next_perturbation_sync
        if any(self._trial_state[t].last_train_time < sync for t in live):
            return []  # one may still get there (held, or not runnable now): not stuck
        waiting = []
        for t in live:
            job = self.jobs.get(t.trial_id)
            if job is None or not (job.client.is_finished or self._blocked(job)):
                waiting.append(t)
        if not waiting:
            return []
        self._next_perturbation_sync = max(sync, max(self._trial_state[t].last_train_time for t in live)) \
            + self._perturbation_interval
        log.warning("traintrace: %d trial(s) waited at PBT's synchronisation point %s for a trial that cannot reach it "
                    "any more: passed without a perturbation (next at %s)", len(waiting), sync,
                    self._next_perturbation_sync)
        return waiting


def _score(v: Any, greater_is_better: bool) -> tuple[bool, float]:
    """Tune's checkpoint score: nan (or missing) < -inf < a number, negated for ``min``."""
    x = _number(v)
    if x is None or math.isnan(x):
        return (False, 0.0)
    return (True, x if greater_is_better else -x)


def _number(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
