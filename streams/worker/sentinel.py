"""The control sentinel: forged commands on ``lineage.control`` page the operators (issue 23).

A job client with a trusted keyring refuses a control record that does not verify (unsigned, an
unknown key, a key whose role may not sign that kind, a field changed after signing), but only
its own log says so. Someone writing forged commands to the channel that stops training is an
attack the operators must hear of at once, whichever job it was aimed at and whether or not that
job has a keyring. So every worker that knows the keyring (``--trusted-keys`` /
``$TRAINTRACE_TRUSTED_KEYS``, the same directory the job clients are given; the worker's own
signing key is trusted as the processor's besides) watches the control topic:

- a consumer in its own group (``<app id>-control-watch``: the control topic's partitions are
  shared among the workers, so each record is looked at by one of them), committing what it
  looked at; a partition the group never committed is read from one minute before the
  sentinel started (:data:`LOOKBACK_MS`; not the topic's whole history, whose old records may be
  signed by keys rotated out since);
- each record is decoded and verified by :func:`streams.signing.check_control`, the check the
  job clients make; one that does not verify (or does not decode) becomes an ``Alert`` of kind
  ``CONTROL_FORGED`` on ``lineage.alerts`` — job, command, why, the record's partition and
  offset (its ``alert_id`` is made of them, so a record looked at twice after a rebalance is the
  same alert) — and counts in ``traintrace_control_forged_total{reason}``;
- the live page shows it with the other alerts; ``traintrace plans --trusted-keys`` leaves such
  records out of the plans in force.

An offset is committed only once the alert it caused is on the broker (at-least-once). The
consumer rides out broker faults itself (librdkafka reconnects, rejoins the group); a refused
login or a denied read is said once and the sentinel stops (the worker goes on). Without a
keyring the sentinel does not run: it could not tell an operator's genuine release from a
forgery, and says so once at start.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from confluent_kafka import OFFSET_END, KafkaError, KafkaException, TopicPartition

from streams.codec import Codec, DecodeError
from streams.referee.records import alert_id
from streams.signing import PROCESSOR, TrustedKeys, check_control, load_trusted_keys
from streams.worker import metrics
from streams.worker.published import own_keyring
from streams.worker.settings import WorkerSettings

log = logging.getLogger("traintrace.worker")

__all__ = ["ControlSentinel", "FORGED", "sentinel_keyring"]

#: the alert's kind
FORGED = "CONTROL_FORGED"
#: a partition the group never committed is read from this long before the sentinel started
LOOKBACK_MS = 60_000


def sentinel_keyring(settings: WorkerSettings) -> TrustedKeys | None:
    """The keyring control is verified with: ``settings.trusted_keys`` with the worker's own
    signing key added as a processor key; None when no keyring is configured."""
    if settings.trusted_keys is None:
        return None
    ring = load_trusted_keys(settings.trusted_keys)
    own = own_keyring(settings)  # the worker's signing key, the one a takeover trusts
    if own:
        roles = {k: set(v) for k, v in ring.roles.items()}
        for kid in own:
            roles.setdefault(kid, set()).add(PROCESSOR)
        ring = TrustedKeys({**ring, **own}, roles, source=ring.source)
    return ring


def forged_alert(topic: str, partition: int, offset: int, name: str | None, record: dict[str, Any] | None,
                 reason: str, detail: str, cohort_of: Callable[[str], str | None], now_ms: int) -> tuple[str, dict]:
    """(key, Alert record) of a control record that did not verify."""
    record = record or {}
    job = record.get("job_id") if isinstance(record.get("job_id"), str) else None
    cohort = cohort_of(job) if job else None
    cid = str(record.get("command_id") or "")
    what = f"{name or 'an undecodable record'}{' ' + cid[:12] if cid else ''}"
    message = (f"forged control: {what}{' for job ' + job if job else ''} on {topic}[{partition}]@{offset} "
               f"did not verify ({reason}: {detail}); someone who can write to the control topic is forging "
               "commands: job clients with the trusted keyring refuse it, a client without one obeys it")
    details = {"reason": reason, "record": name or "", "command_id": cid, "key_id": str(record.get("key_id") or ""),
               "partition": str(partition), "offset": str(offset), "topic": topic}
    if name == "RollbackCommand":
        details["action"] = str(record.get("action") or "")
    if name == "HaltCommand":
        details["halt_reason"] = str(record.get("reason") or "")
    alert = {"alert_id": alert_id(FORGED, topic, partition, offset), "kind": FORGED, "cohort_id": cohort,
             "job_id": job, "checkpoint_id": record.get("target_checkpoint_id") if isinstance(
                 record.get("target_checkpoint_id"), str) else None,
             "incident_id": None, "message": message, "details": details, "ts": now_ms}
    return (cohort or job or "control"), alert


class ControlSentinel:
    """Watches ``lineage.control`` in a thread (module doc). ``cohort_of(job_id)``: the job's
    cohort when the worker knows it (the alert is keyed by it)."""

    POLL_S = 0.5

    def __init__(self, settings: WorkerSettings, codec: Codec, keyring: TrustedKeys,
                 cohort_of: Callable[[str], str | None] = lambda _job: None) -> None:
        self.settings = settings
        self.codec = codec
        self.keyring = keyring
        self.cohort_of = cohort_of
        self.topic = settings.topics.control
        self.alerts_topic = settings.topics.alerts
        self.group = f"{settings.app_id}-control-watch"
        self.records_seen = 0
        self.forged = 0
        self.stopped: str | None = None  # why it stopped, when it did
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="traintrace-control-sentinel", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the loop ---------------------------------------------------------------------------------

    def _run(self) -> None:
        kafka = self.settings.kafka
        watch = kafka.error_watch()
        consumer = kafka.consumer(self.group, **{
            "auto.offset.reset": "earliest", "enable.auto.commit": True, "enable.auto.offset.store": False,
            "error_cb": watch})
        producer = kafka.producer(**{"linger.ms": 5, "error_cb": watch})
        try:
            since = int(time.time() * 1000) - LOOKBACK_MS
            consumer.subscribe([self.topic], on_assign=lambda c, parts: self._assigned(c, parts, since))
            log.info("control sentinel: verifying every record of %s with %d trusted key(s) (group %s)",
                     self.topic, len(self.keyring), self.group)
            while not self._stop.is_set():
                msg = consumer.poll(self.POLL_S)  # retried: librdkafka reconnects and rejoins by itself
                if watch.failure is not None:
                    raise watch.failure
                if msg is None:
                    continue
                if msg.error() is not None:
                    self._consumer_error(msg.error())
                    continue
                self.records_seen += 1
                if self._look_at(producer, msg):
                    # at-least-once: the alert is on the broker before its record counts as looked at
                    while producer.flush(5.0) and not self._stop.is_set():  # retried: waits out any outage
                        pass
                consumer.store_offsets(message=msg)
        except Exception as exc:  # noqa: BLE001 - the sentinel's end is never the worker's
            refused = kafka.refusal(exc, operation="READ", resource=self.topic)
            self.stopped = str(refused or exc)
            log.error("control sentinel stopped (forged control is no longer watched): %s", self.stopped)
        finally:
            try:
                producer.flush(5.0)  # retried: best effort at the end
                consumer.close()
            except Exception:  # noqa: BLE001
                pass

    def _assigned(self, consumer: Any, parts: list[TopicPartition], since_ms: int) -> None:
        """Start a partition the group never committed at ``since_ms`` (the others at their commit)."""
        try:
            committed = consumer.committed(parts, timeout=10)  # retried: else the reset policy (earliest) holds
            fresh = [TopicPartition(p.topic, p.partition, since_ms) for p in committed if p.offset < 0]
            if fresh:
                at = {(p.topic, p.partition): p.offset
                      for p in consumer.offsets_for_times(fresh, timeout=10)}  # retried: as above
                for p in committed:
                    if p.offset < 0:
                        got = at.get((p.topic, p.partition), OFFSET_END)
                        p.offset = got if got >= 0 else OFFSET_END
            consumer.assign(committed)
        except Exception as exc:  # noqa: BLE001 - the group's reset policy (earliest) reads them all
            log.warning("control sentinel: could not place the new partitions (%s): reading them from the start", exc)

    def _consumer_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.fatal() or err.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED):
            raise KafkaException(err)
        log.debug("control sentinel: %s (retried by the consumer)", err.str())

    def _look_at(self, producer: Any, msg: Any) -> bool:
        """Verify one record; produce its alert when it does not verify. True: an alert was made."""
        name: str | None = None
        record: dict[str, Any] | None = None
        try:
            name, record = self.codec.decode_record(msg.value() or b"")
        except DecodeError as exc:
            reason, detail = "undecodable", exc.reason
        else:
            check = check_control(name, record, self.keyring)
            if check.ok:
                return False
            reason, detail = check.reason, check.detail
        self.forged += 1
        metrics.CONTROL_FORGED.labels(reason).inc()
        key, alert = forged_alert(self.topic, msg.partition(), msg.offset(), name, record, reason, detail,
                                  self.cohort_of, int(time.time() * 1000))
        log.warning("%s", alert["message"])
        value = self.codec.encode_record("Alert", alert)
        while True:
            try:
                producer.produce(self.alerts_topic, key=key.encode(), value=value,
                                 headers=self.codec.headers.record("Alert"))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        metrics.EMITTED.labels("Alert").inc()
        return True
