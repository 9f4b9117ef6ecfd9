"""Every refusal in one line, and the right one (issue 23), with fake KafkaErrors: the FATAL
CLUSTER_AUTHORIZATION_FAILED of an idempotent producer's PID request (also when confluent-kafka
raises it as a SystemError out of flush()), a transactional id's denial, and a client speaking
another protocol than the listener -- for publish, release, the job client and the worker's
outbox. No broker needed (tests/integration/test_secure_refusals.py runs them on the secure one)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException

from streams.kafka import security
from streams.kafka.errors import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaProtocolError,
    KafkaSecurityError,
    KafkaTlsError,
)
from streams.kafka.settings import KafkaSettings, client_logger
from streams.kafka.topics import TopicNames

AUDITOR = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "auditor"}
PID_DENIED = ("Failed to acquire idempotence PID from broker sasl_ssl://127.0.0.1:9093/1: Broker: Cluster "
              "authorization failed")


def fatal_pid_error() -> KafkaError:
    return KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, PID_DENIED, fatal=True)


def as_system_error(err: KafkaError) -> SystemError:
    """What flush() raises when a delivery report ran while the fatal error was pending."""
    try:
        try:
            raise KafkaException(err)
        except KafkaException as exc:
            raise SystemError("<built-in function hasattr> returned a result with an exception set") from exc
    except SystemError as exc:
        return exc


def one_line(exc: BaseException, *words: str) -> str:
    text = str(exc)
    assert "\n" not in text, text
    for word in words:
        assert word in text, text
    return text


# ---------------------------------------------------------------------------------- the mappings


@pytest.mark.parametrize("err", [
    fatal_pid_error(),
    KafkaException(fatal_pid_error()),
    as_system_error(fatal_pid_error()),
    KafkaError(KafkaError._FATAL, f"Fatal error: Broker: Cluster authorization failed: {PID_DENIED}", fatal=True),
], ids=["error", "exception", "system-error", "_FATAL"])
def test_the_fatal_idempotence_error_names_principal_operation_and_resource(err):
    got = security.refusal(err, AUDITOR, "b:9093", operation="WRITE", resource="lineage.events")
    assert isinstance(got, KafkaAuthorizationError)
    one_line(got, "User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster", "WRITE topic lineage.events",
             "traintrace acl --apply")
    assert "on cluster lineage.events" not in str(got)


def test_the_fatal_idempotence_error_without_a_topic_still_names_the_cluster():
    got = security.refusal(fatal_pid_error(), AUDITOR, "b:9093")
    one_line(got, "User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster")


@pytest.mark.parametrize("code", [KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError._FATAL])
def test_a_denied_transactional_id_is_named(code):
    err = KafkaError(code, "Failed to acquire transactional PID from broker: Broker: Transactional Id "
                           "authorization failed", fatal=True)
    got = security.refusal(err, {**AUDITOR, "transactional.id": "tt-1"}, "b:9093", operation="WRITE",
                           resource="lineage.control")
    assert isinstance(got, KafkaAuthorizationError)
    one_line(got, "User:auditor", "WRITE on transactional id tt-1", "topic lineage.control")


def test_a_cause_that_is_no_kafka_error_is_no_refusal():
    assert security.refusal(SystemError("something else"), AUDITOR, "b") is None
    assert security.kafka_error_of(as_system_error(fatal_pid_error())).code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


# the texts librdkafka 2.x gives (error_cb or its log) for each mismatch seen on the local brokers
PLAIN_AT_TLS = ("127.0.0.1:9093/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN "
                "(after 2ms in state APIVERSION_QUERY)")
OLD_PLAIN_AT_TLS = ("127.0.0.1:9093/bootstrap: Disconnected while requesting ApiVersion: might be caused by "
                    "incorrect security.protocol configuration (connecting to a SSL listener?) or broker "
                    "version is < 0.10 (see api.version.request) (after 3ms in state APIVERSION_QUERY)")
NO_SASL = "ssl://127.0.0.1:9093/bootstrap: Disconnected: SSL connection closed by peer (after 1ms in state UP)"
IDLE_CLOSE = "ssl://127.0.0.1:9093/1: Disconnected: SSL connection closed by peer (after 600012ms in state UP)"
TLS_AT_PLAIN = ("sasl_ssl://127.0.0.1:9092/bootstrap: SSL handshake failed: Disconnected: SSL connection closed "
                "by peer: connecting to a PLAINTEXT broker listener? (after 0ms in state SSL_HANDSHAKE)")
REFUSED = ("127.0.0.1:9093/bootstrap: Connect to ipv4#127.0.0.1:9093 failed: Connection refused "
           "(after 0ms in state CONNECT)")


@pytest.mark.parametrize("protocol, text, words", [
    ("PLAINTEXT", PLAIN_AT_TLS, ["wrong security.protocol?", "the listener speaks TLS", "PLAINTEXT client"]),
    ("SASL_PLAINTEXT", OLD_PLAIN_AT_TLS, ["wrong security.protocol?", "the listener speaks TLS"]),
    ("SSL", NO_SASL, ["wrong security.protocol?", "the listener speaks SASL_SSL", "sasl.username"]),
    ("PLAINTEXT", NO_SASL.replace("SSL connection", "connection").replace("ssl://", ""),
     ["the listener speaks SASL_PLAINTEXT"]),
    ("SASL_SSL", TLS_AT_PLAIN, ["wrong security.protocol?", "the listener speaks PLAINTEXT", "SASL_SSL"]),
])
def test_a_protocol_mismatch_says_wrong_security_protocol(protocol, text, words):
    got = security.protocol_mismatch(text, {"security.protocol": protocol}, "127.0.0.1:9093")
    assert isinstance(got, KafkaProtocolError) and isinstance(got, KafkaSecurityError)
    one_line(got, "127.0.0.1:9093", *words)
    assert "after 0ms" not in str(got) and "brokers are down" not in str(got)


@pytest.mark.parametrize("protocol, text", [
    ("SSL", IDLE_CLOSE),  # an idle connection closed by the broker: no sign of anything
    ("SASL_SSL", NO_SASL),  # a SASL client: that is not it
    ("PLAINTEXT", REFUSED),  # nothing listens: the broker is down
    ("SASL_SSL", PLAIN_AT_TLS),  # a TLS client is not hung up on in APIVERSION_QUERY for its protocol
])
def test_what_is_no_protocol_mismatch(protocol, text):
    assert security.protocol_mismatch(text, {"security.protocol": protocol}, "b") is None


def test_refusal_tells_a_tls_client_at_a_plaintext_listener_but_a_bad_certificate_stays_tls():
    props = {"security.protocol": "SASL_SSL", "sasl.username": "trainer"}
    got = security.refusal(KafkaError(KafkaError._TRANSPORT, TLS_AT_PLAIN), props, "b:9092")
    assert isinstance(got, KafkaProtocolError)
    cert = security.refusal(KafkaError(KafkaError._SSL, "SSL handshake failed: certificate verify failed"), props, "b")
    assert isinstance(cert, KafkaTlsError) and not isinstance(cert, KafkaProtocolError)


# ---------------------------------------------------------------------------------- the watch


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _fail_line(watch: security.ErrorWatch, text: str) -> None:
    watch.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", f"[thrd:{text.split(': ')[0]}]: {text}")


def test_the_watch_reads_the_log_and_needs_the_mismatch_repeated():
    failures: list[Exception] = []
    clock = Clock()
    w = security.ErrorWatch({"security.protocol": "PLAINTEXT"}, "127.0.0.1:9093", failures.append, clock=clock)
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    keep = Keep()
    client_logger.addHandler(keep)
    try:
        _fail_line(w, PLAIN_AT_TLS)
        _fail_line(w, PLAIN_AT_TLS)
        assert w.failure is None and isinstance(w.suspect, KafkaProtocolError)  # a suspicion, not yet a failure
        _fail_line(w, REFUSED)  # another kind of failure between: start again
        assert w.suspect is None
        for _ in range(2):
            _fail_line(w, PLAIN_AT_TLS)
        clock.t += 31  # too long after the first: a new count
        _fail_line(w, PLAIN_AT_TLS)
        assert w.failure is None
        _fail_line(w, PLAIN_AT_TLS)
        _fail_line(w, PLAIN_AT_TLS)
        assert isinstance(w.failure, KafkaProtocolError) and failures == [w.failure]
        with pytest.raises(KafkaProtocolError, match="wrong security.protocol"):
            w.check()
        w.log(logging.WARNING, "%s [%s] %s", "CONNECT", "rdkafka#consumer-1", "connecting")  # any other line: kept
    finally:
        client_logger.removeHandler(keep)
    assert len(seen) == 9 and "APIVERSION_QUERY" in seen[0]  # every line still reaches traintrace.kafka
    w.reset()
    w.check()


def test_a_client_whose_error_cb_is_a_watch_logs_through_it():
    k = KafkaSettings("b:1")
    w = k.error_watch()
    assert k.producer_config(error_cb=w)["logger"] is w
    assert k.consumer_config("g", error_cb=w)["logger"] is w
    assert k.admin_config(error_cb=w)["logger"] is w
    assert k.producer_config(error_cb=w, logger=client_logger)["logger"] is client_logger
    assert k.producer_config()["logger"] is client_logger
    assert k.producer_config(error_cb=lambda err: None)["logger"] is client_logger


# ---------------------------------------------------------------------------------- publish, release


class FatalProducer:
    """A producer whose idempotence PID request was denied: produce() queues, poll() and flush()
    raise the fatal error as confluent-kafka does (flush: as the SystemError of a delivery
    report run while it was pending)."""

    def __init__(self, conf: dict, how: str = "system-error") -> None:
        self.conf = conf
        self.how = how
        self.queued = 0

    def produce(self, *args, **kwargs) -> None:
        self.queued += 1

    def _raise(self):
        if self.how == "system-error":
            raise as_system_error(fatal_pid_error())
        if self.how == "exception":
            raise KafkaException(fatal_pid_error())
        if self.how == "error_cb":  # the watch got it; the flush just does not finish
            self.conf["error_cb"](fatal_pid_error())
            return self.queued
        raise AssertionError(self.how)

    def poll(self, timeout: float = 0) -> int:
        return self._raise() if self.how != "error_cb" else 0

    def flush(self, timeout: float = 0) -> int:
        return self._raise()

    def __len__(self) -> int:
        return self.queued


@pytest.fixture
def auditor(monkeypatch):
    """The auditor's settings; every producer made from them is a FatalProducer (``how``)."""
    from streams.kafka import reader

    how = {"how": "system-error"}
    monkeypatch.setattr(reader, "topic_partitions", lambda *a, **k: [0])
    monkeypatch.setattr(KafkaSettings, "producer",
                        lambda self, **overrides: FatalProducer(self.producer_config(**overrides), how["how"]))
    k = KafkaSettings("127.0.0.1:9093", properties=(("security.protocol", "SASL_SSL"),
                                                     ("sasl.mechanism", "SCRAM-SHA-512"),
                                                     ("sasl.username", "auditor"), ("sasl.password", "pw")))
    return k, how


@pytest.mark.parametrize("how", ["system-error", "exception", "error_cb"])
def test_publish_as_a_role_without_idempotent_write_is_refused_in_one_line(auditor, tmp_path, how):
    from streams.operator_commands.publish import publish_file
    from tests.unit.vectors import scenarios_dir

    k, setting = auditor
    setting["how"] = how
    with pytest.raises(KafkaAuthorizationError) as info:
        publish_file(str(scenarios_dir() / "01_seed_example.jsonl"), k, TopicNames(), timeout=5)
    one_line(info.value, "User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster", "topic lineage.events")


@pytest.mark.parametrize("how", ["system-error", "exception", "error_cb"])
def test_release_as_a_role_without_idempotent_write_is_refused_in_one_line(auditor, how):
    from streams.operator_commands.release import release_job

    k, setting = auditor
    setting["how"] = how
    with pytest.raises(KafkaAuthorizationError) as info:
        release_job(k, TopicNames(), "job-a", timeout=5)
    one_line(info.value, "User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster", "topic lineage.control")


def test_the_commands_print_the_refusal_as_one_line_and_exit_2(auditor, monkeypatch, tmp_path):
    """`traintrace publish` / `release` as the auditor: one line on stderr, exit 2, no traceback."""
    # the command modules are imported before anything is patched: imported first while
    # common.kafka_settings is patched, they would bind the patch for good (monkeypatch would
    # then "restore" it), and every later publish / release in this process would use it
    from streams.cli import common
    from streams.cli import publish as publish_command
    from streams.cli import release as release_command
    from streams.cli.main import cli
    from streams.operator_commands import plans
    from tests.unit.vectors import scenarios_dir

    k, _ = auditor
    monkeypatch.setattr(common, "kafka_settings", lambda *a, **kw: k)
    monkeypatch.setattr(publish_command, "kafka_settings", lambda *a, **kw: k)
    monkeypatch.setattr(release_command, "kafka_settings", lambda *a, **kw: k)
    monkeypatch.setattr(plans, "read_control", lambda *a, **kw: type("C", (), {"halts": {}})())
    for args in (["publish", str(scenarios_dir() / "01_seed_example.jsonl")], ["release", "job-a"]):
        r = CliRunner().invoke(cli, args, catch_exceptions=False)
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert r.exit_code == 2, r.output
        assert len(lines) == 1 and "Traceback" not in r.output, r.output
        one_line(lines[0], "error:", "User:auditor", "IDEMPOTENT_WRITE")


# ---------------------------------------------------------------------------------- the job client


class CallbackProducer:
    """A producer whose poll() serves the callbacks it is told to (``events``)."""

    def __init__(self, conf: dict) -> None:
        self.conf = conf
        self.events: list = []
        self.queue: list = []
        self.lock = threading.Lock()
        CallbackProducer.last = self

    def produce(self, topic, key=None, value=None, on_delivery=None, **kw) -> None:
        with self.lock:
            self.queue.append(on_delivery)

    def poll(self, timeout: float = 0) -> int:
        with self.lock:
            events, self.events = self.events, []
        for event in events:
            event(self)
        time.sleep(min(timeout, 0.01))
        return 0

    def flush(self, timeout: float = 0) -> int:
        return len(self.queue)

    def __len__(self) -> int:
        return len(self.queue)


def _delivery(monkeypatch, props=AUDITOR):
    from streams.client import delivery as delivery_mod
    from streams.client.delivery import Delivery

    monkeypatch.setattr(delivery_mod, "Producer", CallbackProducer)
    k = KafkaSettings("127.0.0.1:9093", properties=tuple({**props, "sasl.password": "pw"}.items()))
    d = Delivery(k, "lineage.events", "J")
    return d, CallbackProducer.last


def _until(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.01)


def test_the_job_clients_delivery_survives_the_fatal_error_as_a_system_error(monkeypatch):
    from streams.client.errors import ClientError

    d, producer = _delivery(monkeypatch)
    try:
        d.send(0, b"x")

        def raise_it(_p):
            raise as_system_error(fatal_pid_error())

        producer.events.append(raise_it)
        _until(lambda: d.refused is not None)
        with pytest.raises(ClientError) as info:
            d.flush(5)
        one_line(info.value, "User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster", "topic lineage.events")
        assert d._thread.is_alive() and d.pending() == 1  # kept, sent again by a new producer later
    finally:
        d.close(0)


def test_the_job_clients_stats_say_authentication_failed(monkeypatch, tmp_path):
    from streams.client import delivery as delivery_mod
    from streams.client.job import JobClient

    monkeypatch.setattr(delivery_mod, "Producer", CallbackProducer)
    k = KafkaSettings("127.0.0.1:9093", properties=tuple({**AUDITOR, "sasl.username": "trainer",
                                                          "sasl.password": "wrong"}.items()))
    c = JobClient("A", "c1", "m", journal_dir=tmp_path, bootstrap=k, follow_control=False, fsync=False)
    try:
        producer = CallbackProducer.last
        cb = producer.conf["error_cb"]
        producer.events.append(lambda _p: cb(KafkaError(
            KafkaError._AUTHENTICATION, "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: "
            "Authentication failed during authentication due to invalid credentials with SASL mechanism "
            "SCRAM-SHA-512 (after 5ms in state AUTH_REQ)")))
        producer.events.append(lambda _p: cb(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")))
        _until(lambda: "brokers" not in str(c.stats()["last_delivery_error"]) and c.stats()["kafka_refused"])
        st = c.stats()
        one_line(st["kafka_refused"], "User:trainer", "authentication failed")
        assert "authentication failed" in st["last_delivery_error"]  # the cause, not "1/1 brokers are down"
        assert "wrong" not in st["kafka_refused"]  # never the password
    finally:
        c.close(0)


def test_the_job_clients_delivery_tells_a_wrong_protocol_from_its_log(monkeypatch):
    from streams.client.errors import ClientError

    d, producer = _delivery(monkeypatch, {"security.protocol": "PLAINTEXT"})
    try:
        assert producer.conf["logger"] is d.watch
        for _ in range(security.ErrorWatch.MISMATCH_REPEATS):
            producer.events.append(lambda p: p.conf["logger"].log(logging.ERROR, "%s [%s] %s", "FAIL",
                                                                  "rdkafka#producer-1", PLAIN_AT_TLS))
        producer.events.append(lambda p: p.conf["error_cb"](KafkaError(KafkaError._ALL_BROKERS_DOWN,
                                                                       "1/1 brokers are down")))
        _until(lambda: d.refused is not None and "brokers" not in str(d.last_error))
        with pytest.raises(ClientError) as info:
            d.wait_capacity(1)
        one_line(info.value, "wrong security.protocol?", "the listener speaks TLS")
        assert "wrong security.protocol?" in d.last_error
    finally:
        d.close(0)


# ---------------------------------------------------------------------------------- the worker


def test_the_workers_outbox_maps_the_fatal_error_of_its_flush(monkeypatch):
    from streams.codec import Codec
    from streams.worker.outbox import Outbox
    from streams.worker.settings import WorkerSettings

    k = KafkaSettings("127.0.0.1:9093", properties=tuple({**AUDITOR, "sasl.password": "pw"}.items()))
    monkeypatch.setattr(KafkaSettings, "producer", lambda self, **o: FatalProducer(self.producer_config(**o)))
    outbox = Outbox(WorkerSettings(k.bootstrap, kafka=k), Codec())
    outbox.send("lineage.alerts", b"k", b"v", headers=[])
    with pytest.raises(KafkaAuthorizationError) as info:
        asyncio.run(outbox.flush())
    one_line(info.value, "User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster")
    # a delivery report of the denial names the topic it was for
    got = outbox.refused([(KafkaError(KafkaError._FATAL, f"Fatal error: {PID_DENIED}", fatal=True), "lineage.alerts")])
    one_line(got, "IDEMPOTENT_WRITE on cluster kafka-cluster", "topic lineage.alerts")
    # the error callback's fatal error alone, before any delivery report (CI: a race) names it too
    outbox.watch(KafkaError(KafkaError._FATAL, f"Fatal error: {PID_DENIED}", fatal=True))
    outbox._first_topic = "lineage.alerts"
    one_line(outbox.refused([]), "User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster", "topic lineage.alerts")
    topic_denied = outbox.refused([(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), "lineage.alerts")])
    one_line(topic_denied, "WRITE on topic lineage.alerts")
    assert isinstance(security.refusal(KafkaError(KafkaError._AUTHENTICATION, "Authentication failed"), AUDITOR, "b"),
                      KafkaAuthenticationError)


class BareSystemErrorProducer(FatalProducer):
    """The CI case (test_secure): flush() raises a SystemError with no cause ("returned NULL
    without setting an exception"), the error_cb never runs, and the fatal error is only in the
    log line librdkafka queues, served by the next poll."""

    def __init__(self, conf: dict) -> None:
        super().__init__(conf)
        self.polled = 0

    def poll(self, timeout: float = 0) -> int:
        self.polled += 1
        if self.polled > 1:  # send()'s poll(0) ran before the fatal error; the next serves its log line
            self.conf["logger"].log(logging.CRITICAL, "%s [%s] %s", "FATAL", "rdkafka#producer-1",
                                    f"[thrd:main]: Fatal error: {PID_DENIED}")
        return 0

    def flush(self, timeout: float = 0) -> int:
        raise SystemError("<method 'flush' of 'cimpl.Producer' objects> returned NULL without setting an exception")


def test_a_bare_system_error_of_the_flush_is_named_by_the_fatal_log_line(monkeypatch):
    from streams.codec import Codec
    from streams.worker.outbox import Outbox
    from streams.worker.settings import WorkerSettings

    k = KafkaSettings("127.0.0.1:9093", properties=tuple({**AUDITOR, "sasl.password": "pw"}.items()))
    monkeypatch.setattr(KafkaSettings, "producer", lambda self, **o: BareSystemErrorProducer(self.producer_config(**o)))
    outbox = Outbox(WorkerSettings(k.bootstrap, kafka=k), Codec())
    outbox.send("lineage.alerts", b"k", b"v", headers=[])
    with pytest.raises(KafkaAuthorizationError) as info:
        asyncio.run(outbox.flush())
    one_line(info.value, "User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster")
