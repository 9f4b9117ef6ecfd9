"""``traintrace report``: the lineage of a cohort as a self-contained HTML page and a PNG."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import click
from rich.console import Console

from streams.cli.analyze import core_options
from streams.cli.publish import bootstrap_option, fail, read_bootstrap, topic_prefix_option, topics_for


def _safe(cohort: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", cohort) or "unregistered"


def png_paths(png: str, cohorts: list[str]) -> dict[str, str]:
    """Where each cohort's PNG goes: ``png`` itself for one cohort, else ``<stem>-<cohort>.png``."""
    if len(cohorts) == 1:
        return {cohorts[0]: png}
    stem, ext = os.path.splitext(png)
    return {c: f"{stem}-{_safe(c)}{ext or '.png'}" for c in cohorts}


def _write(path: str, data: bytes) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = f"{path}.partial"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


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
@bootstrap_option
@topic_prefix_option
@core_options
def report(source: str, cohort: str | None, out: str, png: str | None, no_png: bool, audit_path: str | None,
           as_json: bool, bootstrap: str | None, topic_prefix: str | None, window: int, spike_factor: float,
           taint_margin: int) -> None:
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
    from streams.files.archive import ArchiveError
    from streams.files.jsonl import JsonlError
    from streams.kafka.reader import ReaderError
    from streams.core.state import Config
    from streams.audit.log import AuditLogError, load
    from streams.report.report import build, render_html, render_png, render_svg

    err = Console(stderr=True)
    config = Config(window=window, spike_factor=spike_factor, taint_margin=taint_margin)
    audit = _load_audit(audit_path) if audit_path else None
    status = err.status("reading and folding the log") if (err.is_terminal and not as_json) else None
    try:
        if status is not None:
            status.start()
        try:
            if source == "kafka":
                log = load("kafka", bootstrap=read_bootstrap(bootstrap), names=topics_for(topic_prefix))
            else:
                if not os.path.exists(source):
                    fail(f"cannot read {source}: no such file")
                if os.path.isdir(source):
                    fail(f"cannot read {source}: it is a directory")
                log = load(source)

            def progress(n: int) -> None:
                if status is not None:
                    status.update(f"folding: {n} events")

            model = build(log, config, progress=progress)
        except JsonlError as exc:
            fail(str(exc))
        except (ArchiveError, AuditLogError, ReaderError) as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"cannot read {source}: {exc.strerror or exc}")

        if cohort is not None:
            if cohort not in model.cohorts:
                known = ", ".join(model.cohorts[c].label for c in model.order()) or "none"
                fail(f"cohort {cohort!r} is not in {source} (cohorts: {known})")
            cohorts = [cohort]
        else:
            cohorts = model.order()

        if status is not None:
            status.update("drawing")
        svgs = {c: render_svg(model.cohorts[c], source=model.source, events=model.cohorts[c].events, summary=False)
                for c in cohorts}
        audit_href = None
        if audit_path:
            audit_href = os.path.relpath(os.path.abspath(audit_path), os.path.dirname(os.path.abspath(out)))
        page = render_html(model, cohorts=cohorts, audit=audit, audit_path=audit_path, audit_href=audit_href,
                           svgs=svgs)
        written_png: dict[str, str] = {}
        try:
            _write(out, page.encode("utf-8"))
            if not no_png and cohorts:
                base = png or (os.path.splitext(out)[0] + ".png")
                for c, path in png_paths(base, cohorts).items():
                    cm = model.cohorts[c]
                    _write(path, render_png(cm, source=os.path.basename(model.source) or model.source,
                                            events=cm.events, audit=audit))
                    written_png[c] = path
        except OSError as exc:
            fail(f"cannot write {exc.filename or out}: {exc.strerror or exc}")
    finally:
        if status is not None:
            status.stop()

    summary = {
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
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    con = Console()
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
