"""``traintrace audit``: re-check the log and every decision, without trusting the processor."""

from __future__ import annotations

from pathlib import Path

import json
import os
import sys
from contextlib import nullcontext

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from streams.cli.common import (
    core_config,
    core_options,
    err_console,
    fail,
    kafka_options,
    kafka_settings,
    make_until,
    operator_errors,
    parse_time_or_fail,
    topic_prefix_option,
    topics_for,
    until_options,
)

from streams.signing import TRUSTED_KEYS_ENV as KEYS_ENV


@click.command()
@click.argument("source", default="kafka", metavar="[SOURCE]")
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON (verdicts, findings, final state).")
@click.option("--report", "report_path", default=None, metavar="FILE", help="Also write the JSON report to FILE.")
@click.option("--trusted-keys", envvar=KEYS_ENV, default=None, metavar="DIR|FILE",
              help="Trusted public keys (PEM): a directory (processor/ and operator/ subdirectories, or the "
                   "processor keys themselves) or a file. Every commitment and command must be signed by a "
                   "key allowed to sign it. "
                   f"[env {KEYS_ENV}; default: signatures not checked]")
@click.option("--as-of", "as_of", default=None, metavar="TIME",
              help="Instead of auditing, show what was known at TIME (ms or ISO 8601): jobs, steps, taint, "
                   "commands issued.")
@click.option("--witness", "witness_keys", multiple=True, metavar="VKEY",
              help="A witness's cosignature verifier key (name+id+base64; VKEY@URL as witness-client takes is "
                   "read as VKEY); repeatable. Checks the cohorts' C2SP checkpoints (needs --trusted-keys).")
@click.option("--witnesses-required", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="Every cohort's fold log must have a checkpoint, a prefix of this log, validly cosigned by N "
                   "of the --witness keys; the failure names the witnesses missing.")
@click.option("--checkpoint", "checkpoints", multiple=True, metavar="FILE|DIR",
              type=click.Path(exists=True, path_type=Path),
              help="Checkpoint notes kept elsewhere (witness-client --out, another auditor's copy): each must be "
                   "a prefix of this log; two of one size with different roots are named a split view. A "
                   "directory: its *.note files. Repeatable.")
@click.option("--show", default=10, show_default=True, help="Findings printed per check.")
@until_options
@core_options
@kafka_options(start_broker=False)
@topic_prefix_option
def audit(source: str, as_json: bool, report_path: str | None, trusted_keys: str | None, as_of: str | None,
          witness_keys: tuple[str, ...], witnesses_required: int, checkpoints: tuple[Path, ...],
          show: int, until_time: str | None, until_offsets: str | None, window: int, spike_factor: float,
          taint_margin: int, bootstrap: str | None, kafka_config: str | None, topic_prefix: str | None,
          require_sealed_events: bool = False, job_keys: Path | None = None) -> None:
    """Check a log: hash chains, the processor's input, every command, manifest and commitment.

    SOURCE is an archive written by `traintrace export`, a JSON Lines events file, or `kafka`
    (the default: the topics, read from the beginning with read_committed). The events are
    re-folded through the same core the processor runs, in the order it folded them, and every
    published command and manifest version must be exactly what that implies — none missing,
    none extra, none different. Each check prints PASS / FAIL / SKIPPED; a failure names the
    job, seq, topic[partition]@offset and the field that differs.

    Exit status: 0 when every check passes, 1 when one fails, 2 when the log cannot be read.
    """
    until = make_until(until_time, until_offsets)
    names = topics_for(topic_prefix)
    kafka = None
    if source == "kafka":
        kafka = kafka_settings(bootstrap, kafka_config)
    elif not os.path.exists(source):
        fail(f"{source}: no such file (give an archive from `traintrace export`, a JSON Lines file, or `kafka`)")
    keys = _keyring(trusted_keys) if trusted_keys else None
    policy = _witness_policy(witness_keys, witnesses_required, checkpoints, keys is not None)
    config = core_config(window, spike_factor, taint_margin, require_sealed_events, job_keys)
    log = _load(source, until, kafka, names, as_json)
    if as_of is not None:
        _print_as_of(log, parse_time_or_fail(as_of), config, as_json)
        return
    from streams.audit.run import audit as run_audit

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=None), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=True, disable=as_json) as progress:
        tasks: dict[str, int] = {}

        def tick(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=total)
            progress.update(tasks[stage], completed=done, total=total)

        report = run_audit(log, config, keys, cut=until is not None, progress=tick, witnesses=policy)
    result = report.as_dict()
    if report_path:
        with open(report_path, "w") as fh:
            json.dump(result, fh, indent=2, sort_keys=True, default=str)
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True, default=str))
    else:
        render(Console(), report, show)
    sys.exit(0 if report.passed else 1)


def _keyring(trusted_keys: str):
    # with roles: processor/ keys sign commitments and commands, operator/ keys releases
    from streams.cli.common import trusted_keyring

    return trusted_keyring(trusted_keys)


def _witness_policy(witness_keys: tuple[str, ...], required: int, checkpoints: tuple[Path, ...], trusted: bool):
    """The ``witnesses`` check's policy (None when not asked for); one line and exit 2 for a bad
    key, a quorum above the keys given, an unreadable note, or no --trusted-keys."""
    if not (witness_keys or required or checkpoints):
        return None
    from streams.audit.witnessing import WitnessPolicy, WitnessPolicyError

    if not trusted:
        fail("--witness, --witnesses-required and --checkpoint need --trusted-keys: a checkpoint counts only "
             "once the processor's key opens it")
    saved = []
    for path in checkpoints:
        files = sorted(path.glob("*.note")) if path.is_dir() else [path]
        if path.is_dir() and not files:
            fail(f"--checkpoint {path}: no *.note file in the directory")
        for f in files:
            try:
                saved.append((str(f), f.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as exc:
                fail(f"--checkpoint {f}: cannot read it ({getattr(exc, 'strerror', None) or exc})")
    try:
        return WitnessPolicy.parse(witness_keys, required, saved)
    except WitnessPolicyError as exc:
        fail(f"--witness: {exc}" if "quorum" not in str(exc) else f"--witnesses-required {required}: {exc}")


def _load(source: str, until, kafka, names, as_json: bool):
    """The log of SOURCE (cut at ``until``); one line and exit 2 when it cannot be read."""
    from streams.audit.log import AuditLogError, load
    from streams.files.archive import ArchiveError
    from streams.files.jsonl import JsonlError

    with operator_errors():
        try:
            with err_console.status(f"reading {source}", spinner="dots") if not as_json else nullcontext():
                return load(source, until, kafka, names)
        except (ArchiveError, AuditLogError) as exc:
            fail(str(exc))
        except JsonlError as exc:
            fail(str(exc), 2)


def _print_as_of(log, t_ms: int, config, as_json: bool) -> None:
    from streams.audit.asof import as_of as run_as_of

    answer = run_as_of(log, t_ms, config)
    if as_json:
        click.echo(json.dumps(answer, indent=2, sort_keys=True, default=str))
    else:
        from streams.cli.asof_view import render_as_of

        render_as_of(Console(), answer)


def render(console: Console, report, show: int = 10) -> None:
    counts = ", ".join(f"{t} {n}" for t, n in sorted(report.meta.get("records", {}).items()))
    console.print(f"audit of [bold]{report.source}[/bold]: {report.events} events folded "
                  f"in {report.seconds:.2f}s ({counts})", highlight=False)
    table = Table(title_justify="left")
    for col in ("check", "verdict", "checked", "failed", "warnings", "what"):
        table.add_column(col)
    colour = {"PASS": "green", "FAIL": "red", "SKIPPED": "yellow"}
    from streams.audit.run import TITLES

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
