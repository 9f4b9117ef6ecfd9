"""A fresh demo run: its ids (a new topic prefix, a new consumer group), its directories under
the work directory, the processor's signing key (the workers sign every ``LineageCommitment``
with it, the audit checks them: ``keys/processor.key``, 0600, and ``processor-<key id>.pub``,
the keyring), the cohort and the facts expected of it."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.demo.errors import DemoError
from streams.demo.leftovers import ensure_empty
from streams.demo.state import DemoState, JobView
from streams.demo.story import GATES, expected_for
from streams.kafka.settings import KafkaSettings

#: the run's subdirectories: job logs, job journals, the cohort's checkpoints, worker data
SUBDIRS = ("logs", "journals", "cohort", "workers")


@dataclass
class RunSetup:
    """What a run is made of before anything starts."""

    kafka: KafkaSettings
    work: Path
    gate: str
    workers: int
    partitions: int
    steps: int
    prefix: str
    topics: Any
    app_id: str
    specs: list[Any]
    expected: dict[str, Any]
    keypair: Any
    t0: float = field(default_factory=time.monotonic)

    @property
    def job_ids(self) -> list[str]:
        return [s.job_id for s in self.specs]

    def new_state(self) -> DemoState:
        return DemoState(work_dir=str(self.work), bootstrap=self.kafka.bootstrap,
                         jobs={j: JobView(j) for j in self.job_ids})


def new_run(kafka: KafkaSettings | str, work_dir: Any, *, gate: str, workers: int, partitions: int,
            steps: int | None) -> RunSetup:
    """Check the arguments, make the work directory's subdirectories and the signing key.
    Raises ``ValueError`` for a bad gate or worker count, :class:`DemoError` for a work directory
    that is not empty or a key that cannot be written."""
    from streams.demo.scenario import STEPS, default_cohort
    from streams.kafka.topics import TopicNames
    from streams.signing import SigningError, write_keypair

    if gate not in GATES:
        raise ValueError(f"gate must be one of {GATES}, not {gate!r}")
    if workers < 1:
        raise ValueError("at least one worker")
    t0 = time.monotonic()
    steps = steps or STEPS
    work = Path(work_dir).resolve()
    ensure_empty(work)
    for sub in SUBDIRS:
        (work / sub).mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    prefix = f"demo{run_id}."
    exp = expected_for(gate, steps)
    try:
        keypair = write_keypair(work / "keys")
    except SigningError as exc:
        raise DemoError(f"cannot write the demo's signing key: {exc}") from exc
    return RunSetup(KafkaSettings.of(kafka), work, gate, workers, partitions, steps, prefix,
                    TopicNames.from_env(prefix), f"traintrace-demo-{run_id}", default_cohort(steps=steps),
                    exp, keypair, t0)
