"""``traintrace smoke``: a local broker, every event type through Avro and Kafka, and the core."""

from __future__ import annotations

import json
import time
import uuid

import click
from rich.console import Console
from rich.table import Table

from streams.cli.common import bootstrap_option, fail, resolve_bootstrap
from streams.service.smoke import SmokeError, run_smoke


@click.command()
@bootstrap_option
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True,
              help="Partitions of the smoke topic.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def smoke(bootstrap: str | None, partitions: int, as_json: bool) -> None:
    """Round-trip the SPEC §12 worked example through a real Kafka broker and fold it.

    Starts the local broker unless KAFKA_BOOTSTRAP_SERVERS (or --bootstrap) names one, creates a
    fresh topic, produces every event Avro-encoded (single-object encoding) keyed by job_id,
    consumes them back, checks they are equal, and prints what the lineage core decides.
    """
    console = Console()
    bootstrap, started = resolve_bootstrap(bootstrap)
    topic = f"traintrace.smoke.{uuid.uuid4().hex[:12]}"
    t = time.perf_counter()
    try:
        result = run_smoke(bootstrap, topic, partitions)
    except SmokeError as exc:
        fail(str(exc), 1)
    elapsed = time.perf_counter() - t
    if as_json:
        click.echo(json.dumps({"bootstrap": bootstrap, "topic": topic, "seconds": elapsed,
                               **result.summary()}, indent=2, sort_keys=True))
        return
    console.print(f"Kafka at [bold]{bootstrap}[/bold]" + (" (started now)" if started else ""))
    table = Table(title=f"Round trip through {topic}", title_justify="left")
    table.add_column("event type")
    table.add_column("produced", justify="right")
    table.add_column("consumed equal", justify="right")
    for etype, (n_out, n_eq) in sorted(result.by_type.items()):
        table.add_row(etype, str(n_out), str(n_eq))
    console.print(table)
    console.print(f"{result.produced} events produced, {result.consumed} consumed, "
                  f"[green]{result.equal} equal[/green] in {elapsed:.1f}s")
    from streams.cli.analyze import render

    render(console, result.final, result.consumed, 0)
    if started:
        console.print("[dim]The local broker keeps running; stop it with `traintrace broker stop`.[/dim]")
