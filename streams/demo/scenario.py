"""The demo cohort: six real training jobs that share checkpoints, one of which blows up.

:func:`default_cohort` gives the job specs, :func:`describe` the story in words, :func:`expected`
the facts the referee must find (for the demo's test), and :func:`run_scenario_job` the function a
demo process calls to run one job with the real lineage client.

All jobs fine-tune the same base model on the same task (:mod:`streams.demo.model`), each with its
own data order and learning rate, for ``STEPS`` steps; each reports progress every 5 steps and
writes a checkpoint every 10 (``<job>-<step>``). The loss of step ``s`` is measured before update
``s``; the checkpoint of step ``s`` holds the weights after it; a sharing action "at step ``s``"
happens after that step's progress and checkpoint.

The story (step numbers are each job's own):

- **j1, the root.** From update 109 its learning rate is ×1000 (a bad schedule). The loss of step
  110 — the first measured on blown-up weights — is hundreds of times the normal loss: that is
  the onset (Progress 110). j1 writes ``j1-110`` in that same step, before its spike-guard (an
  end-of-step callback) reports the divergence (onset 110) and stops the job until it is told
  what to do (left alone, its float32 weights would overflow to NaN about a dozen steps later).
  Expected: ``INTERNAL`` root, ``ROLLBACK`` to ``j1-100``.
- **j2, contaminated.** At its step 120 its PBT controller exploits j1's checkpoint ``j1-110``
  (written after the onset) and copies its weights: j2's loss explodes at step 121 (its own
  spike-guard reports it and j2 waits), a symptom (``EXTERNAL``, attributed to j1's incident).
  Expected: ``ROLLBACK`` to ``j2-120``, its last checkpoint before the consumption. Live, the
  referee usually rolls j2 back before it even computes step 121.
- **j3, clean although it copied j1.** At its step 90 it exploits ``j1-80`` (j1 was the better job
  then): a checkpoint from before the onset, so j3 is clean.
- **j5, clean merge.** At its step 160 it averages its weights with ``j3-150`` (a weight average
  between clean jobs; j3's lineage through ``j1-80`` is clean).
- **j4, clean reference and evaluation.** From its step 60 it trains with ``j5-60`` as a reference
  model (KL pull toward j5's predictions), and at its step 150 it only *evaluates* ``j1-110``
  (``EVAL_ONLY``: recorded, never taints).
- **j6, untouched.** Consumes nothing; nobody consumes it.

None of j2's, j3's or j5's own checkpoints says where its weights came from; only the lineage
record does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from streams.demo.jobs import JobClientFactory, JobSpec, Share, run_job

__all__ = [
    "COHORT_ID",
    "STEPS",
    "default_cohort",
    "cohort_spec",
    "describe",
    "expected",
    "run_scenario_job",
]

COHORT_ID = "demo-cohort"
STEPS = 300
BLOWUP_UPDATE = 109  # first update with lr x 1000 in j1 (incarnation 0)
ONSET = BLOWUP_UPDATE + 1  # the first loss measured on blown-up weights


def default_cohort(cohort_id: str = COHORT_ID, steps: int = STEPS) -> list[JobSpec]:
    """The six jobs of the demo, in job id order."""
    if steps < 170:
        raise ValueError("the scenario's sharing actions need at least 170 steps")

    def job(job_id: str, seed: int, lr: float, shares: tuple[Share, ...] = (), **kw: Any) -> JobSpec:
        return JobSpec(job_id=job_id, cohort_id=cohort_id, seed=seed, lr=lr, steps=steps,
                       shares=shares, **kw)

    return [
        job("j1", 11, 0.2, lr_blowup_step=BLOWUP_UPDATE),
        job("j2", 12, 0.15, (Share(120, "PBT_EXPLOIT", "j1", peer_step=ONSET),)),
        job("j3", 13, 0.1, (Share(90, "PBT_EXPLOIT", "j1", peer_step=80),)),
        job("j4", 14, 0.1, (Share(60, "REFERENCE", "j5", peer_step=60, weight=0.5),
                            Share(150, "EVAL_ONLY", "j1", peer_step=ONSET))),
        job("j5", 15, 0.2, (Share(160, "MERGE", "j3", peer_step=150, weight=0.5),)),
        job("j6", 16, 0.1),
    ]


def cohort_spec(job_id: str, cohort_id: str = COHORT_ID, steps: int = STEPS) -> JobSpec:
    """The spec of one job of :func:`default_cohort`."""
    for spec in default_cohort(cohort_id, steps):
        if spec.job_id == job_id:
            return spec
    raise KeyError(f"no job {job_id!r} in the demo cohort")


def describe(specs: list[JobSpec] | None = None) -> str:
    """The cohort's story in words: one line per job, then the sharing actions in step order."""
    specs = specs or default_cohort()
    lines = [f"Cohort {specs[0].cohort_id}: {len(specs)} jobs fine-tune the same base model "
             f"({specs[0].base_model}) on the same task, {specs[0].steps} steps each, progress every "
             f"{specs[0].progress_every} steps, a checkpoint every {specs[0].checkpoint_every}."]
    for s in specs:
        extra = ""
        if s.lr_blowup_step is not None:
            extra = (f"; from update {s.lr_blowup_step} its learning rate is x{s.lr_blowup_factor:g} "
                     f"(its loss explodes at step {s.lr_blowup_step + 1})")
        acts = ", ".join(f"step {sh.step}: {sh.mode} {sh.checkpoint_id or sh.peer + ' (latest)'}"
                         for sh in s.shares) or "shares nothing"
        lines.append(f"  {s.job_id}: lr {s.lr:g}, data seed {s.seed}; {acts}{extra}")
    facts = expected(specs)
    lines.append(f"Expected: root {facts['root']['job_id']} (onset step {facts['root']['onset_step']}, "
                 f"INTERNAL); contaminated "
                 + ", ".join(f"{c['job_id']} via {c['via_checkpoint_id']}" for c in facts["contaminated"])
                 + "; rollbacks "
                 + ", ".join(f"{j} -> {p['target_checkpoint_id']}"
                             for j, p in sorted(facts["rollbacks"].items()))
                 + f"; clean {', '.join(facts['clean'])}.")
    lines.append("  j3 copied j1 too, but j1-80 predates the onset; j4 only evaluated j1-110 (EVAL_ONLY); "
                 "j5 merged clean j3-150; j6 is never touched.")
    return "\n".join(lines)


def expected(specs: list[JobSpec] | None = None) -> dict[str, Any]:
    """What the referee must conclude about :func:`default_cohort` (whatever the timing).

    ``rollbacks``: the plan of each affected job (its incarnation-0 plan; live, the job applies it
    and trains on). j2's own divergence (``secondary_divergence``) is seen only if j2 computes its
    step 121 before its rollback command arrives; j1's spike is in its Progress of step 110 (and
    its own report) whatever the timing.
    """
    specs = specs or default_cohort()
    ids = [s.job_id for s in specs]
    return {
        "cohort_id": specs[0].cohort_id,
        "root": {"job_id": "j1", "incarnation": 0, "onset_step": ONSET, "verdict": "INTERNAL"},
        "contaminated": [{"job_id": "j2", "incarnation": 0, "via_checkpoint_id": f"j1-{ONSET}"}],
        "secondary_divergence": {"job_id": "j2", "incarnation": 0, "verdict": "EXTERNAL",
                                 "attributed_to": "j1", "onset_after_step": 120},
        "rollbacks": {
            "j1": {"action": "ROLLBACK", "target_checkpoint_id": "j1-100", "target_step": 100},
            "j2": {"action": "ROLLBACK", "target_checkpoint_id": "j2-120", "target_step": 120},
        },
        "tainted_include": [f"j1-{ONSET}"],
        "clean_consumptions": [("j3", "j1-80", "PBT_EXPLOIT"), ("j4", "j5-60", "REFERENCE"),
                               ("j4", f"j1-{ONSET}", "EVAL_ONLY"), ("j5", "j3-150", "MERGE")],
        "clean": [j for j in ids if j not in ("j1", "j2")],
        "untouched": ["j6"],
    }


def run_scenario_job(job_id: str, *, cohort_dir: str | os.PathLike[str],
                     journal_root: str | os.PathLike[str], cohort_id: str = COHORT_ID,
                     steps: int = STEPS, nan_wait_s: float = 30.0, peer_wait_s: float = 60.0,
                     halt_wait_s: float | None = 120.0, **client_kwargs: Any) -> dict[str, Any]:
    """Run job ``job_id`` of the demo cohort with the real ``streams.client.JobClient`` (one call
    per process); returns :meth:`JobResult.to_dict`.

    ``client_kwargs`` go to ``JobClient`` (``bootstrap``, ``topics``, ``worker_url``, ``gate``);
    its journal is ``journal_root/<job_id>``. Every job of the cohort must get the same
    ``cohort_dir`` (the shared checkpoint directory and registry).
    """
    spec = cohort_spec(job_id, cohort_id, steps)
    factory = JobClientFactory(Path(journal_root), **client_kwargs)
    result = run_job(spec, factory, cohort_dir=cohort_dir, nan_wait_s=nan_wait_s,
                     peer_wait_s=peer_wait_s, halt_wait_s=halt_wait_s)
    return result.to_dict()

