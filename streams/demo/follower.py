"""The live view's eyes on the pipeline: the alerts on ``lineage.alerts`` and the workers' ``/jobs``
view, followed in background threads while the jobs run."""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from streams.demo.state import DemoState
from streams.demo.workers import worker_views
from streams.kafka.settings import KafkaSettings

log = logging.getLogger("traintrace.demo")


class Follower(threading.Thread):
    """Follows ``lineage.alerts`` (decoded) and polls the workers' ``/jobs`` into queues."""

    def __init__(self, kafka: KafkaSettings | str, topic: str, workers: list[Any], codec: Any) -> None:
        super().__init__(name="demo-follower", daemon=True)
        self.kafka, self.topic, self.workers, self.codec = KafkaSettings.of(kafka), topic, workers, codec
        self.alerts: queue.Queue[dict[str, Any]] = queue.Queue()
        self.referee: dict[str, dict[str, Any]] = {}
        self.stop = threading.Event()
        self._seen: set[tuple[int, int]] = set()
        self._jobs_thread = threading.Thread(target=self._poll_jobs, name="demo-jobs", daemon=True)

    def run(self) -> None:
        from streams.kafka.reader import follow

        self._jobs_thread.start()
        while not self.stop.is_set():
            try:
                # from the beginning (the topic is this run's own); idle: check the stop flag
                for m in follow(self.kafka, self.topic, from_beginning=True, idle_timeout=2.0,
                                poll_interval=0.2):
                    if (m.partition, m.offset) in self._seen:
                        continue
                    self._seen.add((m.partition, m.offset))
                    try:
                        name, rec = self.codec.decode_record(m.value)
                    except Exception:
                        continue
                    if name == "Alert":
                        self.alerts.put(rec)
                    if self.stop.is_set():
                        break
            except Exception as exc:  # the live view is best effort
                log.debug("following alerts: %s", exc)
                self.stop.wait(1.0)

    def _poll_jobs(self) -> None:
        while not self.stop.wait(1.0):
            for j in worker_views(self.workers, "/jobs", "jobs"):
                self.referee[j["job_id"]] = j

    def update(self, state: DemoState) -> None:
        """What was seen since the last call onto ``state``: new alerts, the referee's view."""
        while True:
            try:
                state.alerts.append(self.alerts.get_nowait())
            except queue.Empty:
                break
        state.refresh_referee(list(self.referee.values()))
