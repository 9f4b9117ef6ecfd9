"""Hugging Face Trainer integration (issue 15) on a real broker and a real worker: three tiny GPT-2
trainees of one cohort, each a real ``Trainer`` in its own thread with a TraintraceCallback, run by
``train_under_control``. Logs every 4 steps, checkpoints every 2.

- A's learning rate is blown up for step 10: the checkpoint ``A-10`` holds broken weights, and
  A's next log (step 12) averages a non-finite loss: A reports the divergence (onset 9, the first
  step of that logging window) and stops before saving step 12.
- Between A's save of step 10 and that log, B exploits ``A-10`` (PBT_EXPLOIT) at its step 12 and D
  takes it (INIT) at its step 1, before any checkpoint of its own: the referee had no reason to
  refuse. D goes non-finite, reports it at its next log (step 4, onset 1) and stops, before A
  logs step 12; B holds its next log until the referee's command came and stops for it (so that
  no plan depends on which report the worker folds first).

The referee rolls A back to ``A-8``, B to ``B-10`` (just before its exploit) and D to its base
(RESTART_FROM_BASE: the pretrained weights). A and B resume through the Trainer's own
``resume_from_checkpoint`` from the right folder, D retrains from the weights it started with;
all three finish with finite weights and the log audits clean.

Not covered here: ``RESTART_FROM_SCRATCH`` (the referee issues it only for a job whose base
checkpoint is tainted; this callback starts jobs from the pretrained model). Its restore is the
same path as D's restart from the base, with ``from_scratch`` true.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from streams.client.restored import Restored  # noqa: E402
from streams.integrations.hf import (  # noqa: E402
    TraintraceCallback,
    base_model_of,
    consume,
    load_folder_weights,
    train_under_control,
)
from tests.integration.frameworks import assert_checkpoints_hold_what_was_recorded  # noqa: E402

pytestmark = pytest.mark.integration

STEPS = 16
WAIT = 90.0


class Tokens(torch.utils.data.Dataset):
    def __init__(self, seed: int, n: int = 64, length: int = 16, vocab: int = 32) -> None:
        g = torch.Generator().manual_seed(seed)
        # a learnable pattern: each sequence counts up from a random start
        starts = torch.randint(0, vocab, (n, 1), generator=g)
        self.ids = (starts + torch.arange(length)) % vocab

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_gpt2(seed: int):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(cfg)


#: transformers loads a checkpoint's RNG state inside ``torch.serialization.safe_globals``, a
#: process-wide allow-list it sets on entry and restores on exit: two Trainers of one process
#: resuming at once (this test runs three in threads) can restore it under each other, and the
#: load fails ("Weights only load failed ... numpy ... _reconstruct"; CI saw it). One at a time.
_RNG_STATE = threading.Lock()


class RecordingTrainer(transformers.Trainer):
    """A Trainer that remembers every ``resume_from_checkpoint`` it was given."""

    def train(self, resume_from_checkpoint=None, **kw):
        self.resumes.append(resume_from_checkpoint)
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kw)

    def _load_rng_state(self, checkpoint):
        with _RNG_STATE:
            return super()._load_rng_state(checkpoint)


class Story(transformers.TrainerCallback):
    """The test's part inside each Trainer: A's blow-up, B's and D's consumption of A-10, and what
    each (re)start of training began from."""

    def __init__(self, run, name: str, cb: TraintraceCallback, shared: dict) -> None:
        self.run, self.name, self.cb, self.shared = run, name, cb, shared
        self.begins: list[tuple[int, bool]] = []  # (global step, weights equal the expected ones)

    def on_train_begin(self, args, state, control, model=None, **kw):
        expect = None
        if self.cb.restores:
            r = self.cb.restores[-1]
            expect = (load_folder_weights(self.cb.checkpoints[r.checkpoint_id][0])[0] if r.checkpoint_id
                      else self.cb._initial)
        same = expect is None or all(torch.equal(v, expect[k]) for k, v in model.state_dict().items()
                                     if k in expect)
        self.begins.append((state.global_step, same))

    def on_step_begin(self, args, state, control, optimizer=None, **kw):
        if self.name == "A" and state.global_step == 9 and self.cb.client.incarnation == 0:
            for group in optimizer.param_groups:  # step 10 is taken with a blown-up learning rate
                group["lr"] = 1e30

    def on_save(self, args, state, control, **kw):
        if self.name == "A" and state.global_step == 10 and self.cb.client.incarnation == 0:
            assert self.cb.client.flush(30) == 0
            self.shared["A-10"] = self.cb.checkpoints["A-10"][0]
            self.shared["written"].set()
            for peer in ("B", "D"):  # A logs step 12 only once B took A-10 and D diverged
                assert self.shared[peer].wait(WAIT), f"{peer} did not get that far"

    def on_log(self, args, state, control, logs=None, **kw):
        if self.name == "D" and state.global_step == 4 and self.cb.client.incarnation == 0:
            assert self.cb.guard.tripped, logs  # D reported its own divergence (after A-10's weights)
            self.shared["D"].set()

    def on_step_end(self, args, state, control, **kw):
        at = {"B": (12, "PBT_EXPLOIT"), "D": (1, "INIT")}.get(self.name)
        if at and state.global_step == at[0] and self.cb.client.incarnation == 0:
            assert self.shared["written"].wait(WAIT), "A-10 was never written"
            consume(self.cb, "A-10", self.shared["A-10"], at[0], at[1])
            if self.name == "B":
                self.shared["B"].set()
        if self.name == "B" and state.global_step == 15 and self.cb.client.incarnation == 0:
            # B's own loss is non-finite by now; it holds its next log until the referee knew A-10
            # is tainted and its command came, so its plan is the same whatever the timing
            self.run.wait_status("A-10", "tainted")
            assert self.cb.wait_for_command(WAIT), "no command for B"


def make_job(run, name: str, seed: int, tmp: Path, shared: dict):
    model = tiny_gpt2(seed)
    cb = TraintraceCallback(run.client(name, base_model=base_model_of(model)), halt_wait=30)
    story = Story(run, name, cb, shared)
    args = transformers.TrainingArguments(
        output_dir=str(tmp / name), max_steps=STEPS, per_device_train_batch_size=4, learning_rate=3e-3,
        logging_steps=4, save_strategy="steps", save_steps=2, report_to=[], use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0, seed=seed, logging_nan_inf_filter=False)
    trainer = RecordingTrainer(model=model, args=args, train_dataset=Tokens(seed),
                               callbacks=[story, cb] if name == "B" else [cb, story])
    trainer.resumes = []
    return trainer, cb, story


def test_hf_trainer_cohort_rollback_through_resume_from_checkpoint(lineage_cohort, tmp_path):
    torch.set_num_threads(1)
    run = lineage_cohort()
    shared = {"written": threading.Event(), "B": threading.Event(), "D": threading.Event()}
    jobs = {n: make_job(run, n, seed, tmp_path, shared) for n, seed in (("A", 1), ("B", 2), ("D", 3))}
    errors: dict[str, BaseException] = {}

    def train(name: str) -> None:
        trainer, cb, _ = jobs[name]
        try:
            train_under_control(trainer, cb, command_timeout=WAIT)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors[name] = exc
            for ev in shared.values():
                if isinstance(ev, threading.Event):
                    ev.set()  # let the others fail fast instead of waiting

    threads = [threading.Thread(target=train, args=(n,), name=f"trainee-{n}", daemon=True) for n in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not any(t.is_alive() for t in threads), "a trainee is still training"
    assert not errors, errors
    run.settle(grace_s=1)

    assert run.rollbacks() == {"A": ("ROLLBACK", "A-8"), "B": ("ROLLBACK", "B-10"),
                               "D": ("RESTART_FROM_BASE", None)}
    (ta, a, sa), (tb, b, sb), (td, d, sd) = jobs["A"], jobs["B"], jobs["D"]
    assert a.restores == [Restored("A-8", 8)] and b.restores == [Restored("B-10", 10)]
    assert d.restores == [Restored(None, 0)]
    # the Trainer's own restore path, from the right folder, and what it restored is the target's
    assert ta.resumes == [None, str(tmp_path / "A" / "checkpoint-8")]
    assert tb.resumes == [None, str(tmp_path / "B" / "checkpoint-10")]
    assert td.resumes == [None, None]
    assert sa.begins == [(0, True), (8, True)] and sb.begins == [(0, True), (10, True)]
    assert sd.begins == [(0, True), (0, True)]  # D: back to the pretrained weights
    for name, (trainer, cb, _) in jobs.items():
        assert trainer.state.global_step == STEPS, name
        assert all(torch.isfinite(p).all() for p in trainer.model.parameters()), name

    events = run.events()
    kinds = [(e["job_id"], e["type"]) for e in events]
    for name in jobs:
        assert kinds.count((name, "RolledBack")) == 1 and kinds.count((name, "JobFinished")) == 1, name
    started = [e for e in events if e["type"] == "JobStarted"]
    assert len(started) == 3 and all(e["base_model"] == "gpt2" and e["config_hash"] for e in started)
    consumed = sorted((e["job_id"], e["source_checkpoint_id"], e["mode"]) for e in events
                      if e["type"] == "CheckpointConsumed")
    assert consumed == [("B", "A-10", "PBT_EXPLOIT"), ("D", "A-10", "INIT")]
    diverged = {e["job_id"]: e["onset_step"] for e in events if e["type"] == "DivergenceReported"}
    assert diverged == {"A": 9, "D": 1}  # B was rolled back before its next log
    written = {e["checkpoint_id"] for e in events if e["type"] == "CheckpointWritten"}
    assert {"A-10", "A-10-i1", "A-16-i1", "B-12", "B-12-i1", "D-2", "D-2-i1"} <= written
    assert "A-12" not in written  # A stopped before saving past its divergence
    finished = {e["job_id"]: e["final_checkpoint_id"] for e in events if e["type"] == "JobFinished"}
    assert finished == {"A": "A-16-i1", "B": "B-16-i1", "D": "D-16-i1"}
    # a step trained again went to incarnation-1/: every checkpoint still holds what was recorded
    from streams.client.hashing import hash_directory

    for e in events:
        if e["type"] == "CheckpointWritten":
            assert hash_directory(e["uri"].removeprefix("file://")) == e["content_hash"], e["checkpoint_id"]
    assert_checkpoints_hold_what_was_recorded(events, finals=False)
    run.assert_audits_clean()
