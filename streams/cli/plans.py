"""``traintrace plans``: the plans and halts in force, folded from the control topic."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

from streams.cli.common import (
    err_console,
    kafka_options,
    kafka_settings,
    operator_errors,
    topic_prefix_option,
    topics_for,
)
from streams.cli.tables import halts_table, plans_table


@click.command()
@click.option("--json", "as_json", is_flag=True,
              help='Print {"plans": [...], "halts": [...]} (sorted by job_id; the plan shape of '
                   "SPEC §11 plus command_id).")
@kafka_options(start_broker=False)
@topic_prefix_option
def plans(as_json: bool, bootstrap: str | None, kafka_config: str | None, topic_prefix: str | None) -> None:
    """Show the rollback plans and halts in force on the live pipeline.

    Reads the control topic from the beginning to its current end (no consumer group, nothing
    committed) and keeps, per job, the last RollbackCommand / QuarantineNotice / PlanCleared
    (a PlanCleared means no plan; a superseded command is folded away) and the last
    HaltCommand (reason RELEASE means released). Records that do not decode are counted on
    stderr and otherwise ignored. Exit 2 when the broker or the topic is missing.
    """
    kafka = kafka_settings(bootstrap, kafka_config)
    topics = topics_for(topic_prefix)
    from streams.codec import Codec
    from streams.operators.plans import read_control

    with operator_errors():
        state = read_control(kafka, topics, Codec())
    if state.undecodable:
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(state.undecodable_reasons.items()))
        err_console.print(f"[yellow]warning:[/yellow] {state.undecodable} record(s) of {topics.control} "
                          f"could not be decoded and were ignored ({reasons})", highlight=False, soft_wrap=True)
    result = state.to_dict()
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    render(Console(), result, topics.control, state.records)


def render(console: Console, result: dict[str, Any], topic: str, records: int) -> None:
    console.print(f"[bold]{records}[/bold] control record(s) read from {topic}")
    if result["plans"]:
        console.print(plans_table(result["plans"], "Plans in force"))
    else:
        console.print("[green]No plan in force.[/green]")
    if result["halts"]:
        console.print(halts_table(result["halts"], "Halted jobs", reason_style="red"))
        console.print("[dim]Release a job with `traintrace release JOB`.[/dim]")
    else:
        console.print("[green]No job halted.[/green]")
