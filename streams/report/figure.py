"""One cohort's lineage as a matplotlib figure (Agg): :func:`render_figure` sizes the figure to
its lanes and texts, sets up the axes (linear or symmetric-log steps), draws the lane bands and
their labels, then the marks (:mod:`streams.report.marks`), the labels
(:mod:`streams.report.labels`), the legend and the note.

matplotlib is not thread-safe: a parsed mathtext marker (the legend's ``$?$``) keeps the font
objects of the thread that parsed it, and two threads drawing at once failed ``FT_Load_Glyph``
("invalid outline": the live page's drawing thread beside the demo's report). So a figure is
built, and serialised (:mod:`streams.report.svg_png`), holding :data:`DRAWING`."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

from streams.core.state import INF
from streams.report.figure_text import figure_notes, header_lines, lane_status
from streams.report.labels import Labeler, place_labels
from streams.report.legend import legend_handles
from streams.report.marks import (
    Rows,
    draw_checkpoints,
    draw_edges,
    draw_incarnations,
    draw_onsets,
    draw_rollbacks,
)
from streams.report.model import CohortModel, Lane
from streams.report.style import C_LANE

#: held while a figure is built and while it is serialised: one drawing at a time in a process
DRAWING = threading.RLock()

LANE_GAP = 0.35      # between two lanes, in rows
LEGEND_COLUMNS = 4
DPI = 110


@dataclass
class FigureInfo:
    """What a rendered figure left out (for the HTML caption and ``--json``)."""

    dropped_labels: int = 0      # labels that found no room
    unlabelled: int = 0          # clean checkpoints nobody consumed, left unlabelled in a crowded cohort
    x_scale: str = "linear"


@dataclass
class _RowLayout:
    """The y of each incarnation's row (rows top to bottom, a gap between lanes) and each lane's band."""

    ys: Rows
    bands: list[tuple[Lane, float, float]]   # lane, top, bottom
    y_max: float


@dataclass
class _Size:
    """The figure's size and margins, in inches."""

    width: float
    height: float
    head_in: float
    legend_in: float
    left_in: float
    right_in: float              # the lanes' status column
    multi: bool                  # some lane has several rows: room for "inc N" labels


def render_figure(cm: CohortModel, *, source: str = "", events: int | None = None,
                  width: float = 14.0, summary: bool = True, audit: dict[str, Any] | None = None):
    """A matplotlib figure of one cohort's lineage. Returns ``(figure, FigureInfo)``.

    ``audit``: an audit report (see :func:`~streams.report.audit_lines.audit_summary`), shown as
    one header line (with ``summary``)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    info = FigureInfo()
    rows = _rows(cm)
    header = header_lines(cm, source=source, events=events, summary=summary, audit=audit)
    handles = legend_handles(cm)
    statuses = {ln.job_id: lane_status(ln, cm.rollbacks) for ln in cm.lanes}
    size = _size(cm, width, len(header), len(handles), statuses)
    fig = Figure(figsize=(size.width, size.height), dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=size.left_in / width, right=1 - size.right_in / width,
                        top=1 - size.head_in / size.height, bottom=size.legend_in / size.height)
    ax = fig.add_subplot(1, 1, 1)
    _titles(fig, cm, header, size)

    scale = _x_axis(ax, cm, info)
    _y_axis(ax, rows.y_max)
    _lane_bands(ax, rows, statuses, size.multi)

    # fixes the layout (data -> display transforms are final from here) without rasterising it:
    # the labels are measured with the canvas's renderer, and savefig draws the whole figure
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    lab = Labeler(ax, renderer)
    x0_lim, x1_lim = ax.get_xlim()
    px_per_step = ax.get_window_extent(renderer).width / max(x1_lim - x0_lim, 1e-9)

    draw_incarnations(ax, lab, cm, rows.ys, scale, px_per_step)
    ck_pos = draw_checkpoints(ax, lab, cm, rows.ys)
    draw_onsets(ax, lab, cm, rows.ys)
    draw_rollbacks(ax, lab, cm, rows.ys)
    draw_edges(ax, lab, cm, rows.ys)
    info.unlabelled = place_labels(lab, cm, rows.ys, ck_pos)
    info.dropped_labels = lab.dropped

    _legend_and_note(fig, cm, handles, size, info)
    return fig, info


def _rows(cm: CohortModel) -> _RowLayout:
    ys: Rows = {}
    y = 0.0
    bands: list[tuple[Lane, float, float]] = []
    for ln in cm.lanes:
        top = y
        for sp in ln.incarnations:
            ys[(ln.job_id, sp.number)] = y
            y += 1.0
        bands.append((ln, top - 0.5, y - 0.5))
        y += LANE_GAP
    return _RowLayout(ys, bands, max(y - LANE_GAP - 1.0, 0.0))


def _size(cm: CohortModel, width: float, header_lines: int, legend_entries: int,
          statuses: dict[str, list[tuple[str, str]]]) -> _Size:
    """Height from the rows, the header and the legend; the left margin from the longest job id,
    the right one from the longest status line."""
    n_rows = sum(ln.rows for ln in cm.lanes) or 1
    legend_rows = math.ceil(legend_entries / LEGEND_COLUMNS)
    notes_in = 0.22
    legend_in = 0.55 + legend_rows * 0.21 + 0.08 + notes_in
    row_h = 0.62 if n_rows > 8 else 0.75
    head_in = 0.55 + 0.22 * header_lines
    plot_in = max(1.6, n_rows * row_h + (len(cm.lanes) - 1) * LANE_GAP * row_h + 0.6)
    multi = any(ln.rows > 1 for ln in cm.lanes)
    longest_job = max((len(ln.job_id) for ln in cm.lanes), default=1)
    left_in = 0.3 + 0.092 * longest_job + (0.42 if multi else 0.0)
    longest_status = max((len(text) for lines in statuses.values() for text, _c in lines), default=10)
    right_in = 0.35 + 0.078 * longest_status
    return _Size(width, head_in + plot_in + legend_in, head_in, legend_in, left_in, right_in, multi)


def _titles(fig, cm: CohortModel, header: list[tuple[str, dict[str, Any]]], size: _Size) -> None:
    fig.text(size.left_in / size.width, 1 - 0.18 / size.height, f"traintrace lineage · cohort {cm.label}",
             fontsize=14, fontweight="bold", va="top", ha="left")
    for i, (text, kw) in enumerate(header):
        fig.text(size.left_in / size.width, 1 - (0.5 + 0.22 * i) / size.height, text, va="top", ha="left", **kw)


def _x_axis(ax, cm: CohortModel, info: FigureInfo) -> str:
    """Steps on x: linear, or symmetric-log when the jobs' ranges differ wildly. Returns the scale."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    lo, hi, scale, linthresh = _x_extent(cm)
    span = max(hi - lo, 1.0)
    if scale == "symlog":
        ax.set_xscale("symlog", linthresh=linthresh, linscale=1.0)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        ax.set_xlim(lo - 0.02 * linthresh, hi * 1.15 + 1)
        info.x_scale = f"symlog (linear up to step {linthresh:g})"
    else:
        if hi - lo < 10:
            mid_x = (lo + hi) / 2
            lo, hi, span = mid_x - 5, mid_x + 5, 10.0
        ax.set_xlim(lo - 0.035 * span, hi + 0.035 * span)
        ax.xaxis.set_major_locator(MaxNLocator(nbins="auto", steps=[1, 2, 2.5, 5, 10], integer=True))
    return scale


def _x_extent(cm: CohortModel) -> tuple[float, float, str, float]:
    lo, hi = INF, -INF
    extents = []
    for ln in cm.lanes:
        llo, lhi = INF, -INF
        for sp in ln.incarnations:
            llo, lhi = min(llo, sp.start_step), max(lhi, sp.end_step)
            if sp.onset_step is not None:
                lhi = max(lhi, sp.onset_step)
        if llo <= lhi:
            extents.append(lhi - llo)
            lo, hi = min(lo, llo), max(hi, lhi)
    if lo > hi:
        return 0.0, 1.0, "linear", 1.0
    pos = [e for e in extents if e > 0]
    # jobs whose step ranges differ by more than ~25x: a symmetric-log axis keeps the short
    # ones readable (linear up to the shortest job's length, logarithmic beyond)
    if lo >= 0 and pos and max(pos) / max(1.0, min(pos)) > 25:
        return lo, hi, "symlog", max(1.0, float(min(pos)))
    return lo, hi, "linear", 1.0


def _y_axis(ax, y_max: float) -> None:
    """Rows top to bottom, no y ticks (the lanes are labelled), a light grid on the steps."""
    ax.set_ylim(y_max + 0.75, -0.75)
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("training step", fontsize=10)
    ax.tick_params(axis="x", labelsize=9)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)


def _lane_bands(ax, rows: _RowLayout, statuses: dict[str, list[tuple[str, str]]], multi: bool) -> None:
    """Lane bands and labels (job, then one "inc N" per row when it has several); the job's
    final plan / halt / state in a column on the right."""
    ytrans = ax.get_yaxis_transform()
    for i, (ln, top, bottom) in enumerate(rows.bands):
        ax.axhspan(top - 0.1, bottom + 0.1, color=C_LANE[i % 2], zorder=0, linewidth=0)
        mid = (top + bottom) / 2
        ax.annotate(ln.job_id, (0, mid), xycoords=ytrans, xytext=(-(36 if multi else 8), 0),
                    textcoords="offset points", ha="right", va="center", fontsize=10.5, fontweight="bold",
                    color="#222222", annotation_clip=False)
        if ln.rows > 1:
            for sp in ln.incarnations:
                ax.annotate(f"inc {sp.number}", (0, rows.ys[(ln.job_id, sp.number)]), xycoords=ytrans,
                            xytext=(-6, 0), textcoords="offset points", ha="right", va="center",
                            fontsize=7.5, color="#666666", annotation_clip=False)
        lines = statuses[ln.job_id]
        for k, (text, colour) in enumerate(lines):
            ax.annotate(text, (1, mid), xycoords=ytrans, xytext=(8, 11 * ((len(lines) - 1) / 2 - k)),
                        textcoords="offset points", ha="left", va="center", fontsize=8.5, color=colour,
                        annotation_clip=False)


def _legend_and_note(fig, cm: CohortModel, handles: list[Any], size: _Size, info: FigureInfo) -> None:
    fig.legend(handles=handles, loc="upper left",
               bbox_to_anchor=(size.left_in / size.width - 0.01, (size.legend_in - 0.52) / size.height),
               ncol=LEGEND_COLUMNS, fontsize=8.5, frameon=False, handlelength=2.6, columnspacing=1.6)
    notes = figure_notes(cm, unlabelled=info.unlabelled, dropped_labels=info.dropped_labels, x_scale=info.x_scale)
    if notes:
        fig.text(size.left_in / size.width, 0.08 / size.height, "Note: " + " · ".join(notes), ha="left",
                 va="bottom", fontsize=7.5, color="#666666")
