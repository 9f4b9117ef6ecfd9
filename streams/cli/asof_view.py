"""Rich rendering of an "as of" answer (:func:`streams.audit.asof.as_of`), shared by
``traintrace analyze --as-of`` and ``traintrace audit --as-of``."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from streams.cli.tables import halts_table, plans_table, titled_table
from streams.audit.asof import iso_utc


def _ts(ms: int | None) -> str:
    return "" if ms is None else iso_utc(ms)


def _status(status: str) -> str:
    if status.startswith("HALTED"):
        return f"[red]{status}[/]"
    if status == "FINISHED":
        return f"[dim]{status}[/]"
    return f"[green]{status}[/]"


def render_as_of(console: Console, answer: dict[str, Any]) -> None:
    """Print ``answer`` as tables: jobs, tainted checkpoints, incidents, plans, halts,
    unresolved sources, commands issued, then the notes."""
    for part in (_header, _jobs, _tainted, _incidents, _plans, _halts, _unresolved, _commands, _notes):
        part(console, answer)


def _header(console: Console, a: dict[str, Any]) -> None:
    console.print(f"[bold]As of {a['as_of']}[/bold] ({a['as_of_ms']} ms): "
                  f"[bold]{a['events_folded']}[/bold] event(s) folded"
                  + (f", [yellow]{a['events_undecodable']} undecodable[/yellow]" if a.get("events_undecodable") else "")
                  + f"  [dim]{a.get('source', '')}, {a.get('clock', '')} clock[/dim]", highlight=False)


def _jobs(console: Console, a: dict[str, Any]) -> None:
    if not a["jobs"]:
        console.print("[dim]No job had reported anything yet.[/dim]")
        return
    table = titled_table("Jobs", ("job", "cohort", "inc", "last step", "status", "last seq", "last event"))
    for j in a["jobs"]:
        step = "" if j["last_step"] is None else str(j["last_step"])
        if j.get("resumed_step") is not None and j["last_step"] is None:
            step = f"(resumed {j['resumed_step']})"
        table.add_row(j["job_id"], j["cohort_id"] or "[dim]unregistered[/]", str(j["incarnation"]), step,
                      _status(j["status"]), str(j["last_seq"]), _ts(j["last_event_ts"]))
    console.print(table)


def _tainted(console: Console, a: dict[str, Any]) -> None:
    tainted = a["tainted_checkpoints"]
    console.print(f"{len(tainted)} tainted checkpoint(s)" + (": " + ", ".join(tainted) if tainted else ""),
                  highlight=False)


def _incidents(console: Console, a: dict[str, Any]) -> None:
    if not a["incidents"]:
        console.print("[green]No divergence known.[/green]")
        return
    table = titled_table("Incidents", ("incident", "verdict", "root", "onset", "contaminated", "secondary"))
    for inc in a["incidents"]:
        root = inc["root"]
        table.add_row(
            inc["incident_id"][:12], inc["verdict"], f"{root['job_id']} inc {root['incarnation']}",
            str(root["onset_step"]),
            ", ".join(f"{c['job_id']}/{c['incarnation']} via {c['via_checkpoint_id']}"
                      for c in inc["contaminated"]),
            ", ".join(f"{s['job_id']}/{s['incarnation']}@{s['onset_step']}"
                      for s in inc["secondary_divergences"]))
    console.print(table)


def _plans(console: Console, a: dict[str, Any]) -> None:
    if a["plans"]:
        console.print(plans_table(a["plans"], "Plans (what the referee had decided)"))
    else:
        console.print("No plan.")


def _halts(console: Console, a: dict[str, Any]) -> None:
    if a["halts"]:
        console.print(halts_table(a["halts"]))


def _unresolved(console: Console, a: dict[str, Any]) -> None:
    if not a["unresolved_sources"]:
        return
    table = titled_table("Unresolved sources (no CheckpointWritten yet)",
                         ("job", "inc", "seq", "checkpoint", "mode", "since"))
    for u in a["unresolved_sources"]:
        table.add_row(u["job_id"], str(u["incarnation"]), str(u["seq"]), u["checkpoint_id"], u["mode"],
                      _ts(u.get("since_ts")))
    console.print(table)


def _commands(console: Console, a: dict[str, Any]) -> None:
    commands = a["commands_issued"]
    if commands is None:
        return  # the notes say the log has no control topic
    if not commands:
        console.print("No command issued.")
        return
    table = titled_table("Commands issued",
                         ("issued", "record", "job", "action", "target / reason", "command", "supersedes"))
    for c in commands:
        table.add_row(_ts(c["issued_ts"]), c["record"], c["job_id"], c["action"] or "", _command_what(c),
                      c["command_id"][:12], (c.get("supersedes") or "")[:12])
    console.print(table)


def _command_what(c: dict[str, Any]) -> str:
    """The "target / reason" cell: a rollback's target, a quarantine's checkpoints, else the reason."""
    if c["record"] == "RollbackCommand":
        what = c["target_checkpoint_id"] or ""
        if c["target_step"] is not None:
            what += f" (step {c['target_step']})"
        return what
    if c["record"] == "QuarantineNotice":
        return ", ".join(c.get("quarantined_checkpoint_ids", []))
    return c.get("reason") or ""


def _notes(console: Console, a: dict[str, Any]) -> None:
    for note in a.get("notes", []):
        console.print(f"[dim]note: {note}[/dim]", highlight=False)
