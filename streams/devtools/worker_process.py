"""Running the live pipeline from tests, benchmarks and the demo: worker processes, quiescence.

A :class:`WorkerProcess` is a real ``traintrace worker`` in its own process (own data directory
and web port). :func:`wait_quiescent` waits until the processor's consumer group has committed
everything on ``lineage.events`` and ``lineage.by-cohort``: since the agents flush their
outputs before their offsets can be committed, everything the input caused is then on the
broker. :func:`forget_run` deletes what a finished run left on the broker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import TopicPartition

from streams.devtools import lifetime
from streams.kafka.retry import retry_transient
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames, delete_run


def free_port() -> int:
    """A port for a local server (see :func:`~streams.devtools.broker.pick_free_port`)."""
    from streams.devtools.broker import pick_free_port

    return pick_free_port()


#: how often :meth:`WorkerProcess.wait_ready` restarts a worker whose web port was taken between
#: the pick and its bind (a port is only free until someone binds it)
PORT_RETRIES = 3


@dataclass
class WorkerProcess:
    bootstrap: str
    prefix: str
    app_id: str
    data_dir: Path
    partitions: int = 4
    web_port: int = field(default_factory=free_port)
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    #: the command that runs ``traintrace`` (default: this interpreter, ``-m streams``); e.g. the
    #: ``traintrace`` script of another environment, with ``cwd`` outside any source tree
    command: list[str] = field(default_factory=lambda: [sys.executable, "-m", "streams"])
    cwd: Path | None = None
    #: the worker gets SIGTERM when the process that started it dies without stopping it (a
    #: crashed test process, a benchmark killed): :mod:`streams.devtools.lifetime`. Only a worker
    #: started from the main thread is tied to it
    die_with_parent: bool = True
    #: where this run's output starts in ``log_path`` (the log is appended to over restarts)
    _log_start: int = field(default=0, init=False, repr=False)

    def start(self) -> "WorkerProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / "worker.log"
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")
        cmd = [*self.command, "worker", "--bootstrap", self.bootstrap,
               "--topic-prefix", self.prefix, "--app-id", self.app_id, "--partitions", str(self.partitions),
               "--data-dir", str(self.data_dir), "--web-port", str(self.web_port), *self.extra_args]
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.cwd,
                                     start_new_session=True,
                                     preexec_fn=lifetime.die_with_parent() if self.die_with_parent else None)
        log.close()
        return self

    def get(self, path: str, timeout: float = 5.0):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}{path}", timeout=timeout) as r:
            body = r.read()
        return json.loads(body) if path != "/metrics" else body.decode()

    def metric(self, name: str, timeout: float = 5.0) -> float:
        """The value of metric ``name`` on the worker's ``/metrics``, summed over its labels
        (0.0 when it has no sample yet)."""
        total = 0.0
        for line in self.get("/metrics", timeout=timeout).splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def folded(self, timeout: float = 5.0) -> float:
        """The events the worker folded since it started (``traintrace_events_folded_total``),
        from ``/health``: a bench that polls it does not make the worker render every metric."""
        return float(self.get("/health", timeout=timeout).get("folded", 0))

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until ``/health`` answers. A worker that exited because its web port was taken is
        started again on another port (up to :data:`PORT_RETRIES` times); any other exit raises."""
        deadline = time.monotonic() + timeout
        retries = PORT_RETRIES
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                if retries and self._lost_port():
                    retries -= 1
                    self.web_port = free_port()
                    self.start()
                    continue
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.get("/health", timeout=1.0)
                return
            except Exception:
                time.sleep(0.3)
        raise TimeoutError(f"worker on port {self.web_port} not ready after {timeout}s:\n{self.log_tail()}")

    def _lost_port(self) -> bool:
        """True when this run's log says the web port was in use (the worker's own check, or the
        web server's bind after it)."""
        if self.log_path is None or not self.log_path.exists():
            return False
        with open(self.log_path, "rb") as f:
            f.seek(self._log_start)
            text = f.read().decode(errors="replace")
        return f":{self.web_port} is already in use" in text or f", {self.web_port}): address already in use" in text

    def owned(self) -> dict[str, list[int]]:
        """The input partitions the worker processes now, by stage (``/health``)."""
        return self.get("/health", timeout=2.0).get("partitions", {})

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def stop(self) -> int | None:
        """A clean stop (SIGTERM, as a deploy or systemd stops it); returns the exit status."""
        self.kill(signal.SIGTERM)
        return self.proc.returncode if self.proc is not None else None

    def log_tail(self, n: int = 60) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


def group_lag(kafka: KafkaSettings | str, app_id: str, topics: list[str]) -> dict[str, int]:
    """Per topic, high watermarks minus the group's committed offsets (summed over partitions)."""
    consumer = KafkaSettings.of(kafka).consumer(app_id)
    try:
        out: dict[str, int] = {}
        for topic in topics:
            md = retry_transient(lambda left: consumer.list_topics(topic, timeout=left), f"the partitions of {topic}", 30)
            parts = list(md.topics[topic].partitions) if topic in md.topics else []
            committed = retry_transient(
                lambda left: consumer.committed([TopicPartition(topic, p) for p in parts], timeout=left),
                f"the committed offsets of {app_id} on {topic}", 30)
            lag = 0
            for tp in committed:
                _lo, hi = retry_transient(
                    lambda left, p=tp.partition: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=left),
                    f"the end offsets of {topic}[{tp.partition}]", 30)
                lag += max(0, hi - max(tp.offset, 0))
            out[topic] = lag
        return out
    finally:
        consumer.close()


def wait_quiescent(kafka: KafkaSettings | str, app_id: str, topics: TopicNames, timeout: float = 120.0,
                   settle: float = 1.5, split: bool = False) -> dict[str, int]:
    """Wait until the processor has committed everything routed and folded, twice in a row
    ``settle`` seconds apart. Returns the last lags (all zero) or raises TimeoutError.
    ``split``: the workers run the stages apart (``--stages route`` / ``fold``), the events
    committed by the route group."""
    from streams.worker.settings import route_group

    kafka = KafkaSettings.of(kafka)
    deadline = time.monotonic() + timeout
    streak = 0
    last: dict[str, int] = {}
    while time.monotonic() < deadline:
        if split:
            last = {**group_lag(kafka, route_group(app_id), [topics.events]),
                    **group_lag(kafka, app_id, [topics.by_cohort])}
        else:
            last = group_lag(kafka, app_id, [topics.events, topics.by_cohort])
        if all(v == 0 for v in last.values()):
            streak += 1
            if streak >= 2:
                return last
        else:
            streak = 0
        time.sleep(settle)
    raise TimeoutError(f"pipeline not quiescent after {timeout}s: lag {last}")


def forget_run(kafka: KafkaSettings | str, prefix: str, app_id: str, keep: bool = False) -> None:
    """Delete a finished run's topics and consumer groups unless ``keep`` (the benches'
    ``--keep-topics``): a broker that serves many runs keeps every run's otherwise, and its log
    cleaner keeps compacting theirs while the next run measures. A failure is one line on stderr:
    the run's numbers stand."""
    if keep:
        return
    try:
        delete_run(kafka, prefix, app_id)
    except Exception as exc:  # noqa: BLE001 - say what is left behind, and go on
        print(f"note: the run's topics ({prefix}*) were not deleted: {exc}", file=sys.stderr)


def produce_events(kafka: KafkaSettings | str, topic: str, events, codec=None) -> int:
    """Produce event dicts to ``topic`` keyed by job_id, with the headers of their type
    (``codec.headers.event``), as fast as the client allows (waits for room when its buffer is
    full); returns how many."""
    from streams.codec import Codec

    codec = codec or Codec()
    p = KafkaSettings.of(kafka).producer(**{"linger.ms": 20, "batch.num.messages": 10000})
    n = 0
    for d in events:
        while True:
            try:
                p.produce(topic, key=d["job_id"].encode(), value=codec.encode_event(d),
                          headers=codec.headers.event(d["type"]))
                break
            except BufferError:
                p.poll(0.05)
        n += 1
        if n % 5000 == 0:
            p.poll(0)
    p.flush(60)
    return n


def wait_assigned(workers: list[WorkerProcess], partitions: int, timeout: float = 90.0) -> None:
    """Until ``workers`` together process every partition of both input stages (their group's
    assignment taken over): a measure that starts before would time the group's join."""
    deadline = time.monotonic() + timeout
    want = set(range(partitions))
    while time.monotonic() < deadline:
        try:
            seen = [w.owned() for w in workers]
        except OSError:
            seen = []
        if seen and all({p for o in seen for p in o.get(stage, ())} == want for stage in ("events", "by_cohort")):
            return
        time.sleep(0.2)
    raise TimeoutError(f"the workers did not take over all {partitions} partitions of both stages in {timeout:.0f}s")
