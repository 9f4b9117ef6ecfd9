"""Rich tables several commands print: the plans of SPEC §11 and the halts (``analyze``,
``plans``, the "as of" view)."""

from __future__ import annotations

from typing import Any, Iterable

from rich.table import Table


def titled_table(title: str, columns: Iterable[str]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col)
    return table


def plans_table(plans: Iterable[dict[str, Any]], title: str) -> Table:
    table = titled_table(title, ("job", "inc", "action", "target", "step", "incidents", "command"))
    for p in plans:
        target = p["target_checkpoint_id"] or ""
        if p["action"] == "QUARANTINE":
            target = ", ".join(p.get("quarantined_checkpoint_ids", []))
        colour = {"ROLLBACK": "yellow", "QUARANTINE": "magenta"}.get(p["action"], "red")
        table.add_row(p["job_id"], str(p["incarnation"]), f"[{colour}]{p['action']}[/]", target,
                      "" if p["target_step"] is None else str(p["target_step"]),
                      ", ".join(i[:12] for i in p["incident_ids"]), p["command_id"][:12])
    return table


def halts_table(halts: Iterable[dict[str, Any]], title: str = "Halts", reason_style: str | None = None) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("job")
    table.add_column("reason", style=reason_style)
    table.add_column("detail")
    for h in halts:
        table.add_row(h["job_id"], h["reason"], h.get("detail") or "")
    return table
