"""``traintrace audit``: re-check the log and every decision, without trusting the processor."""

from __future__ import annotations

import json
import os
import sys

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from streams.cli.common import fail
from streams.cli.export import make_until, until_options
from streams.cli.publish import bootstrap_option, operator_errors, read_bootstrap, topic_prefix_option, topics_for
from streams.core.state import Config

KEYS_ENV = "TRAINTRACE_TRUSTED_KEYS"


def core_options(f):
    f = click.option("--taint-margin", type=click.IntRange(min=0), envvar="TRAINTRACE_TAINT_MARGIN", default=0,
                     show_default=True, help="As the worker's. [env TRAINTRACE_TAINT_MARGIN]")(f)
    f = click.option("--spike-factor", type=click.FloatRange(min=0, min_open=True), envvar="TRAINTRACE_SPIKE_FACTOR",
                     default=3.0, show_default=True, help="As the worker's. [env TRAINTRACE_SPIKE_FACTOR]")(f)
    f = click.option("--window", type=click.IntRange(min=1), envvar="TRAINTRACE_WINDOW", default=10,
                     show_default=True, help="As the worker's. [env TRAINTRACE_WINDOW]")(f)
    return f


@click.command()
@click.argument("source", default="kafka", metavar="[SOURCE]")
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON (verdicts, findings, final state).")
@click.option("--report", "report_path", default=None, metavar="FILE", help="Also write the JSON report to FILE.")
@click.option("--trusted-keys", envvar=KEYS_ENV, default=None, metavar="DIR|FILE",
              help="Public keys (PEM) of the processor: every commitment must be signed by one of them. "
                   f"[env {KEYS_ENV}; default: signatures not checked]")
@click.option("--as-of", "as_of", default=None, metavar="TIME",
              help="Instead of auditing, show what was known at TIME (ms or ISO 8601): jobs, steps, taint, "
                   "commands issued.")
@click.option("--show", default=10, show_default=True, help="Findings printed per check.")
@until_options
@core_options
@bootstrap_option
@topic_prefix_option
def audit(source: str, as_json: bool, report_path: str | None, trusted_keys: str | None, as_of: str | None,
          show: int, until_time: str | None, until_offsets: str | None, window: int, spike_factor: float,
          taint_margin: int, bootstrap: str | None, topic_prefix: str | None) -> None:
    """Check a log: hash chains, the processor's input, every command, manifest and commitment.

    SOURCE is an archive written by `traintrace export`, a JSON Lines events file, or `kafka`
    (the default: the topics, read from the beginning with read_committed). The events are
    re-folded through the same core the processor runs, in the order it folded them, and every
    published command and manifest version must be exactly what that implies — none missing,
    none extra, none different. Each check prints PASS / FAIL / SKIPPED; a failure names the
    job, seq, topic[partition]@offset and the field that differs.

    Exit status: 0 when every check passes, 1 when one fails, 2 when the log cannot be read.
    """
    from streams.files.archive import ArchiveError
    from streams.files.jsonl import JsonlError
    from streams.audit.audit import audit as run_audit
    from streams.audit.log import AuditLogError, load, parse_time

    until = make_until(until_time, until_offsets)
    err = Console(stderr=True)
    names = topics_for(topic_prefix)
    if source == "kafka":
        bootstrap = read_bootstrap(bootstrap)
    elif not os.path.exists(source):
        fail(f"{source}: no such file (give an archive from `traintrace export`, a JSON Lines file, or `kafka`)")
    keys = None
    if trusted_keys:
        try:
            from streams.signing import load_keyring

            keys = load_keyring(trusted_keys)
        except Exception as exc:  # a bad key file is the user's input: say which
            fail(f"--trusted-keys {trusted_keys}: {exc}")
    config = Config(window=window, spike_factor=spike_factor, taint_margin=taint_margin)
    with operator_errors():
        try:
            with err.status(f"reading {source}", spinner="dots") if not as_json else _null():
                log = load(source, until, bootstrap=bootstrap, names=names)
        except (ArchiveError, AuditLogError) as exc:
            fail(str(exc))
        except JsonlError as exc:
            fail(str(exc), 2)
    if as_of is not None:
        try:
            t_ms = parse_time(as_of)
        except ValueError as exc:
            fail(str(exc))
        from streams.audit.asof import as_of as run_as_of

        answer = run_as_of(log, t_ms, config)
        if as_json:
            click.echo(json.dumps(answer, indent=2, sort_keys=True, default=str))
        else:
            from streams.cli.asof_view import render_as_of

            render_as_of(Console(), answer)
        return
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=None), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True, disable=as_json) as progress:
        tasks: dict[str, int] = {}

        def tick(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=total)
            progress.update(tasks[stage], completed=done, total=total)

        report = run_audit(log, config, keys, cut=until is not None, progress=tick)
    result = report.as_dict()
    if report_path:
        with open(report_path, "w") as fh:
            json.dump(result, fh, indent=2, sort_keys=True, default=str)
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True, default=str))
    else:
        render(Console(), report, show)
    sys.exit(0 if report.passed else 1)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def render(console: Console, report, show: int = 10) -> None:
    counts = ", ".join(f"{t} {n}" for t, n in sorted(report.meta.get("records", {}).items()))
    console.print(f"audit of [bold]{report.source}[/bold]: {report.events} events folded "
                  f"in {report.seconds:.2f}s ({counts})", highlight=False)
    table = Table(title_justify="left")
    for col in ("check", "verdict", "checked", "failed", "warnings", "what"):
        table.add_column(col)
    colour = {"PASS": "green", "FAIL": "red", "SKIPPED": "yellow"}
    from streams.audit.audit import TITLES

    for c in report.checks:
        table.add_row(c.name, f"[{colour[c.verdict]}]{c.verdict}[/]", str(c.checked), str(c.failed),
                      str(c.warned), TITLES[c.name])
    console.print(table)
    for c in report.checks:
        if c.failures:
            console.print(f"[red]{c.name}: {c.failed} failure(s)[/red]")
            for f in c.failures[:show]:
                console.print(f"  ✗ {f.line()}", highlight=False, soft_wrap=True)
            if c.failed > show:
                console.print(f"  … {c.failed - show} more (--json for all)")
        if c.warnings:
            console.print(f"[yellow]{c.name}: {c.warned} warning(s)[/yellow]")
            for f in c.warnings[:show]:
                console.print(f"  ! {f.line()}", highlight=False, soft_wrap=True)
        if c.counts:
            console.print(f"  [dim]{c.name}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.counts.items())) + "[/dim]",
                          highlight=False, soft_wrap=True)
        for n in c.notes[:show]:
            console.print(f"  [dim]{c.name}: {n}[/dim]", highlight=False, soft_wrap=True)
    unchecked = False
    for c in report.checks:
        sig = c.signatures() if not c.skipped else None
        if sig is None:
            continue
        # what was established about the commitments' signatures, never more
        unchecked = not sig["trusted_keys"] and c.checked > 0
        style = "yellow" if unchecked else ("green" if c.passed else "red")
        console.print(f"[bold {style}]{c.name}: {escape(c.summary)}[/]", highlight=False, soft_wrap=True)
    console.print(("[bold green]AUDIT PASSED[/]" if report.passed else "[bold red]AUDIT FAILED[/]")
                  + (" [yellow](commitment signatures NOT checked: no --trusted-keys)[/]" if unchecked else ""))
