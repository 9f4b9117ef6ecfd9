"""A Hugging Face ``Trainer`` configured the way users configure it (issue 22), on a real broker
and a real worker: ``save_total_limit=2``, ``eval_strategy="steps"``,
``metric_for_best_model="eval_accuracy"``, ``greater_is_better=True``,
``load_best_model_at_end=True``, gradient accumulation.

Job C (the Trainer) saves and evaluates every 2 steps; its first evaluation is its best, so the
Trainer's rotation keeps ``C-2`` (the best) and the newest, and deletes the rest as it goes. At
step 5 C exploits ``S-4`` (PBT_EXPLOIT), a checkpoint of job S (a plain job client). At step 8,
after rotation deleted ``C-4``, S reports a divergence with onset 3: S-4 is tainted, and the
referee rolls C back to ``C-4``, its last checkpoint before the exploit — which is gone. C
restores the newest surviving clean checkpoint of its ancestry older than the target, ``C-2``,
records ``RolledBack`` naming it, resumes through the Trainer's own ``resume_from_checkpoint``
and finishes; nothing is raised out of ``train_under_control``; the referee raises a
``RESTORE_SUBSTITUTED`` alert; the accuracy, which the Trainer maximises, is never recorded as a
loss; the log audits clean.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from streams.client.restored import Restored  # noqa: E402
from streams.integrations.hf import TraintraceCallback, base_model_of, consume, train_under_control  # noqa: E402

from tests.integration.test_hf import Tokens, tiny_gpt2  # noqa: E402

pytestmark = pytest.mark.integration

STEPS = 12
WAIT = 90.0


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
    run = lineage_cohort()
    # S: a plain job client whose checkpoint S-4 is a real Trainer-format folder of the same model
    source = run.client("S", base_model="gpt2", on_rollback=lambda cmd: None)
    source.start()
    s4 = tmp_path / "S" / "checkpoint-4"
    tiny_gpt2(9).save_pretrained(s4)
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
    run.assert_audits_clean()
