"""``traintrace retention``: which checkpoints a log's jobs may delete (SPEC §13), and why the
rest are kept."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from streams.cli.common import (click_options, core_config, core_options, err_console, fail, kafka_options,
                                kafka_settings, operator_errors, topic_prefix_option, topics_for, trusted_keyring)
from streams.signing import TRUSTED_KEYS_ENV
from streams.worker.settings import SETTLE_HORIZON

#: what each reason means, as the table says it
REASONS = {
    "tainted": "deletable: tainted, never again a rollback or restore target",
    "superseded": "deletable: a later settled clean checkpoint of the job's current ancestry (by) is the better target",
    "not-settled": "kept: not settled (the watermark has not passed its ts + the horizon)",
    "latest": "kept: the job's latest checkpoint, its resume point",
    "base": "kept: the base of an incarnation (by) with no settled clean checkpoint of its own yet",
    "needed": "kept: the newest settled clean checkpoint of the job's current ancestry, or off it",
}


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True), required=False)
@click_options([SETTLE_HORIZON])
@click.option("--job", "jobs", multiple=True, metavar="JOB", help="Only this job's checkpoints (repeatable).")
@click.option("--deletable", "only_deletable", is_flag=True, help="List only the checkpoints that may be deleted.")
@click.option("--json", "as_json", is_flag=True, help="Print the statuses as JSON.")
@click.option("--trusted-keys", envvar=TRUSTED_KEYS_ENV, default=None, metavar="DIR|FILE",
              type=click.Path(exists=True),
              help="Live (no FILE): verify every RetentionNotice with this keyring and leave out, listed, those "
                   f"that do not verify. [env {TRUSTED_KEYS_ENV}]")
@kafka_options(start_broker=False)
@topic_prefix_option
@core_options
def retention(file: str | None, settle_horizon: float | None, jobs: tuple[str, ...], only_deletable: bool,
              as_json: bool, trusted_keys: str | None, bootstrap: str | None, kafka_config: str | None,
              topic_prefix: str | None, window: int, spike_factor: float, taint_margin: int,
              require_sealed_events: bool = False, job_keys: Path | None = None) -> None:
    """Which checkpoints each job may delete (SPEC §13), and why the rest are kept.

    With FILE (JSON Lines, '-' for stdin): fold its events and decide, at the log's latest event
    time, with --settle-horizon: deletable (tainted, or superseded by a later settled clean
    checkpoint of the job's current ancestry) or kept, and why (not settled, the latest, the
    base of an incarnation, needed).

    Without FILE: the live pipeline's decisions, each job's last RetentionNotice on the control
    topic (the worker's own --settle-horizon applies; this command's is ignored)."""
    if file is None:
        _live(jobs, only_deletable, as_json, trusted_keys, bootstrap, kafka_config, topic_prefix)
        return
    from streams.audit.analyze import analyze_file
    from streams.audit.retention import retention_report
    from streams.cli.analyze import _read_errors

    config = core_config(window, spike_factor, taint_margin, require_sealed_events, job_keys)
    with _read_errors(file):
        analysis = analyze_file(file, config)
    report = retention_report(analysis, None if settle_horizon is None else int(settle_horizon * 1000), jobs)
    if report["missing_jobs"]:
        fail(f"no checkpoint of {', '.join(report['missing_jobs'])} in {file}")
    if only_deletable:
        report["jobs"] = {j: [r for r in rows if r["deletable"]] for j, rows in report["jobs"].items()}
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    render(Console(), report)


def render(console: Console, report: dict) -> None:
    horizon = report["settle_horizon_ms"]
    if horizon is None:
        err_console.print("traintrace retention: no --settle-horizon: nothing is settled, every checkpoint is kept",
                          highlight=False)
    table = Table(title=f"retention (horizon {'none' if horizon is None else f'{horizon / 1000:g} s'}, "
                        f"watermark {report['watermark_ms']})")
    for col in ("job", "checkpoint", "settled", "status", "deletable", "why", "by"):
        table.add_column(col)
    for job, rows in report["jobs"].items():
        for r in rows:
            table.add_row(job, r["checkpoint_id"], "yes" if r["settled"] else "no",
                          "tainted" if r["tainted"] else "clean", "[green]yes[/green]" if r["deletable"] else "no",
                          r["reason"], r["by"] or "")
    console.print(table)
    console.print(f"{report['deletable']} of {report['checkpoints']} checkpoint(s) may be deleted")
    for reason in sorted({r["reason"] for rows in report["jobs"].values() for r in rows}):
        console.print(f"  {reason}: {REASONS[reason]}", highlight=False)


def _live(jobs: tuple[str, ...], only_deletable: bool, as_json: bool, trusted_keys: str | None,
          bootstrap: str | None, kafka_config: str | None, topic_prefix: str | None) -> None:
    from streams.operator_commands.retention import notice_rows, read_notices

    kafka = kafka_settings(bootstrap, kafka_config)
    topics = topics_for(topic_prefix)
    with operator_errors():
        got = read_notices(kafka, topics, trusted=trusted_keyring(trusted_keys), jobs=jobs)
    if got["missing_jobs"]:
        fail(f"no RetentionNotice for {', '.join(got['missing_jobs'])} on {topics.control} "
             "(is the worker running with --settle-horizon?)")
    rows = notice_rows(got["jobs"])
    if only_deletable:
        rows = [r for r in rows if r["deletable"]]
    if as_json:
        click.echo(json.dumps({**got, "checkpoints": rows}, indent=2, sort_keys=True, default=str))
        return
    if not got["signatures_checked"]:
        err_console.print("[yellow]note:[/yellow] signatures NOT checked (no --trusted-keys)", highlight=False)
    for u in got["unverified"]:
        err_console.print(f"[red]left out:[/red] {u['record']} for {u['job_id']} at {u['partition']}@{u['offset']}: "
                          f"{u['reason']}", highlight=False, soft_wrap=True)
    if not got["jobs"]:
        click.echo(f"no RetentionNotice on {topics.control}: no worker runs with --settle-horizon (every "
                   "checkpoint is kept)")
        return
    table = Table(title=f"retention decided by the referee ({topics.control})")
    for col in ("job", "checkpoint", "deletable", "why", "by", "notice"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["job_id"], r["checkpoint_id"], "[green]yes[/green]" if r["deletable"] else "no", r["reason"],
                      r["by"] or "", f"v{r['version']}")
    console = Console()
    console.print(table)
    n = sum(r["deletable"] for r in rows)
    console.print(f"{n} of {len(rows)} checkpoint(s) may be deleted")
    for reason in sorted({r["reason"] for r in rows}):
        console.print(f"  {reason}: {REASONS.get(reason, reason)}", highlight=False)
