"""``traintrace report``: the lineage of a cohort as a picture (PNG, SVG) and a self-contained HTML page.

::

    from streams.report import build, render_html, render_png, render_svg

    model = build(log)                          # ReportModel: fold + gather, no drawing
    png = render_png(model.cohorts["c1"], source=..., events=...)     # bytes
    svg, info = render_svg(model.cohorts["c1"])                       # inline-able <svg>, FigureInfo
    page = render_html(model, audit=None)                             # str
    audit_summary(audit) -> (line, passed)      # an audit report in one line

Two layers:

* the **model**: :mod:`.model` (the dataclasses: :class:`ReportModel`, :class:`CohortModel`,
  lanes, checkpoints, edges, divergences, rollbacks), read off the log by :mod:`.build` (the log
  folded exactly as ``analyze`` does) and :mod:`.log_topics` (the control topic's commands, the
  dead letters). Plain data: it is what the tests check against the final state.
* the **renderers**: :mod:`.figure` draws one cohort with matplotlib (Agg), from
  :mod:`.marks` (lines, markers, arrows), :mod:`.labels` (placement without overlaps),
  :mod:`.legend`, :mod:`.figure_text` (header, lane status, note) and :mod:`.style` (colours);
  :mod:`.svg_png` serialises it; :mod:`.page` writes the HTML page from :mod:`.html_cohort`,
  :mod:`.html_audit` and :mod:`.html_base`. :mod:`.audit_lines` puts an audit report in words
  for both. The page loads nothing: no external CSS, scripts, fonts or images (the SVG's text
  is drawn as paths).
"""

from streams.report.audit_lines import audit_summary
from streams.report.build import build
from streams.report.figure import FigureInfo, render_figure
from streams.report.figure_text import lane_status
from streams.report.log_topics import dead_letters
from streams.report.model import (
    CheckpointMark,
    CohortModel,
    DivergenceMark,
    Edge,
    IncarnationSpan,
    Lane,
    ReportModel,
    RollbackMark,
    model_dict,
)
from streams.report.page import render_html
from streams.report.svg_png import render_png, render_svg

__all__ = [
    "CheckpointMark",
    "CohortModel",
    "DivergenceMark",
    "Edge",
    "FigureInfo",
    "IncarnationSpan",
    "Lane",
    "ReportModel",
    "RollbackMark",
    "audit_summary",
    "build",
    "dead_letters",
    "lane_status",
    "model_dict",
    "render_figure",
    "render_html",
    "render_png",
    "render_svg",
]
