"""``traintrace demo``: six real training jobs share state, one diverges, the pipeline rolls back
exactly the affected ones (the README's main job)."""

from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import click
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from streams.cli.common import bootstrap_option, fail, resolve_bootstrap, resolve_secure_broker, secure_broker_dir


@click.command()
@bootstrap_option
@click.option("--gate", type=click.Choice(["warn", "refuse"]), default="warn", show_default=True,
              help="The jobs' load-time gate. warn: a tainted checkpoint is loaded anyway (logged), so "
                   "j2 copies j1's blown-up weights and is rolled back too. refuse: j2's client refuses "
                   "that load, j2 trains on with its own weights, and only j1 is rolled back.")
@click.option("--workers", type=click.IntRange(min=1, max=4), default=1, show_default=True,
              help="Processor workers to run (each a `traintrace worker` process).")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the run keeps its journals, checkpoints, logs, events.jsonl and report.json "
                   "(new or empty; kept). Default: a temporary directory, removed at the end unless "
                   "--keep or the run went wrong.")
@click.option("--keep", is_flag=True, help="Keep the temporary work directory and the run's topics "
                                           "(removed by default once the run succeeded).")
@click.option("--json", "as_json", is_flag=True, help="Print the final report as one JSON object.")
@click.option("--framework", type=click.Choice(["numpy", "torch"]), default="numpy", show_default=True,
              envvar="TRAINTRACE_DEMO_FRAMEWORK",
              help="What the jobs train with. torch: the same MLPs in PyTorch, every checkpoint, load "
                   "and rollback through traintrace.integrations.torch (needs the torch extra: "
                   "pip install 'traintrace[torch]'; scripts/demo --framework torch installs it).")
@click.option("--secure", is_flag=True,
              help="Run on the secure local broker (SASL_SSL, SCRAM-SHA-512, ACLs; started if needed, data "
                   "beside the default broker's with -secure), each part as its own role (workers: "
                   "processor, jobs: trainer, plans and alerts: operator, read-back, export and audit: "
                   "auditor), the jobs obeying only control signed by a key of WORK_DIR/keys.")
@click.option("--ui-port", type=click.IntRange(min=1, max=65535), default=None,
              help="Serve the live lineage page (`traintrace ui`) of the run on this port while it runs, "
                   "e.g. 6070: open http://127.0.0.1:6070/ (it stops when the run ends).")
def demo(bootstrap: str | None, gate: str, workers: int, work_dir: Path | None, keep: bool,
         as_json: bool, framework: str, secure: bool, ui_port: int | None = None) -> None:
    """Run the demo cohort live: six real training jobs (numpy MLPs, one process each) share
    checkpoints through PBT exploits, weight averaging and a reference model; j1's learning rate
    blows up, j2 copies j1's checkpoint after the onset, j3 another one from before it.

    Starts the local Kafka broker unless KAFKA_BOOTSTRAP_SERVERS (or --bootstrap) names one, and
    --workers real processor workers on fresh topics. The workers detect the divergence and
    publish the plans; the affected jobs restore their target checkpoints, acknowledge, and
    finish; the clean jobs are not touched. Prints a live view while it runs (on a terminal), then
    the report: the incident, every command and its acknowledgement, the time from the divergence
    to the last acknowledged rollback, each job's end. The run's events are written to
    WORK_DIR/events.jsonl (`traintrace analyze` reads it).

    The workers sign their commitments with a key generated into WORK_DIR/keys; at the end the
    run's topics are exported to WORK_DIR/log.avro, audited with that keyring (WORK_DIR/audit.json)
    and drawn (WORK_DIR/lineage.html, WORK_DIR/lineage.png); the report's Audit section has each
    check's verdict and the commands that redo it. Exit status 1 when the story (the audit
    included) did not come out as expected.

    The job clients apply commands without checking their signatures unless --secure (local demo
    only: the report says so). With --secure they are given the keyring WORK_DIR/keys
    (processor/ and operator/ keys, throw-away) and the report names each role's principal.
    """
    from streams.demo.errors import DemoError, WorkDirNotEmpty
    from streams.demo.leftovers import make_work_dir, tidy_up

    console = _console()
    if framework == "torch":
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            fail("--framework torch needs PyTorch: pip install 'traintrace[torch]' (or scripts/demo --framework torch)")
    kafka, bootstrap, started = _kafka(bootstrap, secure)
    try:
        work, temporary = make_work_dir(work_dir)
    except WorkDirNotEmpty as exc:
        fail(f"--work-dir {exc.path} is not empty: give a new or empty directory")
    report: dict[str, Any] | None = None
    interrupted = False
    try:
        with _sigterm_as_interrupt():
            if not as_json:
                _print_intro(console, bootstrap, started, secure)
            report = _run(console, kafka, work, gate, workers, as_json, framework, ui_port)
    except DemoError as exc:
        fail(str(exc), 1)
    except KeyboardInterrupt:
        interrupted = True
        click.echo("interrupted: the jobs and workers are stopped", err=True)
        sys.exit(130)
    finally:
        kept = tidy_up(kafka, work, report, temporary=temporary, keep=keep, interrupted=interrupted)
        if kept and report is None:
            click.echo(f"work directory kept: {work}", err=True)
    assert report is not None
    _print_outcome(console, report, bootstrap, started, as_json)
    if not report.get("story_ok"):
        sys.exit(1)


def _kafka(bootstrap: str | None, secure: bool) -> tuple[Any, str, bool]:
    """What the run's clients are built from: the bootstrap servers (plain), or each role's
    settings on the secure local broker (``--secure``); the bootstrap; whether a broker was
    started now."""
    if not secure:
        bootstrap, started = resolve_bootstrap(bootstrap)
        return bootstrap, bootstrap, started
    from click.core import ParameterSource

    from streams.demo.errors import DemoError
    from streams.demo.roles import DemoKafka, secure_role_files

    if click.get_current_context().get_parameter_source("bootstrap") == ParameterSource.COMMANDLINE:
        fail("--secure runs on the secure local broker (its roles' credentials are its own): drop --bootstrap")
    bootstrap, files, started = resolve_secure_broker()
    try:
        return DemoKafka.from_files(bootstrap, secure_role_files({"client_properties": files})), bootstrap, started
    except DemoError as exc:
        fail(f"{exc} (data directory {secure_broker_dir()})")


def _console() -> Console:
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=150)  # a log file or a pipe: wide tables rather than wrapped cells
    return console


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the run as Ctrl-C does (everything it started is stopped)."""
    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_intro(console: Console, bootstrap: str, started: bool, secure: bool) -> None:
    from streams.demo.scenario import describe

    console.print(f"Kafka at [bold]{bootstrap}[/bold]" + (" (started now)" if started else "")
                  + (" [green]secure: SASL_SSL, each role its own credentials, signed control verified[/green]"
                     if secure else ""))
    console.print(Panel(describe(), title="the story", title_align="left", expand=False))


def _run(console: Console, kafka: Any, work: Path, gate: str, workers: int, as_json: bool,
         framework: str = "numpy", ui_port: int | None = None) -> dict[str, Any]:
    """The run, shown as it goes: a live view on a terminal, a line per phase in a log, nothing
    with --json."""
    from streams.demo.run import run_demo

    if console.is_terminal and not as_json:
        from rich.live import Live

        with Live(console=console, auto_refresh=False, transient=False,
                  redirect_stdout=False, redirect_stderr=False) as live:
            return run_demo(kafka, work, gate=gate, workers=workers, live=True, framework=framework,
                            ui_port=ui_port, on_tick=lambda st: live.update(render_live(st), refresh=True))
    if as_json:
        return run_demo(kafka, work, gate=gate, workers=workers, framework=framework, ui_port=ui_port)
    console.print(f"running: {workers} worker(s), 6 jobs ({framework}), gate {gate}; work dir {work}"
                  + (f"; live page http://127.0.0.1:{ui_port}/" if ui_port else ""))
    seen: list[str] = []

    def phase_line(st: Any) -> None:  # one line per phase, no redrawing
        if not seen or seen[-1] != st.phase:
            seen.append(st.phase)
            console.print(f"[dim]{st.elapsed:6.1f}s  {st.phase}[/dim]", highlight=False)

    return run_demo(kafka, work, gate=gate, workers=workers, on_tick=phase_line, framework=framework,
                    ui_port=ui_port)


def _print_outcome(console: Console, report: dict[str, Any], bootstrap: str, started: bool,
                   as_json: bool) -> None:
    from streams.demo.outcome import for_json

    report["broker"] = {"bootstrap": bootstrap, "started_now": started}
    if as_json:
        click.echo(json.dumps(for_json(report), indent=2, sort_keys=True))
        return
    render_report(console, report)
    if started:
        stop = "traintrace broker stop" + (f" --data-dir {secure_broker_dir()}" if (report.get("kafka") or {}).get("secure")
                                           else "")
        console.print(f"[dim]The local broker keeps running; stop it with `{stop}`.[/dim]", highlight=False)


# ------------------------------------------------------------------------------ rendering


_STATUS_STYLE = {"SUCCEEDED": "green", "FAILED": "red", "CANCELLED": "red", "CRASHED": "red",
                 "TIMED OUT": "red", "diverged": "bold red", "restored": "yellow", "training": "cyan"}


def _loss(x: Any) -> str:
    if x is None:
        return ""
    try:
        return f"{float(x):.4g}"
    except (TypeError, ValueError):
        return str(x)


def render_live(state: Any) -> Group:
    """The live view: one row per job, the last alerts."""
    title = f"{state.phase}" + (f" ({state.progress})" if getattr(state, "progress", "") else "")
    table = Table(title=f"{title} — {state.elapsed:.1f}s", title_justify="left", expand=False)
    for col, just in (("job", "left"), ("status", "left"), ("step", "right"), ("inc", "right"),
                      ("loss", "right"), ("referee sees", "right"), ("last", "left")):
        table.add_column(col, justify=just)
    for j, v in sorted(state.jobs.items()):
        seen = ""
        if v.referee_step is not None:
            seen = f"step {v.referee_step} inc {v.referee_incarnation}"
            if v.referee_halted:
                seen += f" HALTED {v.referee_halted}"
        table.add_row(j, Text(v.status, style=_STATUS_STYLE.get(v.status, "")), str(v.step),
                      str(v.incarnation), _loss(v.loss), seen, v.detail)
    alerts = Table.grid(padding=(0, 1))
    for a in state.alerts[-8:]:
        alerts.add_row(Text(a.get("kind", ""), style="bold yellow"), a.get("job_id") or "",
                       a.get("message", ""))
    parts: list[Any] = [table]
    if state.alerts:
        parts.append(Panel(alerts, title=f"lineage.alerts ({len(state.alerts)})", title_align="left",
                           expand=False))
    return Group(*parts)


def render_report(console: Console, r: dict[str, Any]) -> None:
    """The final report, for a person."""
    _print_incidents(console, r)
    console.print(_commands_table(r["commands"]))
    console.print(_jobs_table(r))
    _print_timing(console, r)
    _print_control(console, r)
    if r.get("audit") is not None:
        render_audit(console, r["audit"], bool(r.get("work_dir_kept")))
    _print_verdict(console, r)
    _print_work_dir(console, r)


def _print_incidents(console: Console, r: dict[str, Any]) -> None:
    """A panel per incident: root, contaminated jobs, secondary divergences, tainted checkpoints."""
    for x in r["incidents"]:
        root = x["root"]
        lines = [f"[bold]{x['verdict']}[/bold] divergence of [bold]{root['job_id']}[/bold] "
                 f"(incarnation {root['incarnation']}) at step {root['onset_step']}"]
        if x["contaminated"]:
            lines.append("contaminated:")
            for c in x["contaminated"]:
                lines.append(f"  {c['job_id']} (incarnation {c['incarnation']}) via {c['via_checkpoint_id']}"
                             f"  path {' → '.join(c.get('path') or [])}")
        else:
            lines.append("contaminated: nobody")
        for s in x.get("secondary_divergences") or []:
            lines.append(f"secondary divergence: {s['job_id']} (incarnation {s['incarnation']}) at step "
                         f"{s['onset_step']}, a symptom of this incident")
        lines.append(f"tainted checkpoints: {', '.join(x.get('tainted_checkpoints') or []) or 'none'}")
        lines.append(f"[dim]{x.get('manifest_versions', 0)} manifest version(s); commitment root "
                     f"{(x.get('commitment_root') or '')[:16]}[/dim]")
        console.print(Panel("\n".join(lines), title=f"incident {x['incident_id'][:12]} (from {r['incidents_from']})",
                            title_align="left", expand=False))
    if not r["incidents"]:
        console.print("[red]no incident was found[/red]")


def _commands_table(commands: list[dict[str, Any]]) -> Table:
    table = Table(title="Commands on lineage.control and their acknowledgements", title_justify="left")
    for col in ("job", "inc", "record", "target", "command", "acknowledged by", "status"):
        table.add_column(col)
    for c in commands:
        ack = ""
        if c["acknowledged_by_seq"] is not None:
            ack = f"RolledBack seq {c['acknowledged_by_seq']}"
            if c.get("ack_latency_s") is not None:
                ack += f" (+{c['ack_latency_s']:.3f}s)"
        status = c.get("status", "")
        style = "green" if status == "acknowledged" else ("red" if status == "NOT ACKNOWLEDGED" else "dim")
        target = c["target_checkpoint_id"] or ""
        if c["type"] == "PlanCleared":
            target = f"ends {str(c['supersedes'])[:12]}"
        record = c["action"] if c["type"] == "RollbackCommand" else c["type"]
        table.add_row(c["job_id"], str(c["incarnation"]), record, target,
                      c["command_id"][:12], ack, Text(status, style=style))
    return table


def _jobs_table(r: dict[str, Any]) -> Table:
    jt = Table(title=f"Jobs ({r['steps']} steps each)", title_justify="left")
    for col, just in (("job", "left"), ("status", "left"), ("final step", "right"), ("inc", "right"),
                      ("rolled back", "left"), ("final loss", "right"), ("eval acc", "right"),
                      ("shared", "left")):
        jt.add_column(col, justify=just)
    for j, v in sorted(r["jobs"].items()):
        rb = ", ".join(f"to {x['checkpoint_id']}" for x in v.get("restored", [])) or "no"
        shared = [f"{m} {ck} @{s}" for ck, m, s in v.get("consumed", [])]
        shared += [f"REFUSED {m} {ck} @{s}" for ck, m, s in v.get("refused", [])]
        acc = v.get("eval_accuracy")
        jt.add_row(j, Text(str(v["status"]), style=_STATUS_STYLE.get(v["status"], "")), str(v["final_step"]),
                   str(v["incarnation"]), rb, _loss(v["final_loss"]), f"{acc:.3f}" if acc is not None else "",
                   "; ".join(shared))
    return jt


def _print_timing(console: Console, r: dict[str, Any]) -> None:
    t = r["timing"]
    if t.get("divergence_to_last_ack_s") is not None:
        console.print(f"From the divergence ({t['divergence_from']}) to the first command: "
                      f"[bold]{t['divergence_to_first_command_s']:.3f}s[/bold]; to the last acknowledged "
                      f"rollback: [bold]{t['divergence_to_last_ack_s']:.3f}s[/bold].")
    console.print(f"Whole run {t['total_s']:.1f}s (setup {t.get('setup_s', 0):.1f}s, jobs "
                  f"{t.get('jobs_s', 0):.1f}s, reading back {t.get('readback_s', 0):.1f}s, export + audit + "
                  f"report {t.get('audit_trail_s', 0):.1f}s); "
                  f"{r['workers']} worker(s), gate {r['gate']}, {r['events']['count']} events.")
    if r.get("alerts"):
        console.print("Alerts: " + ", ".join(f"{a['kind']} {a.get('job_id') or ''}".strip() for a in r["alerts"]))


def _print_control(console: Console, r: dict[str, Any]) -> None:
    """Who could write to the cluster and whose commands the jobs obeyed: one line for the plain
    demo (the jobs do not check signatures), the roles and the signatures for ``--secure``."""
    k, c = r.get("kafka") or {}, r.get("control") or {}
    if not k.get("secure"):
        console.print("[yellow]Control not verified by the jobs:[/yellow] they apply commands without checking "
                      "signatures (local demo only; --secure verifies them).", highlight=False)
        return
    who = ", ".join(f"{role} {p}" for role, p in k.get("principals", {}).items())
    keys = ", ".join(f"{role} key {kid}" for role, kid in (c.get("signed_by") or {}).items())
    verified = (c.get("audit_signatures") or {}).get("command signatures verified", 0)
    console.print(f"Secure: {k.get('protocol')} ({k.get('mechanism')}), each role its own credentials: {who}.",
                  highlight=False)
    console.print(f"Control signed and verified: trusted {keys} ({c.get('trusted_keys')}); "
                  f"{c.get('jobs_verifying', 0)} job(s) verified every command, applied {c.get('commands_applied', 0)}, "
                  f"rejected {c.get('commands_rejected', 0)}; the audit verified {verified} command signature(s).",
                  highlight=False)


def _print_verdict(console: Console, r: dict[str, Any]) -> None:
    """Whether the story came out as expected (the failed checks if not), and the run's notes."""
    failed = [c for c in r["checks"] if not c["ok"]]
    if r["story_ok"]:
        console.print(f"[green]✓ the story came out as expected[/green] ({len(r['checks'])} checks: root, "
                      f"verdict, scope, commands, acknowledgements, restored jobs, untouched jobs, "
                      f"analyze of the exported log, audit of the log, lineage report)")
    else:
        console.print("[red]✗ the story did NOT come out as expected:[/red]")
        for c in failed:
            console.print(f"  [red]{c['check']}[/red]: {c['detail']}")
    for n in r.get("notes") or []:
        console.print(f"[yellow]note:[/yellow] {n}")


def _print_work_dir(console: Console, r: dict[str, Any]) -> None:
    """Where the run's files are, or that they are gone."""
    if r.get("work_dir_kept"):
        logs = r["logs"]
        console.print(f"Work directory: {r['work_dir']}\n"
                      f"  events:  {logs['events']}  (traintrace analyze {logs['events']})\n"
                      f"  report:  {logs['report']}\n"
                      f"  jobs:    {logs['jobs']}/<job>.log, journals in {logs['journals']}\n"
                      f"  workers: {', '.join(logs['workers'])}\n"
                      f"  topics:  {r['topics']['prefix']}lineage.*  "
                      f"(TRAINTRACE_TOPIC_PREFIX={r['topics']['prefix']} traintrace plans)")
    else:
        console.print(f"[dim]Work directory {r['work_dir']} and the run's topics removed (--keep or "
                      f"--work-dir DIR keeps them, with events.jsonl for `traintrace analyze`).[/dim]")


_VERDICT_STYLE = {"PASS": "green", "FAIL": "red", "SKIPPED": "yellow", "ERROR": "red"}


def render_audit(console: Console, a: dict[str, Any], kept: bool) -> None:
    """The Audit section: the export, each check's verdict, the files, how to redo it."""
    if a.get("checks"):
        console.print(_audit_table(a))
    for c in a.get("checks") or []:
        for line in c.get("failures") or []:
            console.print(f"  [red]✗ {c['name']}:[/red] {line}", highlight=False, soft_wrap=True)
        for n in c.get("notes") or []:
            console.print(f"  [dim]{c['name']}: {n}[/dim]", highlight=False, soft_wrap=True)
    _print_audit_verdict(console, a)
    if kept:
        _print_audit_files(console, a)
    else:
        console.print("[dim]  log.avro, audit.json, lineage.html and lineage.png were written to the work "
                      "directory, removed with it (--keep or --work-dir DIR keeps them).[/dim]")


def _audit_table(a: dict[str, Any]) -> Table:
    log = a.get("log") or {}
    title = "Audit of the demo's log"
    if log:
        title += f" ({log.get('total', 0)} records exported"
        title += f", {a.get('events', 0)} events re-folded)" if a.get("checks") else ")"
    table = Table(title=title, title_justify="left")
    for col, just in (("check", "left"), ("verdict", "left"), ("checked", "right"), ("failed", "right"),
                      ("what", "left")):
        table.add_column(col, justify=just)
    for c in a.get("checks") or []:
        what = c.get("title", "")
        if c["name"] == "commitments" and c["checked"]:
            what += f"; {a.get('signed_commitments', 0)} signed by key {a.get('key_id')}"
        table.add_row(c["name"], Text(c["verdict"], style=_VERDICT_STYLE.get(c["verdict"], "")),
                      str(c["checked"]), str(c["failed"]), what)
    return table


def _print_audit_verdict(console: Console, a: dict[str, Any]) -> None:
    t = a.get("timing") or {}
    took = ", ".join(f"{k} {t[k + '_s']:.2f}s" for k in ("export", "audit", "report") if k + "_s" in t)
    if a.get("error"):
        console.print(f"[bold red]AUDIT {'ERROR' if a.get('verdict') == 'ERROR' else a.get('verdict')}[/]: "
                      f"{a['error']}" + (f" ({took})" if took else ""), highlight=False)
    else:
        console.print(("[bold green]AUDIT PASSED[/]" if a.get("passed") else "[bold red]AUDIT FAILED[/]")
                      + (f" ({took})" if took else ""), highlight=False)


def _print_audit_files(console: Console, a: dict[str, Any]) -> None:
    """The files of the audit trail and the commands that redo it."""
    p, log, files = a["paths"], a.get("log") or {}, a.get("files") or {}
    console.print(f"  log:     {p['log']}" + (f"  ({log.get('bytes', 0):,} bytes)" if log else ""), highlight=False)
    console.print(f"  audit:   {p['audit']}", highlight=False)
    console.print(f"  report:  {p['html']}" + (f"  ({files['html_bytes']:,} bytes)" if files.get("html_bytes") else ""),
                  highlight=False)
    console.print(f"  picture: {p['png']}" + (f"  ({files['png_bytes']:,} bytes)" if files.get("png_bytes") else ""),
                  highlight=False)
    console.print(f"  keys:    {p['keys']}  (key id {a.get('key_id')}; processor.key signs, the .pub verifies)",
                  highlight=False)
    console.print("  redo it:", highlight=False)
    for cmd in a.get("commands") or []:
        console.print(f"    {cmd}", highlight=False, soft_wrap=True)


if __name__ == "__main__":  # pragma: no cover
    demo()
