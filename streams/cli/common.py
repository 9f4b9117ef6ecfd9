"""Options and helpers shared by the commands that talk to Kafka."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from streams.kafka.settings import BOOTSTRAP_ENV

err_console = Console(stderr=True)


def bootstrap_option(f):
    return click.option(
        "--bootstrap", envvar=BOOTSTRAP_ENV, default=None, metavar="HOST:PORT",
        help=f"Kafka bootstrap servers. [env {BOOTSTRAP_ENV}; default: the local broker, "
             "started if needed]")(f)


def fail(message: str, code: int = 2) -> None:
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)  # one line in logs
    sys.exit(code)


def resolve_bootstrap(bootstrap: str | None, start: bool = True) -> tuple[str, bool]:
    """The bootstrap to use: the given one, or the local broker (started when ``start``).

    Returns (bootstrap, started_now).
    """
    if bootstrap:
        return bootstrap, False
    from streams.kafka.broker import BrokerError, LocalBroker, default_data_dir

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
    raise AssertionError("unreachable")


def plans_table(plans, title: str):
    """The rich table of SPEC §11 plans, shared by ``analyze`` and ``plans``."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in ("job", "inc", "action", "target", "step", "incidents", "command"):
        table.add_column(col)
    for p in plans:
        target = p["target_checkpoint_id"] or ""
        if p["action"] == "QUARANTINE":
            target = ", ".join(p.get("quarantined_checkpoint_ids", []))
        colour = {"ROLLBACK": "yellow", "QUARANTINE": "magenta"}.get(p["action"], "red")
        table.add_row(p["job_id"], str(p["incarnation"]), f"[{colour}]{p['action']}[/]", target,
                      "" if p["target_step"] is None else str(p["target_step"]),
                      ", ".join(i[:12] for i in p["incident_ids"]), p["command_id"][:12])
    return table
