"""A generator of large, plausible cohorts of concurrent fine-tuning jobs (synthetic events).

Used by the benchmarks and the property tests. Deterministic for a given seed. Jobs are
grouped in cohorts that share state the way population-based training does: jobs start from
peers' checkpoints, copy a better peer in exploit steps (sometimes without recording it: same
content hash), merge or distil from peers, evaluate peers (``EVAL_ONLY``); some diverge
(NaN loss, loss spike, or a reported divergence) and some of those are rolled back to their
last checkpoint before the onset; most finish.

Events are dicts in the JSON Lines form of SPEC §11, in an order that keeps each job's own
order and interleaves the jobs of a cohort step by step.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any, Iterable, Iterator

MODES = ("PBT_EXPLOIT", "MERGE", "DISTILL", "REFERENCE", "EVAL_ONLY")


class _Job:
    __slots__ = ("id", "seq", "inc", "step", "ckpts", "loss", "diverge_at", "diverged", "rolled",
                 "last_ckpt_before_onset", "done")

    def __init__(self, job_id: str) -> None:
        self.id = job_id
        self.seq = 0
        self.inc = 0
        self.step = 0
        self.ckpts: list[tuple[str, int, str]] = []  # (id, step, content_hash)
        self.loss = 2.0
        self.diverge_at: int | None = None
        self.diverged = False
        self.rolled = False
        self.last_ckpt_before_onset: tuple[str, int, str] | None = None
        self.done = False


def _h(*parts: object) -> str:
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()


def generate_cohorts(
    jobs: int = 100,
    cohort_size: int = 10,
    steps: int = 600,
    seed: int = 0,
    prefix: str = "j",
    divergence_rate: float = 0.05,
    exploit_every: int = 100,
    ckpt_every: int = 50,
    progress_every: int = 10,
    exploit_prob: float = 0.5,
    alias_prob: float = 0.02,
    t0: int = 1_760_000_000_000,
) -> Iterator[dict[str, Any]]:
    """Yield the events of ``jobs`` jobs in cohorts of ``cohort_size``, ``steps`` steps each.

    About ``steps/progress_every + steps/ckpt_every + 4`` events per job.
    """
    gen = _Generator(random.Random(seed), t0, steps, divergence_rate, exploit_every, ckpt_every,
                     progress_every, exploit_prob, alias_prob)
    n_cohorts = max(1, (jobs + cohort_size - 1) // cohort_size)
    made = 0
    for c in range(n_cohorts):
        size = min(cohort_size, jobs - made)
        if size <= 0:
            break
        made += size
        yield from gen.cohort(f"{prefix}c{c:05d}", [_Job(f"{prefix}{c:05d}-{k:03d}") for k in range(size)])


class _Generator:
    """The events of one cohort after another, from one random stream (so the order of the
    draws, and with it every event, is fixed by the seed)."""

    def __init__(self, rng: random.Random, t0: int, steps: int, divergence_rate: float, exploit_every: int,
                 ckpt_every: int, progress_every: int, exploit_prob: float, alias_prob: float) -> None:
        self.rng = rng
        self.ts = t0
        self.steps = steps
        self.divergence_rate = divergence_rate
        self.exploit_every = exploit_every
        self.ckpt_every = ckpt_every
        self.progress_every = progress_every
        self.exploit_prob = exploit_prob
        self.alias_prob = alias_prob

    def env(self, job: _Job, etype: str, **fields: Any) -> dict[str, Any]:
        self.ts += 1
        ev = {"type": etype, "job_id": job.id, "seq": job.seq, "incarnation": job.inc, "ts": self.ts}
        ev.update(fields)
        job.seq += 1
        return ev

    def cohort(self, cohort_id: str, members: list[_Job]) -> Iterator[dict[str, Any]]:
        rng = self.rng
        for job in members:
            if rng.random() < self.divergence_rate:
                job.diverge_at = rng.randrange(2, self.steps // self.progress_every) * self.progress_every
        for job in members:
            yield self.env(job, "JobStarted", cohort_id=cohort_id, base_model="base-7b",
                           base_checkpoint_id=None, config_hash=None)
        for step in range(self.progress_every, self.steps + 1, self.progress_every):
            for job in members:
                if job.done:
                    continue
                job.step = step
                if job.diverge_at is not None and not job.diverged and step >= job.diverge_at:
                    yield from self.diverge(job, step)
                else:
                    yield from self.train(job, step, members)
        for job in members:
            if rng.random() < 0.8:
                final = job.ckpts[-1][0] if job.ckpts else None
                yield self.env(job, "JobFinished", status="SUCCEEDED", final_checkpoint_id=final)
                job.done = True

    def diverge(self, job: _Job, step: int) -> Iterator[dict[str, Any]]:
        """The onset: NaN, a spike, or a reported divergence; then often a rollback to the last
        checkpoint before the onset."""
        rng = self.rng
        job.diverged = True
        kind = rng.random()
        if kind < 0.4:
            loss = float("nan")
        elif kind < 0.8:
            loss = job.loss * 50
        else:
            loss = job.loss
            yield self.env(job, "Progress", step=step, epoch=step // 100, loss=loss, grad_norm=1.0, lr=1e-4)
            yield self.env(job, "DivergenceReported", onset_step=step, detector="grad-monitor",
                           reason="gradient norm explosion")
            loss = None
        if loss is not None:
            yield self.env(job, "Progress", step=step, epoch=step // 100, loss=loss, grad_norm=1.0, lr=1e-4)
        if job.ckpts and rng.random() < 0.7:
            target = job.last_ckpt_before_onset or job.ckpts[-1]
            job.inc += 1
            job.rolled = True
            job.loss = 1.5
            yield self.env(job, "RolledBack", restored_checkpoint_id=target[0], resumed_step=target[1],
                           command_id=None)

    def train(self, job: _Job, step: int, members: list[_Job]) -> Iterator[dict[str, Any]]:
        """A healthy step: progress, maybe a checkpoint (sometimes an unrecorded copy of a
        peer's content), maybe an exploit step consuming a peer's checkpoint."""
        rng = self.rng
        size = len(members)
        job.loss = max(0.05, job.loss * (0.995 + 0.004 * rng.random()))
        yield self.env(job, "Progress", step=step, epoch=step // 100, loss=round(job.loss, 6),
                       grad_norm=round(0.5 + rng.random(), 4), lr=1e-4)
        if step % self.ckpt_every == 0:
            cid = f"{job.id}-{step}-i{job.inc}"
            content = _h(cid)
            if size > 1 and rng.random() < self.alias_prob:
                peer = members[rng.randrange(size)]
                if peer is not job and peer.ckpts:
                    content = peer.ckpts[-1][2]
            job.ckpts.append((cid, step, content))
            if not job.diverged:
                job.last_ckpt_before_onset = (cid, step, content)
            yield self.env(job, "CheckpointWritten", checkpoint_id=cid, step=step, epoch=step // 100,
                           content_hash=content, uri=f"s3://ckpts/{cid}")
        if step % self.exploit_every == 0 and size > 1 and rng.random() < self.exploit_prob:
            peer = members[rng.randrange(size)]
            if peer is not job and peer.ckpts:
                mode = MODES[rng.randrange(len(MODES))]
                yield self.env(job, "CheckpointConsumed", source_checkpoint_id=peer.ckpts[-1][0],
                               step=step, mode=mode)


def interleave_cohorts(events: list[dict], seed: int, chunk: int = 7) -> list[dict]:
    """The cohorts' events interleaved in random chunks of up to ``chunk`` events, each job's
    own order kept: as concurrent cohorts produce them (the churn test, the fault suite)."""
    rng = random.Random(seed)
    cohort_of: dict[str, str] = {}
    queues: dict[str, list[dict]] = {}
    for d in events:
        if d["type"] == "JobStarted":
            cohort_of[d["job_id"]] = d["cohort_id"]
        queues.setdefault(cohort_of[d["job_id"]], []).append(d)
    pos = {c: 0 for c in queues}
    out: list[dict] = []
    live = sorted(queues)
    while live:
        c = rng.choice(live)
        n = rng.randint(1, chunk)
        out.extend(queues[c][pos[c]:pos[c] + n])
        pos[c] += n
        if pos[c] >= len(queues[c]):
            live.remove(c)
    return out


def interleave_jobs(events: Iterable[Any], rng: random.Random, redeliver: float = 0.0) -> list[Any]:
    """A random merge of the jobs' streams that keeps each job's own order (as the partitions
    of ``lineage.events``, keyed by job, reach a worker), with identical redeliveries of events
    the job already delivered inserted at random later places with probability ``redeliver``.
    The events are dicts or :mod:`streams.core.events` events."""
    queues: dict[str, list[Any]] = {}
    for ev in events:
        queues.setdefault(ev["job_id"] if isinstance(ev, dict) else ev.job_id, []).append(ev)
    heads = dict.fromkeys(queues, 0)
    delivered: dict[str, list[Any]] = {j: [] for j in queues}
    out: list[Any] = []
    live = list(queues)
    while live:
        j = live[rng.randrange(len(live))]
        if delivered[j] and rng.random() < redeliver:
            out.append(delivered[j][rng.randrange(len(delivered[j]))])
            continue
        ev = queues[j][heads[j]]
        heads[j] += 1
        out.append(ev)
        delivered[j].append(ev)
        if heads[j] == len(queues[j]):
            live.remove(j)
    return out


def chain_events(events: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The event dicts with the SPEC §9 hash chain filled in, per job (``prev_hash``, ``hash``),
    as a job client would have written them."""
    from streams.core.chain import GENESIS, chain_hash
    from streams.core.events import parse_event

    heads: dict[str, str] = {}
    for d in events:
        d = dict(d)
        d.pop("hash", None)
        d["prev_hash"] = heads.get(d["job_id"], GENESIS)
        d["hash"] = chain_hash(d["prev_hash"], parse_event(d))
        heads[d["job_id"]] = d["hash"]
        yield d


#: the event types a job client seals at once (streams.client.job); others by count
SEALED_AT_ONCE = frozenset({"JobStarted", "DivergenceReported", "RolledBack", "JobFinished"})


def seal_events(events: Iterable[dict[str, Any]], every: int = 64, seed: int = 0,
                within: int | None = None) -> Iterator[dict[str, Any]]:
    """The event dicts chained (:func:`chain_events`) and sealed as a job client seals them
    (:mod:`streams.core.seals`): each job gets its own key (derived from ``seed`` and its id, so
    a run is reproducible), declared in its ``JobStarted``; the types of
    :data:`SEALED_AT_ONCE` are sealed, otherwise every ``every``-th event of the job, and each
    job's last event (a client seals its head when it goes quiet or closes).

    ``within``: the client's ``seal_ms`` timer, counted in positions of the whole log (a feed
    that spreads the log evenly over time makes positions time): no event waits for its seal
    more than ``within`` positions after the job's first unsealed one. Without it, a job whose
    events are sparse in the log can leave a checkpoint it wrote unsealed, so held, for longer
    than a live worker's grace period, and the jobs that consumed it are halted
    ``UNTRACEABLE_SOURCE`` live though the end of the log resolves them (as SPEC §8 says: a
    held write is not recorded yet)."""
    from streams.core.chain import GENESIS, chain_hash
    from streams.core.events import parse_event
    from streams.core.seals import Sealer

    events = list(events)
    after: list[int] = [len(events)] * len(events)  # the index of the job's next event
    seen_at: dict[str, int] = {}
    for i in range(len(events) - 1, -1, -1):
        job = events[i]["job_id"]
        after[i] = seen_at.get(job, len(events))
        seen_at[job] = i
    keys: dict[str, Sealer] = {}
    # job -> (head hash, events since the last seal, index of the first unsealed one)
    state: dict[str, tuple[str, int, int]] = {}
    for i, d in enumerate(events):
        d = dict(d)
        job = d["job_id"]
        key = keys.get(job)
        if key is None:
            key = keys[job] = Sealer(hashlib.sha256(f"{seed}\x00{job}".encode()).digest())
        head, since, first = state.get(job, (GENESIS, 0, i))
        if since == 0:
            first = i
        d.pop("hash", None)
        d.pop("signature", None)
        if d["type"] == "JobStarted":
            d["public_key"] = key.public_key
        d["prev_hash"] = head
        d["hash"] = chain_hash(head, parse_event(d))
        since += 1
        if (d["type"] in SEALED_AT_ONCE or since >= every or after[i] == len(events)
                or (within is not None and after[i] - first > within)):
            d["signature"] = key.seal(d["hash"])
            since = 0
        state[job] = (d["hash"], since, first)
        yield d
