"""A fresh demo run: its ids (a new topic prefix, a new consumer group), its directories under
the work directory, the processor's signing key (the workers sign every ``LineageCommitment``
and control record with it, the audit checks them: ``keys/processor.key``, 0600, and
``processor-<key id>.pub``, the keyring), the cohort and the facts expected of it.

A secure run (``traintrace demo --secure``) also has an operator key, and its keyring has roles,
as the job clients' trusted keyring wants it: ``keys/processor/`` (``processor.key`` and its
``.pub``) and ``keys/operator/`` (``operator.key`` and ``operator-<key id>.pub``). The private
keys sit beside their public keys: a keyring reads only ``*.pub``/``*.pem``. All throw-away."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.demo.errors import DemoError
from streams.demo.leftovers import ensure_empty
from streams.demo.roles import DemoKafka
from streams.demo.state import DemoState, DemoJob
from streams.demo.story import GATES, expected_for

#: the run's subdirectories: job logs, job journals, the cohort's checkpoints, worker data
SUBDIRS = ("logs", "journals", "cohort", "workers")


@dataclass
class RunSetup:
    """What a run is made of before anything starts."""

    kafka: DemoKafka
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
    #: the operator's key (a secure run only)
    operator_keypair: Any = None
    t0: float = field(default_factory=time.monotonic)

    @property
    def keyring(self) -> Path:
        """The trusted keyring: the audit's, and the job clients' of a secure run."""
        return self.work / "keys"

    @property
    def job_ids(self) -> list[str]:
        return [s.job_id for s in self.specs]

    def new_state(self) -> DemoState:
        return DemoState(work_dir=str(self.work), bootstrap=self.kafka.bootstrap,
                         jobs={j: DemoJob(j) for j in self.job_ids})


def new_run(kafka: DemoKafka | Any, work_dir: Any, *, gate: str, workers: int, partitions: int,
            steps: int | None) -> RunSetup:
    """Check the arguments, make the work directory's subdirectories and the signing key.
    Raises ``ValueError`` for a bad gate or worker count, :class:`DemoError` for a work directory
    that is not empty or a key that cannot be written."""
    from streams.demo.scenario import STEPS, default_cohort
    from streams.kafka.topics import TopicNames

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
    kafka = DemoKafka.of(kafka)
    keypair, operator = _write_keys(work / "keys", kafka.secure)
    return RunSetup(kafka, work, gate, workers, partitions, steps, prefix,
                    TopicNames.from_env(prefix), f"traintrace-demo-{run_id}", default_cohort(steps=steps),
                    exp, keypair, operator, t0)


def _write_keys(keys: Path, secure: bool) -> tuple[Any, Any]:
    """The processor's key pair (in ``keys``, or ``keys/processor/`` for a secure run) and the
    operator's (a secure run only, else None)."""
    from streams.signing import KeyPair, SigningError, write_keypair

    try:
        if not secure:
            return write_keypair(keys), None
        processor = write_keypair(keys / "processor")
        made = write_keypair(keys / "operator")
        pub = made.public_path.rename(made.public_path.with_name(f"operator-{made.key_id}.pub"))
        operator = KeyPair(made.key_id, made.private_path.rename(made.private_path.with_name("operator.key")), pub)
        return processor, operator
    except (SigningError, OSError) as exc:
        raise DemoError(f"cannot write the demo's signing keys in {keys}: {exc}") from exc
