"""What every part of the report's HTML page shares: its inline stylesheet (the page loads
nothing from elsewhere), escaping, tables that scroll sideways with ids kept whole, anchors."""

from __future__ import annotations

import html
import re
from typing import Any, Iterable

CSS = """
:root { --taint:#b71c1c; --ok:#1a7f37; --muted:#5f6b77; --line:#d9dee4; --bg:#ffffff; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color:#1f2328; background:var(--bg); margin:0; padding:20px 28px 40px; }
h1 { font-size:22px; margin:0 0 4px; } h2 { font-size:18px; margin:28px 0 8px; border-bottom:1px solid var(--line);
     padding-bottom:4px; } h3 { font-size:15px; margin:18px 0 6px; }
.meta { color:var(--muted); margin:0 0 4px; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:12.5px; }
code, .nw { white-space:nowrap; }
/* the picture takes the page's whole width; the tables come below it, side by side when there
   is room (two columns from ~1150 px), each scrolling sideways rather than being cut */
.layout { display:block; }
.layout figure { margin:0 0 16px; min-width:0; border:1px solid var(--line); border-radius:6px; padding:6px; }
.layout figure svg { display:block; width:100%; height:auto; }
.layout figcaption { color:var(--muted); font-size:12.5px; padding:4px 6px 0; }
.panels { display:grid; grid-template-columns:repeat(auto-fit, minmax(min(100%, 540px), 1fr)); gap:8px 28px;
          align-items:start; }
.panel { min-width:0; }
.panel > h3:first-child { margin-top:4px; }
/* a very wide window: the picture beside the tables */
@media (min-width: 2100px) {
  .layout { display:grid; grid-template-columns:minmax(0, 3fr) minmax(560px, 2fr); gap:24px; align-items:start; }
  .layout figure { margin:0; }
  .layout .panels { grid-template-columns:minmax(0, 1fr); }
}
.tscroll { overflow-x:auto; max-width:100%; margin:4px 0 10px; }
table { border-collapse:collapse; width:100%; margin:0; font-size:13px; }
th, td { text-align:left; padding:3px 8px; border-bottom:1px solid var(--line); vertical-align:top; white-space:nowrap; }
td.wrap { white-space:normal; min-width:14em; }
th { background:#f3f5f7; font-weight:600; }
.ids { line-height:1.7; }
.tag { display:inline-block; padding:0 6px; border-radius:10px; font-size:12px; font-weight:600; }
.INTERNAL, .fail, .tainted { color:#fff; background:var(--taint); }
.EXTERNAL { color:#fff; background:#8e44ad; } .INDETERMINATE { color:#fff; background:#e66101; }
.pass, .clean { color:#fff; background:var(--ok); }
.skip { color:#fff; background:#9a6700; }
.finding { display:block; font-size:12.5px; } .fail-text { color:var(--taint); }
.incident { border:1px solid var(--line); border-left:4px solid var(--taint); border-radius:6px; padding:8px 12px;
            margin:0 0 12px; overflow-x:auto; }
.warn { color:#fff; background:#9a6700; }
.sig-warn { color:#7a4f00; font-weight:600; } .sig-ok { color:var(--ok); font-weight:600; }
.audit { border:1px solid var(--line); border-radius:6px; padding:10px 14px; margin:14px 0; }
.audit.passed { border-left:6px solid var(--ok); } .audit.failed { border-left:6px solid var(--taint); }
.muted { color:var(--muted); }
details { margin:8px 0; } summary { cursor:pointer; font-weight:600; }
.nav a { margin-right:12px; }
"""


def e(x: Any) -> str:
    """``x`` as HTML text (None: empty)."""
    return html.escape("" if x is None else str(x), quote=True)


_ID_TOKEN = re.compile(r"[^\s<>]*-[^\s<>]*")


def nw(escaped: str) -> str:
    """Escaped text (no tags) with every whitespace-delimited token holding a hyphen (an id such
    as ``j31-000-210c-i1``, ``events[0]@13``-style positions, ``--trusted-keys``) in a nowrap span:
    a line may break between ids, never inside one (browsers break after hyphens)."""
    return _ID_TOKEN.sub(lambda m: f'<span class="nw">{m.group(0)}</span>', escaped)


def table(headers: list[str], rows: list[list[str]], raw: bool = False, wrap: Iterable[int] = ()) -> str:
    """A table in a horizontally scrolling box: cells do not wrap (ids stay whole, a wide table
    scrolls instead of being cut), except the columns ``wrap`` (free text), which wrap between
    words and never inside an id."""
    wrap = set(wrap)
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        (f'<td class="wrap">{c if raw else nw(e(c))}</td>' if i in wrap else f"<td>{c if raw else e(c)}</td>")
        for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f'<div class="tscroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def anchor(cohort: str) -> str:
    """The id of a cohort's section."""
    return "cohort-" + (re.sub(r"[^A-Za-z0-9_-]+", "_", cohort) or "unregistered")
