"""Rich rendering of an "as of" answer (:func:`streams.audit.asof.as_of`), shared by
``traintrace analyze --as-of`` and ``traintrace audit --as-of``."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from streams.cli.common import plans_table
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
    a = answer
    console.print(f"[bold]As of {a['as_of']}[/bold] ({a['as_of_ms']} ms): "
                  f"[bold]{a['events_folded']}[/bold] event(s) folded"
                  + (f", [yellow]{a['events_undecodable']} undecodable[/yellow]" if a.get("events_undecodable") else "")
                  + f"  [dim]{a.get('source', '')}, {a.get('clock', '')} clock[/dim]", highlight=False)

    if a["jobs"]:
        table = Table(title="Jobs", title_justify="left")
        for col in ("job", "cohort", "inc", "last step", "status", "last seq", "last event"):
            table.add_column(col)
        for j in a["jobs"]:
            step = "" if j["last_step"] is None else str(j["last_step"])
            if j.get("resumed_step") is not None and j["last_step"] is None:
                step = f"(resumed {j['resumed_step']})"
            table.add_row(j["job_id"], j["cohort_id"] or "[dim]unregistered[/]", str(j["incarnation"]), step,
                          _status(j["status"]), str(j["last_seq"]), _ts(j["last_event_ts"]))
        console.print(table)
    else:
        console.print("[dim]No job had reported anything yet.[/dim]")

    tainted = a["tainted_checkpoints"]
    console.print(f"{len(tainted)} tainted checkpoint(s)" + (": " + ", ".join(tainted) if tainted else ""),
                  highlight=False)

    if a["incidents"]:
        table = Table(title="Incidents", title_justify="left")
        for col in ("incident", "verdict", "root", "onset", "contaminated", "secondary"):
            table.add_column(col)
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
    else:
        console.print("[green]No divergence known.[/green]")

    if a["plans"]:
        console.print(plans_table(a["plans"], "Plans (what the referee had decided)"))
    else:
        console.print("No plan.")

    if a["halts"]:
        table = Table(title="Halts", title_justify="left")
        for col in ("job", "reason", "detail"):
            table.add_column(col)
        for h in a["halts"]:
            table.add_row(h["job_id"], h["reason"], h.get("detail", ""))
        console.print(table)

    if a["unresolved_sources"]:
        table = Table(title="Unresolved sources (no CheckpointWritten yet)", title_justify="left")
        for col in ("job", "inc", "seq", "checkpoint", "mode", "since"):
            table.add_column(col)
        for u in a["unresolved_sources"]:
            table.add_row(u["job_id"], str(u["incarnation"]), str(u["seq"]), u["checkpoint_id"], u["mode"],
                          _ts(u.get("since_ts")))
        console.print(table)

    commands = a["commands_issued"]
    if commands is None:
        pass  # the notes say the log has no control topic
    elif not commands:
        console.print("No command issued.")
    else:
        table = Table(title="Commands issued", title_justify="left")
        for col in ("issued", "record", "job", "action", "target / reason", "command", "supersedes"):
            table.add_column(col)
        for c in commands:
            if c["record"] == "RollbackCommand":
                what = c["target_checkpoint_id"] or ""
                if c["target_step"] is not None:
                    what += f" (step {c['target_step']})"
            elif c["record"] == "QuarantineNotice":
                what = ", ".join(c.get("quarantined_checkpoint_ids", []))
            else:
                what = c.get("reason") or ""
            table.add_row(_ts(c["issued_ts"]), c["record"], c["job_id"], c["action"] or "", what,
                          c["command_id"][:12], (c.get("supersedes") or "")[:12])
        console.print(table)

    for note in a.get("notes", []):
        console.print(f"[dim]note: {note}[/dim]", highlight=False)
