"""``traintrace analyze``: fold a JSON Lines log offline and print the final state."""

from __future__ import annotations

from pathlib import Path

import json
import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.tree import Tree

from streams.cli.common import core_config, core_options, err_console, fail
from streams.cli.tables import halts_table, plans_table, titled_table
from streams.core.state import Config


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
@click.option("--processes", type=click.IntRange(min=1), default=None, metavar="N",
              help="Fold a large file in N processes at once, whole cohorts each (the same answer). "
                   "Default: the processors this process may use.")
@core_options
def analyze(file: str, as_json: bool, skip_invalid: bool, as_of_ms: int | None, grace_seconds: float | None,
            processes: int | None,
            window: int, spike_factor: float, taint_margin: int, require_sealed_events: bool = False,
            job_keys: Path | None = None) -> None:
    """Fold the events of FILE (JSON Lines, '-' for stdin) and print incidents, plans, halts.

    Uses the same core as the stream processor, so the answer equals what the live pipeline
    reaches on the same events. Exits 1 when a line is malformed (the message names the file,
    line and field), unless --skip-invalid.

    With --as-of TIME: which jobs were running, at which step, what was tainted, which plans the
    referee had decided (and, for an archive with lineage.control, which commands it had
    issued) at TIME.
    """
    config = core_config(window, spike_factor, taint_margin, require_sealed_events, job_keys)
    if as_of_ms is not None:
        _analyze_as_of(file, as_of_ms, config, skip_invalid, as_json,
                       None if grace_seconds is None else int(grace_seconds * 1000))
        return
    if grace_seconds is not None:
        raise click.UsageError("--grace-seconds only applies with --as-of")
    from streams.audit.analyze import analyze_file

    with _read_errors(file), _fold_progress(file != "-" and err_console.is_terminal and not as_json) as progress:
        analysis = analyze_file(file, config, skip_invalid=skip_invalid, progress=progress,
                                processes=processes or len(os.sched_getaffinity(0)))
    _print_skipped(analysis.skipped)
    if as_json:
        click.echo(json.dumps(analysis.result, indent=2, sort_keys=True))
        return
    render(Console(), analysis.result, analysis.events, len(analysis.skipped))


@contextmanager
def _read_errors(file: str, archive: bool = False) -> Iterator[None]:
    """A bad line exits 1, a file that cannot be read 2 (the message names the file); with
    ``archive`` also a file that is no readable archive."""
    from streams.audit.log import AuditLogError
    from streams.files.archive import ArchiveError
    from streams.files.jsonl import JsonlError

    try:
        yield
    except JsonlError as exc:
        fail(str(exc), 1)
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}")
    except (ArchiveError, AuditLogError, ValueError) as exc:
        if not archive:
            raise
        fail(f"cannot read {file}: {exc}")


@contextmanager
def _fold_progress(shown: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar of the bytes folded on stderr when ``shown``; yields its callback."""
    if not shown:
        yield None
        return
    with Progress(TextColumn("folding"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=err_console, transient=True) as bar:
        task = bar.add_task("fold", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _print_skipped(skipped: list[Any]) -> None:
    for s in skipped:
        err_console.print(f"[yellow]skipped[/yellow] {s}", highlight=False)


def _analyze_as_of(file: str, t_ms: int, config: Config, skip_invalid: bool, as_json: bool,
                   grace_ms: int | None) -> None:
    from streams.audit.asof import as_of, load_jsonl_log
    from streams.audit.log import load_archive
    from streams.cli.asof_view import render_as_of

    skipped = []
    with _read_errors(file, archive=True):
        if file != "-" and _is_archive(file):
            log = load_archive(file)
        else:
            log, skipped = load_jsonl_log(file, skip_invalid=skip_invalid)
    _print_skipped(skipped)
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
        console.print(halts_table(result["halts"]))
    if result["alerts"]:
        table = titled_table("Alerts", ("kind", "job", "checkpoint"))
        for a in result["alerts"]:
            table.add_row(a["kind"], a.get("job_id") or "", a.get("checkpoint_id") or "")
        console.print(table)
    console.print(f"{len(result['tainted_checkpoints'])} tainted checkpoint(s)"
                  + (": " + ", ".join(result["tainted_checkpoints"][:20])
                     + (" ..." if len(result["tainted_checkpoints"]) > 20 else "")
                     if result["tainted_checkpoints"] else ""))
