"""``traintrace export``: the audit topics into one Avro archive."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from streams.cli.common import (
    err_console,
    fail,
    kafka_options,
    kafka_settings,
    make_until,
    operator_errors,
    topic_prefix_option,
    topics_for,
    until_options,
)
from streams.audit.log import TOPICS
from streams.audit.export import CODECS, DEFAULT_TOPICS


@click.command()
@click.option("-o", "--out", "out", default="traintrace-log.avro", show_default=True, metavar="FILE",
              help="The archive to write (Avro object container; replaced atomically).")
@click.option("--topics", "topic_list", default=",".join(DEFAULT_TOPICS), show_default=True,
              help=f"Logical topics to export, comma-separated, of: {', '.join(TOPICS)}.")
@until_options
@click.option("--codec", type=click.Choice(CODECS), default=None,
              help="Avro container codec: null (uncompressed, readable by any Avro reader without extra "
                   "libraries), deflate, or snappy (fastavro needs cramjam to read it). "
                   "[default: snappy when cramjam is installed, else deflate]")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@kafka_options(start_broker=False)
@topic_prefix_option
def export(out: str, topic_list: str, until_time: str | None, until_offsets: str | None, codec: str | None,
           as_json: bool, bootstrap: str | None, kafka_config: str | None, topic_prefix: str | None) -> None:
    """Write the pipeline's topics to an Avro archive an auditor can check offline.

    Every record is kept byte for byte with its topic, partition, offset and timestamp, read
    from the beginning with read_committed up to the topic's end when the export starts (or
    --until). The archive embeds the schemas of every record type; it is snappy-compressed when
    cramjam is installed (--codec null: uncompressed). Check it with
    `traintrace audit FILE`; draw it with `traintrace report FILE`.
    """
    topics = tuple(t.strip() for t in topic_list.split(",") if t.strip())
    bad = [t for t in topics if t not in TOPICS]
    if bad:
        fail(f"unknown topic(s) {', '.join(bad)}: choose from {', '.join(TOPICS)}")
    until = make_until(until_time, until_offsets)
    kafka = kafka_settings(bootstrap, kafka_config)
    names = topics_for(topic_prefix)
    from streams.audit.export import export as run_export

    with operator_errors():
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=None),
                      TextColumn("{task.completed} records"), TimeElapsedColumn(),
                      console=err_console, transient=True, disable=as_json) as progress:
            tasks: dict[str, int] = {}

            def tick(topic: str, n: int) -> None:
                if topic not in tasks:
                    tasks[topic] = progress.add_task(f"{topic} ({getattr(names, TOPICS[topic])})", total=None)
                if n % 500 == 0:
                    progress.update(tasks[topic], completed=n)

            try:
                summary = run_export(kafka, names, out, until, topics, tick, codec=codec)
            except ValueError as exc:  # snappy without cramjam
                fail(str(exc))
    result = summary.as_dict()
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    c = Console()
    c.print(f"wrote [bold]{result['total']}[/bold] records ({result['bytes']:,} bytes, {result['codec']}) "
            f"to {out} in {result['seconds']:.1f}s")
    for t, n in result["records"].items():
        c.print(f"  {t:<12} {n:>8}  {getattr(names, TOPICS[t])}", highlight=False)
    c.print(f"check it: traintrace audit {out}")
