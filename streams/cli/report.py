"""``traintrace report``: the lineage of a cohort as a self-contained HTML page and a PNG."""

from __future__ import annotations

from pathlib import Path

import json
import os
import re
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

import click
from rich.console import Console

from streams.cli.common import (
    core_config,
    core_options,
    err_console,
    fail,
    kafka_options,
    kafka_settings,
    topic_prefix_option,
    topics_for,
)
from streams.files.atomic import atomic_write

if TYPE_CHECKING:
    from streams.core.state import Config
    from streams.kafka.settings import KafkaSettings
    from streams.kafka.topics import TopicNames
    from streams.report import ReportModel


def _safe(cohort: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", cohort) or "unregistered"


def png_paths(png: str, cohorts: list[str]) -> dict[str, str]:
    """Where each cohort's PNG goes: ``png`` itself for one cohort, else ``<stem>-<cohort>.png``."""
    if len(cohorts) == 1:
        return {cohorts[0]: png}
    stem, ext = os.path.splitext(png)
    return {c: f"{stem}-{_safe(c)}{ext or '.png'}" for c in cohorts}


def _load_audit(path: str) -> dict[str, Any]:
    try:
        with open(path, "r", encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        fail(f"cannot read the audit report {path}: {exc.strerror}")
    except ValueError as exc:
        fail(f"{path}: not a JSON audit report ({exc})")
    if not isinstance(data, dict) or "passed" not in data:
        fail(f"{path}: not an audit report (want a JSON object with 'passed' and 'checks')")
    return data


@click.command()
@click.argument("source", metavar="SOURCE")
@click.option("--cohort", default=None, metavar="COHORT",
              help="Report only this cohort. Default: every cohort, each with its own section of the "
                   "HTML and its own PNG.")
@click.option("--out", "out", default="lineage.html", show_default=True, type=click.Path(dir_okay=False),
              help="The HTML file to write.")
@click.option("--png", "png", default=None, type=click.Path(dir_okay=False),
              help="The PNG to write [default: --out with .png]. With several cohorts (and no --cohort), "
                   "one PNG per cohort: <stem>-<cohort>.png, e.g. lineage-c1.png, lineage-c2.png.")
@click.option("--no-png", is_flag=True, help="Write the HTML only.")
@click.option("--audit", "audit_path", default=None, type=click.Path(dir_okay=False),
              help="An audit report (JSON from `traintrace audit`: passed, checks) to show as a verdict "
                   "block, linked from the page.")
@click.option("--json", "as_json", is_flag=True,
              help="Print what was written and the model's counts per cohort as JSON.")
@kafka_options(start_broker=False)
@topic_prefix_option
@core_options
def report(source: str, cohort: str | None, out: str, png: str | None, no_png: bool, audit_path: str | None,
           as_json: bool, bootstrap: str | None, kafka_config: str | None, topic_prefix: str | None, window: int,
           spike_factor: float, taint_margin: int, require_sealed_events: bool = False,
           job_keys: Path | None = None) -> None:
    """Draw the lineage of SOURCE: a JSON Lines events file, an archive (.avro) written by
    `traintrace export`, or `kafka` (the live topics, from the beginning to their current end).

    The log is folded through the same core as `analyze` (in the processor's order when the log
    has it). The picture has one lane per job (one row per incarnation) over training steps:
    checkpoints (tainted ones red), consumption edges (EVAL_ONLY dashed: never taints),
    divergence onsets, rollbacks and abandoned stretches (grey), the final plans' rollback targets
    (green ring, "↺ target"). The HTML is one self-contained file (nothing loaded from
    elsewhere) with the picture as inline SVG across the page and, below it, the incident
    summary: roots and verdicts, contaminated jobs with via checkpoint and path, secondary
    divergences, plans, the commands the control topic carried (archive, kafka), halts, alerts
    and the log's dead letters (original record, error kind, reason).

    Exit 2 when SOURCE cannot be read (missing file, bad line, not an archive, no broker) or the
    cohort is not in the log.
    """
    config = core_config(window, spike_factor, taint_margin, require_sealed_events, job_keys)
    audit = _load_audit(audit_path) if audit_path else None
    with _status(err_console.is_terminal and not as_json) as say:
        if source == "kafka":
            model = _fold(source, config, say, kafka_settings(bootstrap, kafka_config), topics_for(topic_prefix))
        else:
            model = _fold(source, config, say)
        cohorts = _cohorts(model, cohort, source)
        say("drawing")
        svgs = _svgs(model, cohorts)
        page = _page(model, cohorts, svgs, out, audit, audit_path)
        written_png = _write(model, cohorts, page, out, None if no_png else png or os.path.splitext(out)[0] + ".png",
                             audit)
    summary = _summary(model, cohorts, svgs, page, out, written_png, audit, audit_path)
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    _print_summary(Console(), model, cohorts, out, written_png, audit)


@contextmanager
def _status(shown: bool) -> Iterator[Callable[[str], None]]:
    """A status line on stderr when ``shown``; yields what updates it."""
    if not shown:
        yield lambda text: None
        return
    with err_console.status("reading and folding the log") as status:
        yield status.update


@contextmanager
def _log_errors(source: str) -> Iterator[None]:
    """A log that cannot be read: one line, exit 2."""
    from streams.audit.log import AuditLogError
    from streams.files.archive import ArchiveError
    from streams.files.jsonl import JsonlError
    from streams.kafka.reader import ReaderError

    try:
        yield
    except (JsonlError, ArchiveError, AuditLogError, ReaderError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot read {source}: {exc.strerror or exc}")


def _fold(source: str, config: "Config", say: Callable[[str], None], kafka: "KafkaSettings | None" = None,
          names: "TopicNames | None" = None) -> "ReportModel":
    """Read SOURCE (``kafka``: the topics of ``kafka`` and ``names``) and fold it."""
    from streams.audit.log import load
    from streams.report import build

    if source != "kafka" and not os.path.exists(source):
        fail(f"cannot read {source}: no such file")
    if source != "kafka" and os.path.isdir(source):
        fail(f"cannot read {source}: it is a directory")
    with _log_errors(source):
        return build(load(source, None, kafka, names), config, progress=lambda n: say(f"folding: {n} events"))


def _cohorts(model: "ReportModel", cohort: str | None, source: str) -> list[str]:
    """The cohorts to report: ``cohort`` (which must be in the log), else every one."""
    if cohort is None:
        return model.order()
    if cohort not in model.cohorts:
        known = ", ".join(model.cohorts[c].label for c in model.order()) or "none"
        fail(f"cohort {cohort!r} is not in {source} (cohorts: {known})")
    return [cohort]


def _svgs(model: "ReportModel", cohorts: list[str]) -> dict[str, Any]:
    from streams.report import render_svg

    return {c: render_svg(model.cohorts[c], source=model.source, events=model.cohorts[c].events, summary=False)
            for c in cohorts}


def _page(model: "ReportModel", cohorts: list[str], svgs: dict[str, Any], out: str, audit: dict[str, Any] | None,
          audit_path: str | None) -> str:
    from streams.report import render_html

    audit_href = None
    if audit_path:
        audit_href = os.path.relpath(os.path.abspath(audit_path), os.path.dirname(os.path.abspath(out)))
    return render_html(model, cohorts=cohorts, audit=audit, audit_path=audit_path, audit_href=audit_href, svgs=svgs)


def _write(model: "ReportModel", cohorts: list[str], page: str, out: str, png: str | None,
           audit: dict[str, Any] | None) -> dict[str, str]:
    """Write the page to ``out`` and, unless ``png`` is None, each cohort's PNG; returns the PNG
    written per cohort."""
    from streams.report import render_png

    written: dict[str, str] = {}
    try:
        atomic_write(out, page.encode("utf-8"))
        if png is None or not cohorts:
            return written
        for c, path in png_paths(png, cohorts).items():
            cm = model.cohorts[c]
            atomic_write(path, render_png(cm, source=os.path.basename(model.source) or model.source,
                                          events=cm.events, audit=audit))
            written[c] = path
    except OSError as exc:
        fail(f"cannot write {exc.filename or out}: {exc.strerror or exc}")
    return written


def _summary(model: "ReportModel", cohorts: list[str], svgs: dict[str, Any], page: str, out: str,
             written_png: dict[str, str], audit: dict[str, Any] | None, audit_path: str | None) -> dict[str, Any]:
    """The --json output: what was written and the model's counts per cohort."""
    return {
        "html": out,
        "html_bytes": len(page.encode("utf-8")),
        "png": written_png,
        "audit": ({"path": audit_path, "passed": bool(audit.get("passed"))} if audit is not None else None),
        "source": model.source,
        "origin": model.origin,
        "events": model.events,
        "undecodable": model.undecodable,
        "control_records": model.control_records,
        "dead_letters": len(model.dead_letters),
        "cohort_order": cohorts,
        "cohorts": {c: {**model.cohorts[c].counts(), "dropped_labels": svgs[c][1].dropped_labels,
                        "x_scale": svgs[c][1].x_scale} for c in cohorts},
    }


def _print_summary(con: Console, model: "ReportModel", cohorts: list[str], out: str, written_png: dict[str, str],
                   audit: dict[str, Any] | None) -> None:
    con.print(f"[bold]{model.events}[/bold] events folded from {model.source}"
              + (f", [yellow]{model.undecodable} undecodable[/yellow]" if model.undecodable else ""),
              highlight=False)
    for c in cohorts:
        k = model.cohorts[c].counts()
        con.print(f"cohort [bold]{model.cohorts[c].label}[/bold]: {k['lanes']} job(s), {k['incidents']} incident(s), "
                  f"{k['tainted_checkpoints']} tainted checkpoint(s), {k['plans']} plan(s), {k['halts']} halt(s)"
                  + (f"  → {written_png[c]}" if c in written_png else ""), highlight=False)
    if model.dead_letters:
        con.print(f"[yellow]{len(model.dead_letters)} dead letter(s)[/yellow] on the dead-letter topic "
                  "(listed in the page)",
                  highlight=False)
    con.print(f"wrote {out}" + (f" (audit {'PASSED' if audit.get('passed') else 'FAILED'})" if audit else ""),
              highlight=False)
