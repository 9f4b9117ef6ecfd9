"""A client's security settings, said once: protocol, SASL, TLS -- and what a refusal means.

Every Kafka client traintrace makes takes its security from :class:`KafkaSettings.properties`
(librdkafka keys), so the confluent-kafka producers, consumers and admin clients need nothing
more; this module adds what that leaves open:

- the environment scheme: ``KAFKA_<KEY>`` for the librdkafka security keys, the key upper-cased
  with ``.`` as ``_`` (:data:`ENV_KEYS`, e.g. ``KAFKA_SASL_PASSWORD`` -> ``sasl.password``);
- :func:`validate`: a wrong protocol, mechanism or missing file fails when the settings are
  made, naming the setting, not later as a hang;
- :func:`masked`: secrets (``sasl.password``, ``ssl.key.password``, PEM keys) are never printed;
- :func:`faust_credentials`: the same settings for aiokafka inside Faust (an ``ssl.SSLContext``
  and ``faust.SASLCredentials`` / ``faust.SSLCredentials``);
- :class:`ErrorWatch` and :func:`refusal`: librdkafka reports a failed authentication or TLS
  handshake only to ``error_cb`` and keeps retrying (so a metadata request just times out); a
  client built with the watch fails at once with one line naming the principal, and a denied
  operation names principal, resource and operation -- the fatal error of an idempotent
  producer's PID request (no ``IDEMPOTENT_WRITE``) too, even when confluent-kafka raises it as
  a ``SystemError`` out of ``flush()``;
- :func:`protocol_mismatch`: a client speaking another protocol than the listener (PLAINTEXT at
  a TLS listener, TLS at a PLAINTEXT one, no SASL login at a SASL one) says "wrong
  security.protocol?" instead of "1/1 brokers are down".
"""

from __future__ import annotations

import re
import ssl
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException

from streams.kafka.errors import (
    KafkaAdapterError,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaProtocolError,
    KafkaTlsError,
)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: the mechanisms traintrace sets up (a user and a password; Faust supports them too)
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
#: what librdkafka also takes (passed through, configured by the user's own properties)
OTHER_MECHANISMS = ("GSSAPI", "OAUTHBEARER")

#: librdkafka security keys that the environment may set as ``KAFKA_<KEY>``
SECURITY_KEYS = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
)
#: environment variable -> librdkafka key
ENV_KEYS = {"KAFKA_" + key.upper().replace(".", "_"): key for key in SECURITY_KEYS}
#: keys whose value is never printed
SECRET_KEYS = frozenset({
    "sasl.password", "ssl.key.password", "ssl.key.pem", "ssl.keystore.password",
    "sasl.oauthbearer.client.secret", "ssl_key", "ssl.truststore.password",
})
MASK = "***"
_FILE_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")


def from_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The security properties the environment sets (:data:`ENV_KEYS`), in key order."""
    return tuple((key, env[var].strip()) for var, key in ENV_KEYS.items() if env.get(var, "").strip())


def merge(*layers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Properties of several sources, a later layer winning per key (``sasl.mechanisms`` is the
    same key as ``sasl.mechanism``)."""
    out: dict[str, str] = {}
    for layer in layers:
        for key, value in layer:
            key = "sasl.mechanism" if key == "sasl.mechanisms" else key
            out[key] = value
    return tuple(out.items())


def masked(props: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``props`` with every secret value replaced by ``***``."""
    return tuple((k, MASK if k in SECRET_KEYS else v) for k, v in props)


def validate(props: Mapping[str, str], complete: bool = True) -> None:
    """Raise :class:`KafkaAdapterError` naming the first bad security setting. ``complete``:
    also a missing SASL user or password (settings read from a file may get them from the
    environment or a flag later; a client is only built from complete ones)."""
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise KafkaAdapterError(f"security.protocol={props['security.protocol']!r}: want one of {', '.join(PROTOCOLS)}")
    if protocol.startswith("SASL"):
        mech = props.get("sasl.mechanism", "GSSAPI").upper()  # librdkafka's default
        if mech not in MECHANISMS + OTHER_MECHANISMS:
            raise KafkaAdapterError(f"sasl.mechanism (KAFKA_SASL_MECHANISM) {mech!r}: want one of "
                                    f"{', '.join(MECHANISMS + OTHER_MECHANISMS)}")
        for key in ("sasl.username", "sasl.password"):
            if complete and mech in MECHANISMS and not props.get(key):
                var = "KAFKA_" + key.upper().replace(".", "_")
                raise KafkaAdapterError(f"security.protocol={protocol} needs {key} ({var})")
    for key in _FILE_KEYS:
        if props.get(key) and not Path(props[key]).is_file():
            raise KafkaAdapterError(f"{key}={props[key]}: no such file")
    if bool(props.get("ssl.certificate.location")) != bool(props.get("ssl.key.location")):
        raise KafkaAdapterError("mutual TLS needs both ssl.certificate.location and ssl.key.location")


def principal(props: Mapping[str, str]) -> str:
    """Who the broker will see: ``User:<sasl.username>``, the client certificate, or ANONYMOUS."""
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol.startswith("SASL") and props.get("sasl.username"):
        return f"User:{props['sasl.username']}"
    if props.get("ssl.certificate.location"):
        return f"the certificate {props['ssl.certificate.location']}"
    return "User:ANONYMOUS"


# ---------------------------------------------------------------------------------- Faust


def ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """The TLS context of ``props`` for aiokafka: trust ``ssl.ca.location`` (else the system's),
    present ``ssl.certificate.location`` + ``ssl.key.location`` (mutual TLS)."""
    try:
        ctx = ssl.create_default_context(cafile=props.get("ssl.ca.location") or None)
        if props.get("ssl.certificate.location"):
            ctx.load_cert_chain(props["ssl.certificate.location"], props.get("ssl.key.location") or None,
                                password=props.get("ssl.key.password") or None)
    except (OSError, ssl.SSLError) as exc:
        raise KafkaAdapterError(f"cannot build the TLS context of the Kafka client: {exc}") from exc
    if props.get("enable.ssl.certificate.verification", "true").lower() == "false":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif props.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        ctx.check_hostname = False
    return ctx


def faust_credentials(props: Mapping[str, str]) -> Any | None:
    """The ``broker_credentials`` of the Faust app for ``props`` (None for PLAINTEXT)."""
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return None
    import faust  # lazy: only the worker needs it

    validate(props)
    if protocol.startswith("SASL") and props.get("sasl.mechanism", "GSSAPI").upper() not in MECHANISMS:
        raise KafkaAdapterError(f"the Faust worker supports sasl.mechanism {', '.join(MECHANISMS)} only, "
                                f"not {props.get('sasl.mechanism', 'GSSAPI (the default)')}")
    ctx = ssl_context(props) if protocol.endswith("SSL") else None
    if protocol == "SSL":
        return faust.SSLCredentials(ctx)
    return faust.SASLCredentials(username=props["sasl.username"], password=props["sasl.password"],
                                 mechanism=props["sasl.mechanism"].upper(), ssl_context=ctx)


# ---------------------------------------------------------------------------------- refusals

_AUTHN = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                    KafkaError.UNSUPPORTED_SASL_MECHANISM, KafkaError.ILLEGAL_SASL_STATE})
_AUTHZ = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "group",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
}
#: the same denials as librdkafka words them
_AUTHZ_TEXT = {f"{kind} authorization failed": code for code, kind in _AUTHZ.items()}
#: what the fatal error of an idempotent producer's PID request says
_IDEMPOTENCE_TEXT = ("idempotence", "producer id", "initproducerid")
#: a producer's fatal error names the write it refused: "ProduceRequest for TOPIC [PARTITION] ..."
_PRODUCE_FOR = re.compile(r"ProduceRequest for (\S+) \[\d+\]")


def kafka_error_of(exc: BaseException | KafkaError | None) -> KafkaError | None:
    """The KafkaError of ``exc`` or of its cause. confluent-kafka raises a producer's fatal error
    (e.g. ``CLUSTER_AUTHORIZATION_FAILED`` of the idempotent producer's PID request) from
    ``flush()``/``poll()``, and a delivery callback that runs while it is pending raises
    ``SystemError: <built-in function ...> returned a result with an exception set``: the fatal
    error is then the SystemError's cause."""
    for _ in range(4):
        if exc is None:
            return None
        if isinstance(exc, KafkaError):
            return exc
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0]
        exc = exc.__cause__ or exc.__context__
    return None


_error_of = kafka_error_of  # the old name


def _short(text: str) -> str:
    """librdkafka's text without its ``proto://host:port/id: `` prefix and ``(after N ms in
    state X)`` suffix."""
    text = re.sub(r"^\[thrd:[^\]]*\]: ", "", text.strip())  # a log line's thread
    text = re.sub(r"^\w+://\S+?/(?:bootstrap|\d+): ", "", text)
    text = re.sub(r"^[\w.-]+:\d+/(?:bootstrap|\d+): ", "", text)
    return re.sub(r"\s*\(after \d+ms in state \w+\)\s*$", "", text)


def _protocol(props: Mapping[str, str]) -> str:
    return props.get("security.protocol", "PLAINTEXT").upper()


# a TLS client at a listener without TLS: librdkafka says so itself (or OpenSSL sees no TLS record)
_TLS_AT_PLAIN = re.compile(r"connecting to a PLAINTEXT broker listener\?|wrong version number", re.I)
# a client without TLS at a TLS listener: the broker hangs up on its first request (ApiVersion)
_PLAIN_AT_TLS = re.compile(r"incorrect security\.protocol|Disconnected while requesting ApiVersion|"
                           r"closed by peer.*in state APIVERSION_QUERY\)", re.I)
# a client without SASL at a SASL listener: the broker hangs up on its first request after
# ApiVersion (so right after the connection is up)
_NO_SASL = re.compile(r"closed by peer.*\(after (\d+)ms in state UP\)", re.I)
#: a hang-up this soon after the connection is up is the listener refusing the request (5 s: a
#: loaded broker took over 1 s to hang up in a CI run, and the client got "brokers are down"
#: instead; an idle connection is closed after minutes, connections.max.idle.ms)
_NO_SASL_MS = 5000
_CONFIG_VARS = "security.protocol (KAFKA_SECURITY_PROTOCOL)"


def protocol_mismatch(text: str, props: Mapping[str, str], bootstrap: str) -> KafkaProtocolError | None:
    """The one-line error of a client speaking another protocol than the listener, as a
    librdkafka error or log ``text`` shows it (None: it does not). Each sign on its own is only
    likely (a broker going down can close one connection early); :class:`ErrorWatch` waits for
    it to repeat."""
    protocol = _protocol(props)
    tls, sasl = protocol.endswith("SSL"), protocol.startswith("SASL")
    if tls and _TLS_AT_PLAIN.search(text):
        return KafkaProtocolError(
            f"TLS with Kafka at {bootstrap} failed: wrong security.protocol? the listener speaks PLAINTEXT "
            f"or SASL_PLAINTEXT, this client {protocol} ({_short(text)}); set {_CONFIG_VARS} to the listener's, "
            "or use the broker's TLS listener")
    if not tls and _PLAIN_AT_TLS.search(text):
        return KafkaProtocolError(
            f"Kafka at {bootstrap} hangs up on this {protocol} client's first request: wrong security.protocol? "
            f"the listener speaks TLS (SSL or SASL_SSL); set {_CONFIG_VARS} and ssl.ca.location "
            "(KAFKA_SSL_CA_LOCATION), and for SASL_SSL the sasl.* settings")
    found = _NO_SASL.search(text)
    if not sasl and found and int(found.group(1)) < _NO_SASL_MS:
        wanted = "SASL_SSL" if tls else "SASL_PLAINTEXT"
        return KafkaProtocolError(
            f"Kafka at {bootstrap} hangs up on this {protocol} client right after it connects: wrong "
            f"security.protocol? the listener speaks {wanted} (it wants a SASL login); set "
            f"security.protocol={wanted} and sasl.mechanism / sasl.username / sasl.password "
            "(KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*)")
    return None


def _denied(code: int | None, text: str, operation: str, resource: str, props: Mapping[str, str]) -> str:
    """What was denied: ``OPERATION on KIND RESOURCE``, and why it was needed."""
    kind = _AUTHZ.get(code, "resource")  # type: ignore[arg-type]
    low = text.lower()
    if kind == "cluster" and any(t in low for t in _IDEMPOTENCE_TEXT):
        # the idempotent producer's PID request: every producer of traintrace needs it
        why = f", which an idempotent producer needs to {operation} topic {resource}" if resource and operation else (
            ", which every idempotent producer needs")
        return f"IDEMPOTENT_WRITE on cluster kafka-cluster{why}"
    if kind == "cluster" and resource and not resource.startswith("kafka-cluster"):
        return f"{operation or 'the operation'} on cluster kafka-cluster (to reach topic {resource})"
    if kind == "cluster" and not resource:
        return f"{operation or 'the operation'} on cluster kafka-cluster"
    if kind == "transactional id":
        tid = props.get("transactional.id")
        name = f"transactional id {tid}" if tid else "the producer's transactional id"
        why = f" (to {operation} topic {resource})" if resource and operation else ""
        return f"WRITE on {name}{why}"
    if resource:
        return f"{operation} on {kind} {resource}".strip()
    return operation or "the operation"


def refusal(err: BaseException | KafkaError, props: Mapping[str, str], bootstrap: str, *,
            operation: str = "", resource: str = "") -> KafkaAdapterError | None:
    """The one-line error of a refused authentication, TLS handshake, protocol or operation, or
    None when ``err`` is none of these. Kafka does not name the principal; we know it from
    ``props``. ``err`` may be a producer's fatal error, or an error whose cause it is
    (:func:`kafka_error_of`). ``operation``/``resource`` say what the client was doing
    (``WRITE``, a topic); a denial of the cluster or a transactional id names its own."""
    error = kafka_error_of(err)
    raw = error.str() if error is not None else str(err)
    text = _short(raw)
    who = principal(props)
    code = error.code() if error is not None else None
    if code not in _AUTHZ:
        # a producer's fatal error (_FATAL, _GAPLESS_GUARANTEE) carries the denial in its text only
        code = next((c for phrase, c in _AUTHZ_TEXT.items() if phrase in text.lower()), code)
    if code in _AUTHZ or "AUTHORIZATION_FAILED" in text or "not authorized" in text.lower():
        produce = _PRODUCE_FOR.search(text) if not resource else None
        if produce is not None:  # a fatal error seen without its write (the error callback): it names it
            operation, resource = operation or "WRITE", produce.group(1)
        return KafkaAuthorizationError(
            f"Kafka at {bootstrap} denied {who} {_denied(code, text, operation, resource, props)} ({text}); use "
            "the credentials of a role allowed to, or grant it (`traintrace acl --apply`)")
    if code in _AUTHN or "SASL authentication" in text or "Authentication failed" in text:
        return KafkaAuthenticationError(
            f"Kafka at {bootstrap} rejected {who}: authentication failed ({text}); check "
            "sasl.username / sasl.password (KAFKA_SASL_USERNAME / KAFKA_SASL_PASSWORD) and sasl.mechanism")
    mismatch = protocol_mismatch(raw, props, bootstrap) if _TLS_AT_PLAIN.search(raw) else None
    if mismatch is not None:  # only librdkafka's own word for it: the others need repeating (ErrorWatch)
        return mismatch
    if code == KafkaError._SSL or "SSL handshake failed" in text or "certificate verify failed" in text:
        return KafkaTlsError(
            f"TLS with Kafka at {bootstrap} failed for {who} ({text}); check ssl.ca.location "
            "(KAFKA_SSL_CA_LOCATION) trusts the broker's certificate and the broker's name matches it")
    return None


class ErrorWatch:
    """An ``error_cb`` that keeps the first authentication, TLS or protocol failure librdkafka
    reports (it retries those forever otherwise); :meth:`check` raises it as one line.

    It is also the client's ``logger`` (:meth:`log`, forwarding to ``traintrace.kafka``):
    librdkafka tells a PLAINTEXT client hung up on by a TLS listener, or a client without SASL by
    a SASL listener, only in its log, so the watch reads the connection failures there
    (:func:`protocol_mismatch`). One such line is a suspicion (:attr:`suspect`: a broker going
    down can close a connection early); :data:`MISMATCH_REPEATS` in a row, with no other kind of
    failure between, are the failure. ``on_failure(error)`` is called when a failure is kept."""

    #: consecutive connection failures that look like a protocol mismatch before it is one
    MISMATCH_REPEATS = 3
    #: ... within this many seconds
    MISMATCH_WINDOW_S = 30.0

    def __init__(self, props: Mapping[str, str], bootstrap: str,
                 on_failure: Callable[[KafkaAdapterError], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.props = dict(props)
        self.bootstrap = bootstrap
        self.failure: KafkaAdapterError | None = None
        #: the KafkaError the failure was made of (None for one read from the log)
        self.error: KafkaError | None = None
        #: what the failure was made of: the KafkaError, or the log line's text as an exception
        self._source: BaseException | KafkaError | None = None
        self.down: str | None = None
        self.suspect: KafkaAdapterError | None = None
        self.on_failure = on_failure
        self._clock = clock
        self._repeats = 0
        self._first = 0.0

    def __call__(self, err: KafkaError) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self.down = err.str()
        elif self.failure is None:
            self._keep(refusal(err, self.props, self.bootstrap), err)
            if self.failure is not None:
                self.error = err

    def failure_for(self, operation: str, resource: str) -> KafkaAdapterError | None:
        """The failure kept, told as a refusal of ``operation`` on ``resource`` (what the
        client was doing: the callback itself does not know), or None."""
        if self.failure is None or self._source is None or not resource:
            return self.failure
        return refusal(self._source, self.props, self.bootstrap, operation=operation, resource=resource) \
            or self.failure

    def _keep(self, failure: KafkaAdapterError | None, source: BaseException | KafkaError | None = None) -> None:
        if failure is not None and self.failure is None:
            self.failure = failure
            self._source = source
            if self.on_failure is not None:
                self.on_failure(failure)

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        """librdkafka's log line (``logger.log(level, "%s [%s] %s", facility, client, text)``):
        forwarded to ``traintrace.kafka``, its connection failures read for a protocol mismatch."""
        from streams.kafka.settings import client_logger  # settings imports this module

        client_logger.log(level, msg, *args, **kwargs)
        if len(args) == 3 and args[0] == "FAIL":
            self.connection_failed(str(args[2]))
        elif len(args) == 3 and args[0] == "FATAL":
            # a producer's fatal error (e.g. the idempotent PID request denied): confluent-kafka
            # sometimes raises it from flush() as a bare SystemError, before or without the
            # error_cb, so its log line is where the refusal can be read
            source = RuntimeError(str(args[2]))
            self._keep(refusal(source, self.props, self.bootstrap), source)

    def connection_failed(self, text: str) -> None:
        """One connection failure of the client (librdkafka's ``FAIL`` line ``text``)."""
        mismatch = protocol_mismatch(text, self.props, self.bootstrap)
        if mismatch is None:  # another kind of failure (connection refused, ...): not a mismatch
            self.suspect, self._repeats = None, 0
            return
        now = self._clock()
        if self.suspect is None or now - self._first > self.MISMATCH_WINDOW_S:
            self._repeats, self._first = 0, now
        self.suspect = mismatch
        self._repeats += 1
        if self._repeats >= self.MISMATCH_REPEATS:
            self._keep(mismatch)

    def reset(self) -> None:
        """Forget the failure (the client got through after all, e.g. a fixed ACL)."""
        self.failure, self.error, self.suspect, self._repeats = None, None, None, 0
        self._source = None

    def check(self) -> None:
        if self.failure is not None:
            raise self.failure


def list_topics(client: Any, watch: ErrorWatch, timeout: float, topic: str | None = None) -> Any:
    """``client.list_topics`` that fails at once (:meth:`ErrorWatch.check`) when the broker
    refuses the client's credentials or TLS, instead of waiting out ``timeout``. ``client``
    must have been built with ``error_cb=watch``. Other failures raise ``KafkaException`` as
    before, after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        slice_ = min(0.5, max(0.05, deadline - time.monotonic()))
        try:
            return client.list_topics(topic=topic, timeout=slice_)
        except KafkaException:
            client.poll(0)  # serves error_cb
            watch.check()
            if time.monotonic() >= deadline:
                raise
