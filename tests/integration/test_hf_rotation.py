"""A Hugging Face ``Trainer`` configured the way users configure it (issue 22), on a real broker
and a real worker: ``save_total_limit=2``, ``eval_strategy="steps"``,
``metric_for_best_model="eval_accuracy"``, ``greater_is_better=True``,
``load_best_model_at_end=True``, gradient accumulation.

Job C (the Trainer) saves and evaluates every 2 steps; its first evaluation is its best, so the
rotation keeps ``C-2`` (the best) and the newest, and deletes the rest as the referee allows
(SPEC §13: the worker runs with a settle horizon of 1 s, and the callback applies
``save_total_limit`` through the RetentionNotices). At step 5 C exploits ``S-4`` (PBT_EXPLOIT), a
checkpoint of job S (a plain job client). At step 7 C waits until the referee marks ``C-4``
deletable (superseded by the settled ``C-6``), and rotation deletes it. At step 8 S reports a
divergence with onset 3 — the horizon broken on purpose: seconds after its onset — S-4 is
tainted, and the referee rolls C back to ``C-4``, its last checkpoint before the exploit, which
is gone. C
restores the newest surviving clean checkpoint of its ancestry older than the target, ``C-2``,
records ``RolledBack`` naming it, resumes through the Trainer's own ``resume_from_checkpoint``
and finishes; nothing is raised out of ``train_under_control``; the referee raises a
``RESTORE_SUBSTITUTED`` alert; the accuracy, which the Trainer maximises, is never recorded as a
loss; the log audits clean.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from streams.client.restored import Restored  # noqa: E402
from streams.integrations.hf import TraintraceCallback, base_model_of, consume, train_under_control  # noqa: E402

from tests.integration.test_hf import Tokens, tiny_gpt2  # noqa: E402
from tests.integration.frameworks import assert_checkpoints_hold_what_was_recorded  # noqa: E402

pytestmark = pytest.mark.integration

STEPS = 12
WAIT = 90.0


def source_job(run, tmp_path):
    """S: a plain job client, and the folder of its checkpoint S-4 (a real Trainer-format folder
    of the same model), not recorded yet."""
    source = run.client("S", base_model="gpt2", on_rollback=lambda cmd: None)
    source.start()
    s4 = tmp_path / "S" / "checkpoint-4"
    tiny_gpt2(9).save_pretrained(s4)
    return source, s4


def until(pred, client, what: str, then=None) -> None:
    """Poll ``client`` (and call ``then``) until ``pred()``; fail after WAIT s."""
    deadline = time.monotonic() + WAIT
    while not pred():
        assert time.monotonic() < deadline, f"timed out: {what} ({client.retention})"
        client.poll(timeout=0.2)
        if then is not None:
            then()


class Accuracy:
    """``compute_metrics``: the first evaluation is the best (0.9), the later ones lower."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, eval_pred) -> dict:
        self.calls += 1
        return {"accuracy": 0.9 if self.calls == 1 else 0.1 + 0.01 * self.calls}


class Story(transformers.TrainerCallback):
    """C's exploit of S-4 at step 5, and S's late divergence report at step 8."""

    def __init__(self, run, cb: TraintraceCallback, source, s4: Path) -> None:
        self.run, self.cb, self.source, self.s4 = run, cb, source, s4
        self.deleted_before_report: list[str] = []

    def on_step_end(self, args, state, control, **kw):
        if self.cb.client.incarnation:
            return
        if state.global_step == 7:  # the horizon passes: C-4 is superseded by the settled C-6
            client = self.cb.client
            until(lambda: "C-4" in client.deletable_checkpoints(), client, "C-4 deletable")
        if state.global_step == 5:
            consume(self.cb, "S-4", self.s4, 5, "PBT_EXPLOIT")
        if state.global_step == 8:
            root = Path(args.output_dir)
            self.deleted_before_report = sorted(f"C-{s}" for s in (2, 4, 6) if not (root / f"checkpoint-{s}").exists())
            self.source.diverged(3, "late-detector", "found by an offline evaluation, after the fact")
            assert self.source.flush(30) == 0
            self.run.wait_status("S-4", "tainted")
            assert self.cb.wait_for_command(WAIT), "no command for C"


def test_hf_trainer_as_users_configure_it_restores_what_rotation_left(lineage_cohort, tmp_path):
    torch.set_num_threads(1)
    run = lineage_cohort(extra_args=["--settle-horizon", "1", "--retention-interval", "0.2"])
    source, s4 = source_job(run, tmp_path)
    source.progress(4, 0, 2.0)
    source.checkpoint_written("S-4", s4, 4, 0)

    model = tiny_gpt2(2)
    cb = TraintraceCallback(run.client("C", base_model=base_model_of(model)), halt_wait=30)
    story = Story(run, cb, source, s4)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "C"), max_steps=STEPS, per_device_train_batch_size=2,
        gradient_accumulation_steps=2, learning_rate=3e-3, logging_steps=2, eval_strategy="steps",
        eval_steps=2, save_strategy="steps", save_steps=2, save_total_limit=2,
        metric_for_best_model="eval_accuracy", greater_is_better=True, load_best_model_at_end=True,
        report_to=[], use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=2)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(2), eval_dataset=Tokens(5, n=8),
                                   compute_metrics=Accuracy(), callbacks=[cb, story])

    train_under_control(trainer, cb, command_timeout=WAIT)  # nothing raised
    source.poll(5)  # S obeys its own plan (a restart: nothing before its onset)
    source.finished("FAILED")
    run.settle(grace_s=1)

    assert "C-4" in story.deleted_before_report and "C-2" not in story.deleted_before_report
    assert "C-4" in cb.pruned and "C-2" not in cb.pruned
    assert run.rollbacks()["C"] == ("ROLLBACK", "C-4")  # the plan targets what rotation deleted
    assert cb.restores == [Restored("C-2", 2)]  # the newest surviving clean checkpoint older than it
    assert cb.errors == 1 and "C-4" in cb.outcomes[0] and "restored C-2" in cb.outcomes[0]
    assert trainer.state.global_step == STEPS

    events = run.events()
    mine = [e for e in events if e["job_id"] == "C"]
    rb = [e for e in mine if e["type"] == "RolledBack"]
    assert [(e["restored_checkpoint_id"], e["resumed_step"]) for e in rb] == [("C-2", 2)]
    progress = [e for e in mine if e["type"] == "Progress"]
    assert progress and all(e["loss"] is not None and e["loss"] < 20 for e in progress)  # the training loss
    after = [e for e in progress if e["seq"] > rb[0]["seq"]]
    assert after and after[0]["step"] > 2 and after[0]["incarnation"] == 1
    assert not [e for e in mine if e["type"] == "DivergenceReported"]
    assert mine[-1]["type"] == "JobFinished" and mine[-1]["status"] == "SUCCEEDED"
    assert mine[-1]["final_checkpoint_id"] == "C-2"  # load_best_model_at_end: the best one, C-2

    plans = run.plans()
    assert [p["job_id"] for p in plans["plans"]] == [], plans  # both acknowledged, nothing in force
    from streams.testing.invariants import alert_records

    kinds = [(a["kind"], a.get("job_id")) for a in alert_records(run.bootstrap, run.topics)]
    assert ("RESTORE_SUBSTITUTED", "C") in kinds, kinds
    assert_checkpoints_hold_what_was_recorded(events, finals=False)
    run.assert_audits_clean()


class KeptStory(transformers.TrainerCallback):
    """C rotates (C-2 deleted) before it exploits S-4 at step 7; S reports its divergence at C's
    step 8, well within the horizon; C's rotation goes on and must keep C-6, the target."""

    def __init__(self, run, cb: TraintraceCallback, source, s4: Path) -> None:
        self.run, self.cb, self.source, self.s4 = run, cb, source, s4

    def on_step_end(self, args, state, control, **kw):
        if self.cb.client.incarnation:
            return
        client = self.cb.client
        if state.global_step == 7:  # C-4 settles and supersedes C-2; rotation deletes it
            until(lambda: "C-2" in self.cb.pruned, client, "C-2 deleted", then=self.cb.prune)
            self.source.progress(4, 0, 2.0)
            self.source.checkpoint_written("S-4", self.s4, 4, 0)
            assert self.source.flush(30) == 0
            self.run.wait_status("S-4", "clean")
            consume(self.cb, "S-4", self.s4, 7, "PBT_EXPLOIT")
        if state.global_step == 8:
            self.source.diverged(3, "detector", "loss spike")  # within the horizon of S's step 4
            assert self.source.flush(30) == 0
        if state.global_step == 10:
            assert self.cb.wait_for_command(WAIT), "no command for C"


def test_hf_rotation_through_the_referee_keeps_the_rollback_target(lineage_cohort, tmp_path):
    torch.set_num_threads(1)
    run = lineage_cohort(extra_args=["--settle-horizon", "2", "--retention-interval", "0.2"])
    source, s4 = source_job(run, tmp_path)
    model = tiny_gpt2(3)
    cb = TraintraceCallback(run.client("C", base_model=base_model_of(model)), halt_wait=30)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "C"), max_steps=STEPS, per_device_train_batch_size=2, learning_rate=3e-3,
        logging_steps=2, save_strategy="steps", save_steps=2, save_total_limit=2, report_to=[], use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0, seed=3)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(3),
                                   callbacks=[cb, KeptStory(run, cb, source, s4)])
    train_under_control(trainer, cb, command_timeout=WAIT)
    source.poll(5)
    source.finished("FAILED")
    run.settle(grace_s=1)

    assert run.rollbacks()["C"] == ("ROLLBACK", "C-6")
    assert cb.restores == [Restored("C-6", 6)] and cb.errors == 0, cb.outcomes  # the target, kept
    assert "C-2" in cb.pruned and "C-6" not in cb.pruned
    assert trainer.state.global_step == STEPS
    events = run.events()
    written = [e["checkpoint_id"] for e in events if e["type"] == "CheckpointWritten" and e["job_id"] == "C"]
    deleted = [e["checkpoint_id"] for e in events if e["type"] == "CheckpointDeleted" and e["job_id"] == "C"]
    on_disk = sorted(p.name for p in (tmp_path / "C").rglob("checkpoint-*") if p.is_dir())
    print(f"\nretention (HF, save_total_limit=2, H=2s): {len(written)} checkpoint(s) written, "
          f"{len(deleted)} deleted, {len(on_disk)} on disk at the end")
    from streams.testing.invariants import alert_records

    kinds = [a["kind"] for a in alert_records(run.bootstrap, run.topics)]
    assert "DELETED_PINNED" not in kinds and "RESTORE_SUBSTITUTED" not in kinds, kinds
    assert_checkpoints_hold_what_was_recorded(events, finals=False)
    run.assert_audits_clean()
