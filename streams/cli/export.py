"""``traintrace export``: the audit topics into one Avro archive."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from streams.cli.common import fail
from streams.cli.publish import bootstrap_option, operator_errors, read_bootstrap, topic_prefix_option, topics_for
from streams.audit.log import TOPICS, Until, parse_offsets, parse_time
from streams.audit.export import CODECS, DEFAULT_TOPICS


def until_options(f):
    f = click.option("--until-offsets", default=None, metavar="TOPIC:PART=OFF,...",
                     help="Stop each named topic partition before this offset (topics: "
                          f"{', '.join(TOPICS)}), e.g. events:0=1200,input:0=40.")(f)
    f = click.option("--until", "until_time", default=None, metavar="TIME",
                     help="Leave out records whose Kafka timestamp is after TIME (ms since the epoch, or "
                          "ISO 8601 such as 2026-11-29T18:30:00Z; UTC when no zone).")(f)
    return f


def make_until(until_time: str | None, until_offsets: str | None) -> Until | None:
    if until_time is None and until_offsets is None:
        return None
    try:
        return Until(parse_time(until_time) if until_time else None,
                     parse_offsets(until_offsets) if until_offsets else ())
    except ValueError as exc:
        fail(str(exc))
    raise AssertionError("unreachable")


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
@bootstrap_option
@topic_prefix_option
def export(out: str, topic_list: str, until_time: str | None, until_offsets: str | None, codec: str | None,
           as_json: bool, bootstrap: str | None, topic_prefix: str | None) -> None:
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
    bootstrap = read_bootstrap(bootstrap)
    names = topics_for(topic_prefix)
    from streams.audit.export import export as run_export

    console = Console(stderr=True)
    with operator_errors():
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=None),
                      TextColumn("{task.completed} records"), TimeElapsedColumn(),
                      console=console, transient=True, disable=as_json) as progress:
            tasks: dict[str, int] = {}

            def tick(topic: str, n: int) -> None:
                if topic not in tasks:
                    tasks[topic] = progress.add_task(f"{topic} ({getattr(names, TOPICS[topic])})", total=None)
                if n % 500 == 0:
                    progress.update(tasks[topic], completed=n)

            try:
                summary = run_export(bootstrap, names, out, until, topics, tick, codec=codec)
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
