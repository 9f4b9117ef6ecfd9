"""``traintrace publish``: a JSON Lines event log onto the live pipeline's events topic.

Also the options and error handling shared by the operators' commands (publish, watch, plans,
release).
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Iterator

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from streams.files.jsonl import JsonlError
from streams.kafka.errors import KafkaAdapterError
from streams.kafka.settings import BOOTSTRAP_ENV
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.cli.common import resolve_bootstrap

PREFIX_ENV = "TRAINTRACE_TOPIC_PREFIX"


def fail(message: str, code: int = 2) -> None:
    """One line on stderr (never wrapped, so scripts can match it) and exit ``code``."""
    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}", highlight=False,
                               soft_wrap=True)
    sys.exit(code)


def bootstrap_option(f):
    """``--bootstrap`` as in :mod:`streams.cli.common`, but these commands never start a broker."""
    return click.option(
        "--bootstrap", envvar=BOOTSTRAP_ENV, default=None, metavar="HOST:PORT",
        help=f"Kafka bootstrap servers. [env {BOOTSTRAP_ENV}; default: the running local broker "
             "of `traintrace broker start`]")(f)


def topic_prefix_option(f):
    return click.option(
        "--topic-prefix", envvar=PREFIX_ENV, default=None, metavar="PREFIX",
        help=f"Prefix of every topic name (names themselves: TRAINTRACE_TOPIC_<NAME>, e.g. "
             f"TRAINTRACE_TOPIC_CONTROL). [env {PREFIX_ENV}]")(f)


def topics_for(prefix: str | None) -> TopicNames:
    return TopicNames.from_env(prefix)


def read_bootstrap(bootstrap: str | None) -> str:
    """The given bootstrap, or the running local broker (never started here: the pipeline's
    topics would not exist on a fresh one)."""
    return resolve_bootstrap(bootstrap, start=False)[0]


@contextmanager
def operator_errors() -> Iterator[None]:
    """One clear line on stderr: exit 1 for bad input, 2 for Kafka and the environment."""
    from streams.kafka.reader import ReaderError, TopicNotFound
    from streams.operators.errors import OperatorError

    try:
        yield
    except JsonlError as exc:
        fail(str(exc), 1)
    except TopicNotFound as exc:
        fail(f"{exc} (create the pipeline's topics with `traintrace publish --create-topics`, "
             f"or check --topic-prefix / {PREFIX_ENV})")
    except (ReaderError, OperatorError, KafkaAdapterError) as exc:
        fail(str(exc))


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--skip-invalid", is_flag=True,
              help="Report and skip malformed lines instead of refusing the whole file.")
@click.option("--create-topics", is_flag=True,
              help="Create the pipeline's topics that do not exist yet (8 partitions for events "
                   "and control) before publishing.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as JSON: topic, produced, by_type, skipped.")
@bootstrap_option
@topic_prefix_option
def publish(file: str, skip_invalid: bool, create_topics: bool, as_json: bool,
            bootstrap: str | None, topic_prefix: str | None) -> None:
    """Publish the events of FILE (JSON Lines, '-' for stdin) to the events topic.

    Every line is validated first: a malformed line stops with `FILE:LINE: field 'x' ...`,
    exit 1, and nothing is published (unless --skip-invalid, which skips and reports such
    lines). Events are Avro-encoded and produced keyed by job_id, in file order, by one
    idempotent producer, so each job's events stay in order. Every delivery is confirmed
    before the summary is printed; a failed delivery, an unreachable broker or a missing topic
    exit 2.
    """
    err = Console(stderr=True)
    bootstrap = read_bootstrap(bootstrap)
    topics = topics_for(topic_prefix)
    from streams.codec import Codec
    from streams.operators.publish import publish_file

    bar: Progress | None = None
    progress_cb = None
    if file != "-" and err.is_terminal and not as_json:
        bar = Progress(TextColumn("{task.description:<10}"), BarColumn(), TaskProgressColumn(),
                       TextColumn("{task.fields[detail]}"), TimeRemainingColumn(), console=err,
                       transient=True)
        tasks: dict[str, int] = {}

        def progress_cb(phase: str, done: int, total: int) -> None:
            if phase == "reading":
                detail = f"{done / 1e6:.1f}/{total / 1e6:.1f} MB" if total else f"{done / 1e6:.1f} MB"
            else:
                detail = f"{done}/{total} events"
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total or None, detail=detail)
            bar.update(tasks[phase], completed=done, total=total or None, detail=detail)

    with operator_errors():
        if create_topics:
            ensure_topics(bootstrap, standard_topics(topics))
        try:
            if bar:
                bar.start()
            result = publish_file(file, bootstrap, topics, Codec(), skip_invalid=skip_invalid,
                                  progress=progress_cb)
        except OSError as exc:
            fail(f"cannot read {file}: {exc.strerror or exc}", 2)
        finally:
            if bar:
                bar.stop()
    for skipped in result.skipped:
        err.print(f"[yellow]skipped[/yellow] {escape(str(skipped))}", highlight=False, soft_wrap=True)
    if as_json:
        click.echo(json.dumps({"bootstrap": bootstrap, **result.summary()}, indent=2, sort_keys=True))
        return
    console = Console()
    console.print(f"Published [bold]{result.produced}[/bold] events to {escape(result.topic)} "
                  f"on {escape(bootstrap)}", highlight=False, soft_wrap=True)
    table = Table()
    table.add_column("event type")
    table.add_column("events", justify="right")
    for etype, n in sorted(result.by_type.items()):
        table.add_row(etype, str(n))
    table.add_section()
    table.add_row("[bold]total[/bold]", f"[bold]{result.produced}[/bold]")
    console.print(table)
    if result.skipped:
        console.print(f"[yellow]{len(result.skipped)} line(s) skipped[/yellow]")
    sys.stdout.flush()
