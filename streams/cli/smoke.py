"""``traintrace smoke``: a local broker, every event type through Avro and Kafka, and the core."""

from __future__ import annotations

import json
import sys
import tempfile
import time

import click
from rich.console import Console
from rich.table import Table

from streams.cli.common import bootstrap_option, fail, resolve_bootstrap
from streams.demo.smoke import LiveResult, SmokeError, SmokeResult, run_live, run_smoke, smoke_topic


@click.command()
@bootstrap_option
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True,
              help="Partitions of the smoke topic.")
@click.option("--live/--no-live", default=True, show_default=True,
              help="Also run the live pipeline: a real worker folds the example and publishes its commands.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def smoke(bootstrap: str | None, partitions: int, live: bool, as_json: bool) -> None:
    """Round-trip the SPEC §12 worked example through a real Kafka broker and fold it.

    Starts the local broker unless KAFKA_BOOTSTRAP_SERVERS (or --bootstrap) names one, creates a
    fresh topic, produces every event Avro-encoded (single-object encoding) keyed by job_id,
    consumes them back, checks they are equal, and prints what the lineage core decides. With
    --live (the default) it then starts a real processor worker on fresh topics, publishes the
    example to lineage.events and reads the commands the worker put on lineage.control.
    """
    console = Console()
    if live:  # fail before starting anything when the worker's packages are missing
        from streams.cli.extras import require

        require("smoke --live", alternative="traintrace smoke --no-live")
    bootstrap, started = resolve_bootstrap(bootstrap)
    topic = smoke_topic()
    t = time.perf_counter()
    try:
        result = run_smoke(bootstrap, topic, partitions)
    except SmokeError as exc:
        fail(str(exc), 1)
    elapsed = time.perf_counter() - t
    live_result = None
    if live:
        with tempfile.TemporaryDirectory(prefix="traintrace-smoke-") as tmp:
            try:
                if as_json:
                    live_result = run_live(bootstrap, tmp)
                else:
                    with console.status("live pipeline: starting a worker, publishing, waiting for its commands"):
                        live_result = run_live(bootstrap, tmp)
            except SmokeError as exc:
                fail(str(exc), 1)
    if as_json:
        out = {"bootstrap": bootstrap, "topic": topic, "seconds": elapsed, **result.summary()}
        if live_result is not None:
            out["live"] = live_result.summary()
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    console.print(f"Kafka at [bold]{bootstrap}[/bold]" + (" (started now)" if started else ""))
    _print_round_trip(console, topic, result, elapsed)
    if live_result is not None:
        _print_live(console, live_result)
        if not live_result.equal_to_offline:
            sys.exit(1)
    if started:
        console.print("[dim]The local broker keeps running; stop it with `traintrace broker stop`.[/dim]")


def _print_round_trip(console: Console, topic: str, result: SmokeResult, elapsed: float) -> None:
    """What went through the topic, and what the lineage core decides of it."""
    from streams.cli.analyze import render

    table = Table(title=f"Round trip through {topic}", title_justify="left")
    table.add_column("event type")
    table.add_column("produced", justify="right")
    table.add_column("consumed equal", justify="right")
    for etype, (n_out, n_eq) in sorted(result.by_type.items()):
        table.add_row(etype, str(n_out), str(n_eq))
    console.print(table)
    console.print(f"{result.produced} events produced, {result.consumed} consumed, "
                  f"[green]{result.equal} equal[/green] in {elapsed:.1f}s")
    render(console, result.final, result.consumed, 0)


def _print_live(console: Console, live_result: LiveResult) -> None:
    """The commands the live worker published, and whether they are the offline fold's."""
    table = Table(title="Live pipeline: commands a real worker published on lineage.control",
                  title_justify="left")
    for col in ("job", "inc", "action", "target", "command"):
        table.add_column(col)
    for p in live_result.plans:
        table.add_row(p["job_id"], str(p["incarnation"]), p["action"], p["target_checkpoint_id"] or "",
                      p["command_id"][:12])
    console.print(table)
    verdict = "[green]equal to the offline fold[/green]" if live_result.equal_to_offline else \
        "[red]DIFFERENT from the offline fold[/red]"
    console.print(f"{live_result.manifests} manifest version(s), {live_result.commitments} commitment(s); "
                  f"quiescent {live_result.seconds_to_quiescence:.1f}s after publishing; {verdict}")
