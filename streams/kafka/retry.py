"""One policy for retriable broker errors, used by every broker call of the worker, the job
client and the followers.

A Kafka error that a moment later may not repeat — a leader or a coordinator moving, a broker
paused or restarting, a request that timed out — is retried with exponential backoff within a
deadline (:func:`retry_transient`); past the deadline, or on any other error, the caller gets a
:class:`~streams.kafka.errors.KafkaAdapterError` naming what it asked for, and decides how to
degrade (a housekeeping round skipped and counted, a view answered "unavailable"): never a crash
for an error Kafka marks retriable.

:func:`is_transient` says which errors those are: everything librdkafka marks retriable, plus
the codes a coordinator move or a broker's pause produces that it does not always mark
(``NOT_COORDINATOR``, ``COORDINATOR_LOAD_IN_PROGRESS``, ``UNKNOWN_MEMBER_ID`` after a rebalance,
``OFFSET_NOT_AVAILABLE`` while a new leader's high watermark catches up, ...).

:class:`Degradation` is the caller's side of "then a clear, counted degradation": one log line
when an operation starts failing, one when it is back (with how long it was away), a count in
between — instead of a line per attempt.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from confluent_kafka import KafkaError, KafkaException

from streams.kafka.errors import KafkaAdapterError

__all__ = ["RETRIABLE_CODES", "Degradation", "RetryPolicy", "TransientError", "is_transient", "retry_transient"]

T = TypeVar("T")
log = logging.getLogger("traintrace.kafka")

#: codes retried whether or not librdkafka marks the error retriable
RETRIABLE_CODES = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,  # a topic just created, not yet known to every node
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    # a broker killed mid-request (its connection torn down): another replica leads shortly
    KafkaError._DESTROY_BROKER,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.UNKNOWN_MEMBER_ID,  # after a rebalance that went on without us
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.OFFSET_NOT_AVAILABLE,  # "leader high watermark is not caught up"
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.KAFKA_STORAGE_ERROR,
    KafkaError._WAIT_COORD,
    KafkaError._RESOLVE,
})


class TransientError(KafkaAdapterError):
    """A retriable broker error that outlasted the policy's deadline."""


@dataclass(frozen=True)
class RetryPolicy:
    """Retry within ``deadline_s``, sleeping ``first_backoff_s`` then doubling up to
    ``max_backoff_s``; each attempt is given at most ``attempt_s`` (what is left of the
    deadline when less)."""

    deadline_s: float = 30.0
    first_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    attempt_s: float = 5.0

    def with_deadline(self, deadline_s: float) -> "RetryPolicy":
        return RetryPolicy(deadline_s, self.first_backoff_s, self.max_backoff_s, self.attempt_s)


DEFAULT = RetryPolicy()


def kafka_error(exc: BaseException) -> KafkaError | None:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return err if isinstance(err, KafkaError) else None


def is_transient(exc: BaseException) -> bool:
    """A Kafka error a moment later may not repeat: a moving leader or coordinator, a broker
    going away or paused, a request timed out."""
    err = kafka_error(exc)
    if err is None:
        return False
    if err.fatal():
        return False
    return err.retriable() or err.code() in RETRIABLE_CODES


def describe(exc: BaseException) -> str:
    err = kafka_error(exc)
    return f"{err.name()}: {err.str()}" if err is not None else str(exc)


def retry_transient(call: Callable[[float], T], what: str, timeout: float | RetryPolicy = DEFAULT,
                    sleep: Callable[[float], None] | None = None) -> T:
    """``call(seconds for this attempt)`` until it returns, retrying :func:`is_transient` errors
    with backoff until the policy's deadline (``timeout``: a policy, or its deadline in
    seconds); then :class:`TransientError`, or on any other Kafka error
    :class:`~streams.kafka.errors.KafkaAdapterError`, naming ``what``."""
    policy = timeout if isinstance(timeout, RetryPolicy) else DEFAULT.with_deadline(float(timeout))
    deadline = time.monotonic() + policy.deadline_s
    backoff = policy.first_backoff_s
    while True:
        left = deadline - time.monotonic()
        try:
            return call(min(policy.attempt_s, max(0.1, left)))
        except KafkaException as exc:
            if not is_transient(exc):
                raise KafkaAdapterError(f"cannot get {what}: {describe(exc)}") from exc
            if time.monotonic() + backoff >= deadline:
                raise TransientError(f"cannot get {what}: {describe(exc)} (retried for "
                                     f"{policy.deadline_s:g} s)") from exc
            (sleep or time.sleep)(backoff)  # looked up now: a test's patched time.sleep counts
            backoff = min(policy.max_backoff_s, backoff * 2)


class Degradation:
    """One operation's health, told once per change: ``failed(why)`` logs the first failure
    and counts the rest; ``ok()`` logs that it is back after N s. ``count`` is the number of
    failed rounds since it started (a metric's source)."""

    def __init__(self, what: str, logger: logging.Logger = log, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.log = logger
        self.clock = clock
        self.since: float | None = None
        self.failures = 0  # in the current outage
        self.count = 0  # ever

    @property
    def degraded(self) -> bool:
        return self.since is not None

    def failed(self, why: str) -> None:
        self.count += 1
        self.failures += 1
        if self.since is None:
            self.since = self.clock()
            self.log.warning("%s: skipped (%s); retrying every round, told again when it is back", self.what, why)

    def ok(self) -> None:
        if self.since is not None:
            self.log.warning("%s: back after %.1f s (%d round(s) skipped)", self.what, self.clock() - self.since,
                             self.failures)
            self.since, self.failures = None, 0
