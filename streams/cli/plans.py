"""``traintrace plans``: the plans and halts in force, folded from the control topic."""

from __future__ import annotations

import json
from typing import Any

import click

from streams.signing import TRUSTED_KEYS_ENV
from rich.console import Console

from streams.cli.common import (
    err_console,
    kafka_options,
    kafka_settings,
    operator_errors,
    topic_prefix_option,
    topics_for,
    trusted_keyring,
)
from streams.cli.tables import halts_table, plans_table


@click.command()
@click.option("--json", "as_json", is_flag=True,
              help='Print {"plans": [...], "halts": [...], "signatures": {"checked": ..., "unverified": [...]}} '
                   "(sorted by job_id; the plan shape of SPEC §11 plus command_id).")
@click.option("--trusted-keys", envvar=TRUSTED_KEYS_ENV, default=None, metavar="DIR|FILE",
              type=click.Path(exists=True),
              help="Verify every control record with this keyring (the job clients' one) and leave out, "
                   "listed, the records that do not verify: a forged command is never shown as in force. "
                   "" f"[env {TRUSTED_KEYS_ENV}]")
@kafka_options(start_broker=False)
@topic_prefix_option
def plans(as_json: bool, trusted_keys: str | None, bootstrap: str | None, kafka_config: str | None,
          topic_prefix: str | None) -> None:
    """Show the rollback plans and halts in force on the live pipeline.

    Reads the control topic from the beginning to its current end (no consumer group, nothing
    committed) and keeps, per job, the last RollbackCommand / QuarantineNotice / PlanCleared
    (a PlanCleared means no plan; a superseded command is folded away) and the last
    HaltCommand (reason RELEASE means released). Records that do not decode are counted on
    stderr and otherwise ignored. With --trusted-keys a record whose signature does not verify
    (forged) is left out and listed; without it the output says signatures were not checked.
    Exit 2 when the broker or the topic is missing.
    """
    kafka = kafka_settings(bootstrap, kafka_config)
    topics = topics_for(topic_prefix)
    from streams.codec import Codec
    from streams.operator_commands.plans import read_control

    trusted = trusted_keyring(trusted_keys)
    with operator_errors():
        state = read_control(kafka, topics, Codec(), trusted=trusted)
    if state.undecodable:
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(state.undecodable_reasons.items()))
        err_console.print(f"[yellow]warning:[/yellow] {state.undecodable} record(s) of {topics.control} "
                          f"could not be decoded and were ignored ({reasons})", highlight=False, soft_wrap=True)
    result: dict[str, Any] = {**state.to_dict(), "signatures": {"checked": state.signatures_checked,
                                                                "unverified": state.unverified}}
    if state.unverified and not as_json:  # --json says it in "signatures"
        err_console.print(f"[red]warning:[/red] {len(state.unverified)} record(s) of {topics.control} did not verify "
                          "under the trusted keys and were left out (forged?): "
                          + ", ".join(f"{u['record']} for {u['job_id']} ({u['reason']})" for u in state.unverified[:5]),
                          highlight=False, soft_wrap=True)
    elif not state.signatures_checked and not as_json:
        err_console.print("[yellow]note:[/yellow] signatures NOT checked (no --trusted-keys): a forged command "
                          "on the control topic would show here as in force", highlight=False, soft_wrap=True)
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    render(Console(), result, topics.control, state.records)
    if state.unverified:
        from rich.table import Table

        t = Table(title="Left out: did not verify (forged?)")
        for col in ("partition@offset", "record", "job_id", "command_id", "reason"):
            t.add_column(col)
        for u in state.unverified:
            t.add_row(f"{u['partition']}@{u['offset']}", str(u["record"]), str(u["job_id"]),
                      str(u["command_id"] or "")[:12], f"{u['reason']}: {u['detail']}")
        Console().print(t)


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
