"""What the ``traintrace`` commands share: the one way to fail, and the options several commands
take (Kafka, topic names, the core's tunables, the cut of the log) with the values they make.

A command module declares its own options and imports the shared ones from here; it parses,
calls a service function and prints, nothing else.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, NoReturn, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from streams.kafka.settings import BOOTSTRAP_ENV, CONFIG_ENV
from streams.kafka.topics import PREFIX_ENV

if TYPE_CHECKING:  # imported where used: `traintrace --help` need not load the audit
    from collections.abc import Sequence

    from streams.audit.log import Until
    from streams.options import Setting
    from streams.core.state import Config
    from streams.kafka.settings import KafkaSettings
    from streams.kafka.topics import TopicNames

F = TypeVar("F", bound=Callable[..., object])


err_console = Console(stderr=True)


def fail(message: str, code: int = 2, command: str | None = None) -> NoReturn:
    """``error: message`` as one line on stderr (never wrapped, so scripts can match it; the
    message is escaped: it holds paths and values the user gave) and exit ``code``.
    ``command`` prefixes the line with ``traintrace <command>:``."""
    prefix = f"traintrace {command}: " if command else ""
    err_console.print(f"{escape(prefix)}[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(code)


def trusted_keyring(trusted_keys: "str | os.PathLike[str] | None"):
    """The keyring with roles of ``--trusted-keys`` (processor/ and operator/ public keys), None
    without one; a directory or key file that does not load is one line and exit 2."""
    if not trusted_keys:
        return None
    from streams.signing import load_trusted_keys

    try:
        return load_trusted_keys(trusted_keys)
    except Exception as exc:  # noqa: BLE001 - a bad key file is the user's input: say which
        fail(f"--trusted-keys {trusted_keys}: {exc}")


# ---------------------------------------------------------------------------------- Kafka


def bootstrap_option(f: F | None = None, *, start_broker: bool = True):
    """``--bootstrap`` [env KAFKA_BOOTSTRAP_SERVERS]; without it the local broker, which is
    started when ``start_broker`` (else it must run: a fresh one would not have the pipeline's
    topics). Use as ``@bootstrap_option`` or ``@bootstrap_option(start_broker=False)``."""
    default = ("the local broker, started if needed" if start_broker
               else "the running local broker of `traintrace broker start`")
    option = click.option("--bootstrap", envvar=BOOTSTRAP_ENV, default=None, metavar="HOST:PORT",
                          help=f"Kafka bootstrap servers. [env {BOOTSTRAP_ENV}; default: {default}]")
    return option if f is None else option(f)


def kafka_config_option(f: F) -> F:
    return click.option(
        "--kafka-config", envvar=CONFIG_ENV, default=None, metavar="FILE",
        type=click.Path(dir_okay=False),
        help="librdkafka properties every Kafka client gets (key=value lines, # comments), e.g. "
             f"security.protocol=SASL_SSL and the sasl.* / ssl.* of a secured cluster. [env {CONFIG_ENV}; "
             f"per setting: {PRECEDENCE}]")(f)


#: how the sources of a security setting rank, said in --help and docs/security.md
PRECEDENCE = "flag > KAFKA_* environment > --kafka-config file > default"
#: ``ctx.meta`` key of the security flags given (keyword of ``KafkaSettings.with_security`` -> value)
_SECURITY_META = "traintrace.kafka_security"
#: the security flags: (option, ``with_security`` keyword, environment variable, metavar, help)
_SECURITY_FLAGS = (
    ("--security-protocol", "protocol", "KAFKA_SECURITY_PROTOCOL", "PROTOCOL",
     "security.protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL. Each security flag wins over "
     f"its variable, which wins over --kafka-config ({PRECEDENCE})."),
    ("--sasl-mechanism", "mechanism", "KAFKA_SASL_MECHANISM", "MECHANISM",
     "sasl.mechanism: SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN."),
    ("--sasl-username", "username", "KAFKA_SASL_USERNAME", "USER", "sasl.username."),
    ("--sasl-password", "password", "KAFKA_SASL_PASSWORD", "PASSWORD",
     "sasl.password. Prefer the environment variable (a flag shows in the process list); it is "
     "never printed or logged."),
    ("--ssl-ca", "ca", "KAFKA_SSL_CA_LOCATION", "FILE", "ssl.ca.location: the CA (PEM) of the brokers."),
    ("--ssl-cert", "cert", "KAFKA_SSL_CERTIFICATE_LOCATION", "FILE",
     "ssl.certificate.location: the client's certificate (PEM, mutual TLS)."),
    ("--ssl-key", "key", "KAFKA_SSL_KEY_LOCATION", "FILE", "ssl.key.location: the client's key (PEM, mutual TLS)."),
)


def _keep(kw: str) -> Callable[[click.Context, click.Parameter, str | None], None]:
    """The callback of a security flag: a value given is kept in ``ctx.meta`` for
    :func:`kafka_settings` (not a parameter of the command, so every command taking
    :func:`kafka_options` gets the flags without a change)."""

    def keep(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value is not None:
            ctx.meta.setdefault(_SECURITY_META, {})[kw] = value

    return keep


def security_options(f: F) -> F:
    """``--security-protocol``, ``--sasl-*``, ``--ssl-*`` (:data:`_SECURITY_FLAGS`); a flag wins
    over its ``KAFKA_*`` variable and the ``--kafka-config`` file (:data:`PRECEDENCE`)."""
    for flag, kw, var, metavar, text in reversed(_SECURITY_FLAGS):
        f = click.option(flag, default=None, metavar=metavar, expose_value=False, callback=_keep(kw),
                         help=f"{text} [env {var}]")(f)
    return f


def kafka_options(start_broker: bool = False) -> Callable[[F], F]:
    """``--bootstrap``, ``--kafka-config`` and the security flags: what :func:`kafka_settings` takes."""

    def decorate(f: F) -> F:
        return bootstrap_option(kafka_config_option(security_options(f)), start_broker=start_broker)

    return decorate


def _security_flags() -> dict[str, str]:
    """The security flags given to the running command (none outside a command)."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(_SECURITY_META, {})) if ctx is not None else {}


def resolve_bootstrap(bootstrap: str | None, start: bool = True) -> tuple[str, bool]:
    """The bootstrap to use: the given one, or the local broker (started when ``start``).

    Returns (bootstrap, started_now).
    """
    if bootstrap:
        return bootstrap, False
    from streams.devtools.broker import BrokerError, LocalBroker, default_data_dir

    broker = LocalBroker(default_data_dir())
    status = broker.status()
    if status.get("running"):
        return status["bootstrap"], False
    if not start:
        fail(f"no Kafka broker: set {BOOTSTRAP_ENV} or run `traintrace broker start`")
    try:
        with err_console.status("starting the local Kafka broker (first run resolves the jars)"):
            return broker.start(), True
    except BrokerError as exc:
        fail(str(exc))


def secure_broker_dir() -> Path:
    """The data directory of the secure local broker of ``traintrace demo --secure``: beside the
    default broker's (``<broker dir>-secure``), so the two run side by side on their own ports."""
    from streams.devtools.broker import default_data_dir

    plain = default_data_dir()
    return plain.with_name(plain.name + "-secure")


def resolve_secure_broker() -> tuple[str, dict[str, str], bool]:
    """The secure local broker of :func:`secure_broker_dir`, started if needed (like
    :func:`resolve_bootstrap` does the default one). Returns (bootstrap, role -> client
    properties file, started_now)."""
    from streams.devtools.broker import BrokerError, LocalBroker

    broker = LocalBroker(secure_broker_dir(), secure=True)
    started = False
    if not broker.status().get("running"):
        try:
            with err_console.status("starting the secure local Kafka broker (SASL_SSL; first run makes its CA)"):
                broker.start()
        except BrokerError as exc:
            fail(str(exc))
        started = True
    status = broker.status()
    return status["bootstrap"], dict(status.get("client_properties") or {}), started


def kafka_settings(bootstrap: str | None, kafka_config: str | None = None, *,
                   start_broker: bool = False) -> "KafkaSettings":
    """The settings every Kafka client of the command is built from: the bootstrap of
    :func:`resolve_bootstrap`, the environment's client id, and the security properties of, per
    key, the flags of :func:`security_options`, else the ``KAFKA_*`` variables, else the file
    ``kafka_config`` (``--kafka-config``; else ``TRAINTRACE_KAFKA_CONFIG``). A bad setting
    fails (exit 2) naming it, never showing a secret."""
    from streams.kafka.errors import KafkaAdapterError
    from streams.kafka.settings import KafkaSettings

    bootstrap, _ = resolve_bootstrap(bootstrap, start=start_broker)
    env = dict(os.environ)
    if kafka_config is not None:
        env[CONFIG_ENV] = kafka_config
    try:
        settings = KafkaSettings.from_env(bootstrap=bootstrap, env=env)
        flags = _security_flags()
        return settings.with_security(**flags) if flags else settings
    except KafkaAdapterError as exc:
        fail(str(exc))


def topic_prefix_option(f: F) -> F:
    return click.option(
        "--topic-prefix", envvar=PREFIX_ENV, default=None, metavar="PREFIX",
        help=f"Prefix of every topic name (names themselves: TRAINTRACE_TOPIC_<NAME>, e.g. "
             f"TRAINTRACE_TOPIC_CONTROL). [env {PREFIX_ENV}]")(f)


def topics_for(prefix: str | None) -> "TopicNames":
    from streams.kafka.topics import TopicNames

    return TopicNames.from_env(prefix)


@contextmanager
def operator_errors() -> Iterator[None]:
    """One clear line on stderr: exit 1 for bad input, 2 for Kafka and the environment."""
    from streams.files.jsonl import JsonlError
    from streams.kafka.errors import KafkaAdapterError
    from streams.kafka.reader import ReaderError, TopicNotFound
    from streams.operator_commands.errors import OperatorError

    try:
        yield
    except JsonlError as exc:
        fail(str(exc), 1)
    except TopicNotFound as exc:
        fail(f"{exc} (create the pipeline's topics with `traintrace publish --create-topics`, "
             f"or check --topic-prefix / {PREFIX_ENV})")
    except (ReaderError, OperatorError, KafkaAdapterError) as exc:
        fail(str(exc))


# ---------------------------------------------------------------------------------- the fold


def click_options(settings: "Sequence[Setting]") -> Callable[[F], F]:
    """The command-line options of ``settings`` (:class:`streams.options.Setting`): the same
    flags, variables, types, bounds, defaults and help as the environment's reading of them
    (:func:`streams.options.read_env`), with ``[env VAR]`` in each help."""

    def decorate(f: F) -> F:
        for s in reversed(settings):
            extra = {"is_flag": True} if s.kind is bool else {"type": _click_type(s), "metavar": s.metavar}
            f = click.option(*_decls(s), envvar=s.env, default=s.default, help=_help(s),
                             show_default=s.default_text is None and s.default is not None
                             and not (s.kind is bool and s.negative is None), **extra)(f)
        return f

    return decorate


def _decls(s: "Setting") -> tuple[str, ...]:
    return (f"{s.flag}/{s.negative}", s.name) if s.negative else (s.flag,)


def _click_type(s: "Setting") -> click.ParamType:
    kind = s.kind
    if isinstance(kind, tuple):
        return click.Choice(list(kind))
    if kind is Path:
        return click.Path(path_type=Path, **dict(s.path))
    if kind is int and (s.minimum is not None or s.maximum is not None):
        return click.IntRange(min=None if s.minimum is None else int(s.minimum),
                              max=None if s.maximum is None else int(s.maximum), min_open=s.min_open)
    if kind is float and (s.minimum is not None or s.maximum is not None):
        return click.FloatRange(min=s.minimum, max=s.maximum, min_open=s.min_open)
    return click.INT if kind is int else click.FLOAT if kind is float else click.STRING


def _help(s: "Setting") -> str:
    default = f"; default {s.default_text}" if s.default_text else ""
    return f"{s.help} [env {s.env}{default}]"


def core_options(f: F) -> F:
    """The tunables of SPEC §5 and the seal policy (:data:`streams.options.CORE_SETTINGS`),
    shared by every command that folds events: a replay must fold with the processor's own
    settings."""
    from streams.options import CORE_SETTINGS

    return click_options(CORE_SETTINGS)(f)


def core_config(window: int, spike_factor: float, taint_margin: int, require_sealed_events: bool = False,
                job_keys: Path | None = None) -> "Config":
    """The :class:`~streams.core.state.Config` of :func:`core_options`; keys that do not load
    fail (one line)."""
    from streams.options import core_config as make

    try:
        return make({"window": window, "spike_factor": spike_factor, "taint_margin": taint_margin,
                     "require_sealed_events": require_sealed_events, "job_keys": job_keys})
    except ValueError as exc:
        fail(str(exc))


def until_options(f: F) -> F:
    """``--until`` and ``--until-offsets``: where a read of the topics stops."""
    from streams.audit.log import TOPICS

    f = click.option("--until-offsets", default=None, metavar="TOPIC:PART=OFF,...",
                     help="Stop each named topic partition before this offset (topics: "
                          f"{', '.join(TOPICS)}), e.g. events:0=1200,input:0=40.")(f)
    f = click.option("--until", "until_time", default=None, metavar="TIME",
                     help="Leave out records whose Kafka timestamp is after TIME (ms since the epoch, or "
                          "ISO 8601 such as 2026-11-29T18:30:00Z; UTC when no zone).")(f)
    return f


def parse_time_or_fail(text: str) -> int:
    """TIME of ``--until``/``--as-of`` in ms since the epoch; a bad one fails (exit 2)."""
    from streams.audit.log import parse_time

    try:
        return parse_time(text)
    except ValueError as exc:
        fail(str(exc))


def make_until(until_time: str | None, until_offsets: str | None) -> "Until | None":
    """The :class:`~streams.audit.log.Until` of :func:`until_options` (None: read to the end)."""
    from streams.audit.log import Until, parse_offsets

    if until_time is None and until_offsets is None:
        return None
    t_ms = parse_time_or_fail(until_time) if until_time else None
    try:
        return Until(t_ms, parse_offsets(until_offsets) if until_offsets else ())
    except ValueError as exc:
        fail(str(exc))
