"""``traintrace analyze``: fold a JSON Lines log offline and print the final state."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from streams.cli.common import plans_table
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.tree import Tree

from streams.files.jsonl import JsonlError
from streams.core.state import Config
from streams.audit.analyze import analyze_file


def core_options(f):
    """The tunables of SPEC §5, shared by every command that folds events."""
    f = click.option("--taint-margin", type=click.IntRange(min=0), default=0, show_default=True,
                     envvar="TRAINTRACE_TAINT_MARGIN",
                     help="T1 taints checkpoints with step >= onset - margin. [env TRAINTRACE_TAINT_MARGIN]")(f)
    f = click.option("--spike-factor", type=click.FloatRange(min=0, min_open=True), default=3.0,
                     show_default=True, envvar="TRAINTRACE_SPIKE_FACTOR",
                     help="A loss above factor x the rolling median is a divergence. "
                          "[env TRAINTRACE_SPIKE_FACTOR]")(f)
    f = click.option("--window", type=click.IntRange(min=1), default=10, show_default=True,
                     envvar="TRAINTRACE_WINDOW",
                     help="Finite losses in the detector's rolling median. [env TRAINTRACE_WINDOW]")(f)
    return f


def _parse_as_of(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    from streams.audit.log import parse_time

    try:
        return parse_time(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="Print the exact JSON of SPEC §11.")
@click.option("--skip-invalid", is_flag=True,
              help="Report and skip malformed lines instead of stopping at the first one.")
@click.option("--as-of", "as_of_ms", metavar="TIME", callback=_parse_as_of, default=None,
              help="Print what was known at TIME instead of the final state: the events with ts <= "
                   "TIME folded, without the end-of-log step. TIME: ms since the epoch or ISO 8601 "
                   "(UTC when no zone). FILE may also be an audit archive (.avro). See docs/as-of.md.")
@click.option("--grace-seconds", type=click.FloatRange(min=0), default=None,
              help="With --as-of: a consumption unresolved for this long at TIME halts its job "
                   "(the live referee's grace period). Default: only list unresolved sources.")
@core_options
def analyze(file: str, as_json: bool, skip_invalid: bool, as_of_ms: int | None, grace_seconds: float | None,
            window: int, spike_factor: float, taint_margin: int) -> None:
    """Fold the events of FILE (JSON Lines, '-' for stdin) and print incidents, plans, halts.

    Uses the same core as the stream processor, so the answer equals what the live pipeline
    reaches on the same events. Exits 1 when a line is malformed (the message names the file,
    line and field), unless --skip-invalid.

    With --as-of TIME: which jobs were running, at which step, what was tainted, which plans the
    referee had decided (and, for an archive with lineage.control, which commands it had
    issued) at TIME.
    """
    err = Console(stderr=True)
    config = Config(window=window, spike_factor=spike_factor, taint_margin=taint_margin)
    if as_of_ms is not None:
        _analyze_as_of(err, file, as_of_ms, config, skip_invalid, as_json,
                       None if grace_seconds is None else int(grace_seconds * 1000))
        return
    if grace_seconds is not None:
        raise click.UsageError("--grace-seconds only applies with --as-of")
    progress_cb = None
    bar = None
    if file != "-" and err.is_terminal and not as_json:
        bar = Progress(TextColumn("folding"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                       console=err, transient=True)
        task = bar.add_task("fold", total=None)
        bar.start()

        def progress_cb(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

    try:
        analysis = analyze_file(file, config, skip_invalid=skip_invalid, progress=progress_cb)
    except JsonlError as exc:
        if bar:
            bar.stop()
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        sys.exit(1)
    except OSError as exc:
        if bar:
            bar.stop()
        err.print(f"[red]error:[/red] cannot read {file}: {exc.strerror}", highlight=False)
        sys.exit(2)
    if bar:
        bar.stop()
    for skipped in analysis.skipped:
        err.print(f"[yellow]skipped[/yellow] {skipped}", highlight=False)
    if as_json:
        click.echo(json.dumps(analysis.result, indent=2, sort_keys=True))
        return
    render(Console(), analysis.result, analysis.events, len(analysis.skipped))


def _analyze_as_of(err: Console, file: str, t_ms: int, config: Config, skip_invalid: bool, as_json: bool,
                   grace_ms: int | None) -> None:
    from streams.cli.asof_view import render_as_of
    from streams.audit.asof import as_of, load_jsonl_log
    from streams.files.archive import ArchiveError
    from streams.audit.log import AuditLogError, load_archive

    skipped = []
    try:
        if file != "-" and _is_archive(file):
            log = load_archive(file)
        else:
            log, skipped = load_jsonl_log(file, skip_invalid=skip_invalid)
    except JsonlError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        sys.exit(1)
    except OSError as exc:
        err.print(f"[red]error:[/red] cannot read {file}: {exc.strerror}", highlight=False)
        sys.exit(2)
    except (ArchiveError, AuditLogError, ValueError) as exc:
        err.print(f"[red]error:[/red] cannot read {file}: {exc}", highlight=False)
        sys.exit(2)
    for s in skipped:
        err.print(f"[yellow]skipped[/yellow] {s}", highlight=False)
    answer = as_of(log, t_ms, config, grace_ms=grace_ms)
    if as_json:
        click.echo(json.dumps(answer, indent=2, sort_keys=True))
        return
    render_as_of(Console(), answer)


def _is_archive(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"Obj\x01"


def render(console: Console, result: dict[str, Any], events: int, skipped: int) -> None:
    console.print(f"[bold]{events}[/bold] events folded"
                  + (f", [yellow]{skipped} skipped[/yellow]" if skipped else ""))
    if not result["incidents"]:
        console.print("[green]No divergence incident.[/green]")
    for inc in result["incidents"]:
        root = inc["root"]
        colour = "red" if inc["verdict"] == "INTERNAL" else "magenta"
        tree = Tree(f"[bold {colour}]incident {inc['incident_id'][:12]}[/]  {inc['verdict']}  root "
                    f"[bold]{root['job_id']}[/] inc {root['incarnation']} onset step {root['onset_step']}")
        contaminated = tree.add(f"contaminated ({len(inc['contaminated'])})")
        for c in inc["contaminated"]:
            path = " -> ".join(c.get("path") or [])
            contaminated.add(f"{c['job_id']} inc {c['incarnation']} via {c['via_checkpoint_id']}"
                             + (f"  [dim]{path}[/dim]" if path else ""))
        if inc["secondary_divergences"]:
            sec = tree.add(f"secondary divergences ({len(inc['secondary_divergences'])})")
            for s in inc["secondary_divergences"]:
                sec.add(f"{s['job_id']} inc {s['incarnation']} onset step {s['onset_step']}  EXTERNAL")
        console.print(tree)
    if result["plans"]:
        console.print(plans_table(result["plans"], "Plans"))
    if result["halts"]:
        table = Table(title="Halts", title_justify="left")
        table.add_column("job")
        table.add_column("reason")
        table.add_column("detail")
        for h in result["halts"]:
            table.add_row(h["job_id"], h["reason"], h.get("detail", ""))
        console.print(table)
    if result["alerts"]:
        table = Table(title="Alerts", title_justify="left")
        for col in ("kind", "job", "checkpoint"):
            table.add_column(col)
        for a in result["alerts"]:
            table.add_row(a["kind"], a.get("job_id") or "", a.get("checkpoint_id") or "")
        console.print(table)
    console.print(f"{len(result['tainted_checkpoints'])} tainted checkpoint(s)"
                  + (": " + ", ".join(result["tainted_checkpoints"][:20])
                     + (" ..." if len(result["tainted_checkpoints"]) > 20 else "")
                     if result["tainted_checkpoints"] else ""))
