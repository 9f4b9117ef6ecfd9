"""``traintrace publish``: a JSON Lines event log onto the live pipeline's events topic."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from streams.cli.common import (
    err_console,
    fail,
    kafka_options,
    kafka_settings,
    operator_errors,
    topic_prefix_option,
    topics_for,
)

ProgressFn = Callable[[str, int, int], None]


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--skip-invalid", is_flag=True,
              help="Report and skip malformed lines instead of refusing the whole file.")
@click.option("--create-topics", is_flag=True,
              help="Create the pipeline's topics that do not exist yet (8 partitions for events "
                   "and control) before publishing.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as JSON: topic, produced, by_type, skipped.")
@kafka_options(start_broker=False)
@topic_prefix_option
def publish(file: str, skip_invalid: bool, create_topics: bool, as_json: bool,
            bootstrap: str | None, kafka_config: str | None, topic_prefix: str | None) -> None:
    """Publish the events of FILE (JSON Lines, '-' for stdin) to the events topic.

    Every line is validated first: a malformed line stops with `FILE:LINE: field 'x' ...`,
    exit 1, and nothing is published (unless --skip-invalid, which skips and reports such
    lines). Events are Avro-encoded and produced keyed by job_id, in file order, by one
    idempotent producer, so each job's events stay in order. Every delivery is confirmed
    before the summary is printed; a failed delivery, an unreachable broker or a missing topic
    exit 2.
    """
    kafka = kafka_settings(bootstrap, kafka_config)
    topics = topics_for(topic_prefix)
    from streams.codec import Codec
    from streams.kafka.topics import ensure_topics, standard_topics
    from streams.operator_commands.publish import publish_file

    with operator_errors():
        if create_topics:
            ensure_topics(kafka, standard_topics(topics))
        try:
            with _progress(file != "-" and err_console.is_terminal and not as_json) as progress:
                result = publish_file(file, kafka, topics, Codec(), skip_invalid=skip_invalid,
                                      progress=progress)
        except OSError as exc:
            fail(f"cannot read {file}: {exc.strerror or exc}", 2)
    for skipped in result.skipped:
        err_console.print(f"[yellow]skipped[/yellow] {escape(str(skipped))}", highlight=False, soft_wrap=True)
    if as_json:
        click.echo(json.dumps({"bootstrap": kafka.bootstrap, **result.summary()}, indent=2, sort_keys=True))
        return
    _print_summary(result, kafka.bootstrap)


@contextmanager
def _progress(shown: bool) -> Iterator[ProgressFn | None]:
    """Bars of the reading and producing phases on stderr when ``shown``; yields their callback."""
    if not shown:
        yield None
        return
    with Progress(TextColumn("{task.description:<10}"), BarColumn(), TaskProgressColumn(),
                  TextColumn("{task.fields[detail]}"), TimeRemainingColumn(), console=err_console,
                  transient=True) as bar:
        tasks: dict[str, int] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase == "reading":
                detail = f"{done / 1e6:.1f}/{total / 1e6:.1f} MB" if total else f"{done / 1e6:.1f} MB"
            else:
                detail = f"{done}/{total} events"
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total or None, detail=detail)
            bar.update(tasks[phase], completed=done, total=total or None, detail=detail)

        yield progress


def _print_summary(result, bootstrap: str) -> None:
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
