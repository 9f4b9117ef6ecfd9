"""``traintrace watch``: the operators' alerts as they arrive."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from streams.cli.common import (
    err_console,
    kafka_options,
    kafka_settings,
    operator_errors,
    topic_prefix_option,
    topics_for,
)
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.records import Alert

_KIND_STYLE = {
    "INCIDENT_OPENED": "bold red",
    "INCIDENT_WIDENED": "red",
    "REATTRIBUTED": "magenta",
    "HALT": "bold yellow",
    "UNRECORDED_SHARING": "yellow",
    "COMMAND_UNACKNOWLEDGED": "cyan",
}


def _time(ts: Any) -> str:
    try:
        return datetime.fromtimestamp(int(ts) / 1000).strftime("%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ts)


def _cells(alert: Alert) -> list[str]:
    return [
        _time(alert.ts),
        alert.kind or "",
        alert.cohort_id or "",
        alert.job_id or "",
        alert.checkpoint_id or "",
        (alert.incident_id or "")[:12],
        alert.message or "",
    ]


def _line(alert: Alert) -> Text:
    cells = _cells(alert)
    text = Text(cells[0] + " ")
    text.append(cells[1], style=_KIND_STYLE.get(cells[1], "bold"))
    text.append(" " + " ".join(c or "-" for c in cells[2:6]) + "  " + cells[6])
    return text


_COLUMNS = ("time", "kind", "cohort", "job", "checkpoint", "incident", "message")
_NARROW = ("time", "kind", "job", "checkpoint", "message")  # below 120 columns


def _table(rows: list[Alert], topic: str, total: int, width: int = 200) -> Table:
    shown = _COLUMNS if width >= 120 else _NARROW
    table = Table(title=f"Alerts on {topic}", title_justify="left", expand=True,
                  caption=f"{total} alert(s); Ctrl-C to stop", caption_justify="left")
    for col in shown:
        if col == "message":
            table.add_column(col, overflow="fold", ratio=1, min_width=20)
        elif col in ("time", "kind", "incident"):
            table.add_column(col, no_wrap=True, min_width=len(col))
        else:
            table.add_column(col, overflow="ellipsis", no_wrap=True, max_width=24)
    for alert in rows:
        cells = dict(zip(_COLUMNS, _cells(alert)))
        table.add_row(*(Text(cells[c], style=_KIND_STYLE.get(cells[c], "bold") if c == "kind" else "")
                        for c in shown))
    return table


@click.command()
@click.option("--json", "as_json", is_flag=True,
              help="Print each alert as one JSON object per line (flushed as it arrives).")
@click.option("--from-beginning", is_flag=True,
              help="Start with the alerts already on the topic instead of only new ones.")
@click.option("--max-messages", type=click.IntRange(min=1), default=None, hidden=True,
              help="Exit after this many alerts (scripts, tests).")
@click.option("--idle-timeout", type=click.FloatRange(min=0), default=None, hidden=True,
              help="Exit after this many seconds without a record (scripts, tests).")
@kafka_options(start_broker=False)
@topic_prefix_option
def watch(as_json: bool, from_beginning: bool, max_messages: int | None,
          idle_timeout: float | None, bootstrap: str | None, kafka_config: str | None,
          topic_prefix: str | None) -> None:
    """Follow the alerts topic and show alerts as they arrive.

    A live table (time, kind, cohort, job, checkpoint, incident, message) on a terminal; one
    line per alert otherwise; one JSON object per line with --json. Only new alerts unless
    --from-beginning. Records that are not alerts are skipped with a note on stderr. Ctrl-C
    stops (exit 0); exit 2 when the broker or the topic is missing.
    """
    kafka = kafka_settings(bootstrap, kafka_config)
    topics = topics_for(topic_prefix)
    try:
        _watch(kafka, topics, as_json, from_beginning, max_messages, idle_timeout)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `traintrace watch --json | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _watch(kafka: KafkaSettings, topics: TopicNames, as_json: bool, from_beginning: bool,
           max_messages: int | None, idle_timeout: float | None) -> None:
    from streams.codec import Codec
    from streams.operator_commands.alerts import alerts

    def on_skip(msg: Any, reason: str) -> None:
        err_console.print(f"[yellow]skipped[/yellow] {escape(f'{msg.topic}[{msg.partition}]@{msg.offset}')}: "
                          f"{escape(reason)}", highlight=False, soft_wrap=True)

    stream = alerts(kafka, topics, Codec(), follow=True, from_beginning=from_beginning,
                    idle_timeout=idle_timeout, max_messages=max_messages, on_skip=on_skip)
    console = Console()
    with operator_errors():
        if as_json:
            for alert in stream:
                sys.stdout.write(json.dumps({"type": alert.NAME, **alert.to_value()}, sort_keys=True) + "\n")
                sys.stdout.flush()
        elif console.is_terminal:
            _live(console, stream, topics.alerts)
        else:
            for alert in stream:
                console.print(_line(alert), highlight=False, soft_wrap=True)
                sys.stdout.flush()


def _live(console: Console, stream: Any, topic: str) -> None:
    rows: list[Alert] = []
    total = 0
    with Live(_table(rows, topic, total, console.size.width), console=console,
              refresh_per_second=4, vertical_overflow="visible") as live:
        for alert in stream:
            total += 1
            rows.append(alert)
            keep = max(5, console.size.height - 8)
            del rows[:-keep]
            live.update(_table(rows, topic, total, console.size.width))
