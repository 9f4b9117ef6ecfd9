"""Tune can write a trial's next checkpoint into a directory the trial already used: it names the
directory from the index of ``trial.storage``, which its driver raises only when it registers a
checkpoint, and the checkpoint of the result at which PBT exploited for a trial is not always
registered. Seen in Ray's own ``pbt_function`` example (1 run in 18 here): the exploiter's
final checkpoint overwrote its own from before the exploit, was taken for it, and the trial
finished with no checkpoint recorded after the exploit."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest


pytestmark = pytest.mark.usefixtures("ray_tune")  # Ray imported by the tests (tests/unit/conftest.py)


class Recording:
    """A job client that keeps what it was told."""

    incarnation = 0
    halted = False
    is_finished = False
    retention = None

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.written: list[tuple[str, int, str]] = []
        self.consumed_ids: list[str] = []

    def checkpoint_written(self, ck_id, path, step, epoch, content_hash=None) -> None:
        self.written.append((ck_id, step, content_hash))

    def consumed(self, source, step, mode, load=None) -> None:
        self.consumed_ids.append(source)


class Calm:
    tripped = False


class FakeTrial:
    """A trial as the scheduler sees it: an id, a config, its directory and Tune's storage index."""

    def __init__(self, trial_id: str, path: str) -> None:
        self.trial_id, self.config, self.path = trial_id, {"lr": 0.1}, path
        self.storage = SimpleNamespace(current_checkpoint_index=-1)


def _pbt(tmp_path):
    from streams.integrations.ray_tune import LineagePBT

    return LineagePBT(journal_dir=tmp_path / "jobs", metric="loss", mode="min", hyperparam_mutations={"lr": [0.1]})


def _job(tmp_path, trial_id: str):
    from streams.integrations.ray_tune import TrialJob

    trial_dir = tmp_path / trial_id
    trial_dir.mkdir()
    return TrialJob(trial=FakeTrial(trial_id, str(trial_dir)), client=Recording(f"job-{trial_id}"), guard=Calm())


def _checkpoint(job, index: int, content: str) -> str:
    d = Path(job.trial.path) / f"checkpoint_{index:06d}"
    d.mkdir(exist_ok=True)
    (d / "state.json").write_text(content)
    return str(d)


def test_a_checkpoint_directory_written_into_again_is_a_new_checkpoint(tmp_path):
    pbt = _pbt(tmp_path)
    job = _job(tmp_path, "t1")
    d = _checkpoint(job, 0, '{"step": 5}')
    first = pbt._written(job, d, {"training_iteration": 5})
    assert pbt._written(job, d, {"training_iteration": 5}) == first  # the same checkpoint, seen again
    assert pbt._written(job, d, {}) == first  # a result that names no iteration says nothing else
    assert [w[0] for w in job.client.written] == [first]

    _checkpoint(job, 0, '{"step": 10}')  # Tune wrote iteration 10 into the same directory
    second = pbt._written(job, d, {"training_iteration": 10})
    assert second != first
    assert [(w[0], w[1]) for w in job.client.written] == [(first, 5), (second, 10)]
    assert job.client.written[0][2] != job.client.written[1][2]  # what each held when recorded
    assert job.last_checkpoint_id == second
    assert job.outcomes == [f"checkpoint-overwritten: {first} (its directory now holds iteration 10)"]


def test_an_exploit_moves_the_exploiters_next_checkpoint_past_its_own_directories(tmp_path, monkeypatch):
    from ray.tune.schedulers import PopulationBasedTraining

    cloned: list = []
    monkeypatch.setattr(PopulationBasedTraining, "_exploit", lambda self, ctl, trial, src: cloned.append(src))
    pbt = _pbt(tmp_path)
    exploiter, source = _job(tmp_path, "low"), _job(tmp_path, "top")
    _checkpoint(exploiter, 0, '{"step": 5}')  # written at the exploit's result, never registered
    top = _checkpoint(source, 0, '{"step": 5}')
    pbt.jobs = {"low": exploiter, "top": source}
    pbt._trial_state = {exploiter.trial: SimpleNamespace(last_train_time=5, last_checkpoint=None, last_result={}),
                        source.trial: SimpleNamespace(last_train_time=5, last_checkpoint=SimpleNamespace(path=top),
                                                      last_result={"training_iteration": 5})}
    monkeypatch.setattr(pbt, "_quantiles", lambda: ([exploiter.trial], [source.trial]))

    pbt._exploit(None, exploiter.trial, source.trial)

    assert cloned == [source.trial] and exploiter.client.consumed_ids == exploiter.consumed == ["job-top-5"]
    # Tune adds one before it writes: the next checkpoint goes to checkpoint_000001, not into _000000
    assert exploiter.trial.storage.current_checkpoint_index == 0
