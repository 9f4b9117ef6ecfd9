"""A trial held for the referee is stopped after ``hold_timeout`` however it came to be held
(issue 27's CI run: a trial that diverged in the result of a step Tune had already paused it
after was never given a hold time, and Tune's loop asked ``choose_trial_to_run`` forever)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("ray.tune")

from streams.integrations.ray_tune import LineagePBT, TrialJob  # noqa: E402


class Client:
    job_id = "job-t1"
    halted = False
    is_finished = True  # nothing to poll
    retention = None


class Guard:
    tripped = True


class Controller:
    def __init__(self) -> None:
        self.stopped: list = []

    def stop_trial(self, trial) -> None:
        self.stopped.append(trial)


def test_a_trial_held_without_a_hold_time_still_times_out(tmp_path, monkeypatch):
    import streams.integrations.ray_tune as rt

    pbt = LineagePBT(journal_dir=tmp_path, metric="loss", mode="min", hyperparam_mutations={"lr": [0.1]},
                     hold_timeout=60)
    pbt._controller = Controller()
    trial = SimpleNamespace(trial_id="t1")
    job = TrialJob(trial=trial, client=Client(), guard=Guard())
    assert job.held_since is None
    now = [1000.0]
    monkeypatch.setattr(rt.time, "monotonic", lambda: now[0])
    assert pbt._blocked(job) and job.held_since == 1000.0  # held from now on
    now[0] += 59
    assert pbt._blocked(job) and pbt._controller.stopped == []
    now[0] += 2
    assert pbt._blocked(job) and pbt._controller.stopped == [trial]
    assert job.outcomes == ["stopped: held for more than 60 s"]
