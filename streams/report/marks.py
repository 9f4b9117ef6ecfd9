"""The picture's marks, drawn on the axes in this order (later ones on top where the z-order
is equal): each incarnation's row, the checkpoints, the divergence onsets, the rollback arrows and
the consumption edges. Each drawing step also tells the :class:`~streams.report.labels.Labeler`
what no label may cover."""

from __future__ import annotations

import math

from streams.report.labels import ABOVE, ONSET_DY, Labeler, curve_obstacles
from streams.report.model import CohortModel, Edge
from streams.report.style import (
    C_ABANDONED,
    C_ALIAS,
    C_CLEAN_EDGE,
    C_DIVERGED,
    C_EVAL,
    C_LIVE,
    C_QUARANTINE,
    C_ROLLBACK,
    C_TAINT,
    C_TAINT_EDGE,
    C_TARGET,
)

#: the figure row of each incarnation: (job id, incarnation) -> y
Rows = dict[tuple[str, int], float]


def draw_incarnations(ax, lab: Labeler, cm: CohortModel, ys: Rows, scale: str, px_per_step: float) -> None:
    """Incarnation lines: live, abandoned (grey), diverged stretch (light red); progress ticks,
    the start marker and the finish bar."""
    for ln in cm.lanes:
        for sp in ln.incarnations:
            yy = ys[(ln.job_id, sp.number)]
            a, b = sp.start_step, sp.end_step
            cut = sp.abandoned_from
            if cut is None:
                ax.plot([a, b], [yy, yy], color=C_LIVE, lw=2.4, solid_capstyle="butt", zorder=2)
            elif not sp.in_ancestry:
                ax.plot([a, b], [yy, yy], color=C_ABANDONED, lw=2.4, solid_capstyle="butt", zorder=2)
            else:
                ax.plot([a, cut], [yy, yy], color=C_LIVE, lw=2.4, solid_capstyle="butt", zorder=2)
                ax.plot([cut, b], [yy, yy], color=C_ABANDONED, lw=2.4, solid_capstyle="butt", zorder=2)
            if sp.onset_step is not None and sp.onset_step <= b:
                ax.plot([sp.onset_step, b], [yy, yy], color=C_DIVERGED, lw=5.5, solid_capstyle="butt",
                        zorder=1.5)
            # progress ticks (skipped where they would merge into a texture: < 5 px apart)
            if sp.progress and scale == "linear" and \
                    (b - a) / len(sp.progress) * px_per_step >= 5:
                ax.plot([p[0] for p in sp.progress], [yy] * len(sp.progress), linestyle="none", marker="|",
                        markersize=4, color="#9aa5b1", zorder=2.1)
            # start marker
            # a restart from scratch starts like the job itself: from the pretrained model
            ax.plot([a], [yy], marker="o" if sp.start_kind in ("start", "scratch") else ">", markersize=5,
                     color=C_LIVE if sp.in_ancestry else C_ABANDONED, zorder=3)
            if sp.finished:
                ax.plot([b], [yy], marker="|", markersize=13, markeredgewidth=2.5, color="#222222", zorder=3)
                lab.obstacle(b, yy, 3, 8)


def draw_checkpoints(ax, lab: Labeler, cm: CohortModel, ys: Rows) -> dict[str, tuple[float, float]]:
    """The checkpoints (red when tainted), a ring on rollback targets, a diamond on quarantined
    ones. Returns where each was drawn."""
    ck_pos: dict[str, tuple[float, float]] = {}
    for ln in cm.lanes:
        for ck in ln.checkpoints:
            yy = ys[(ln.job_id, ck.incarnation)]
            ck_pos[ck.checkpoint_id] = (ck.step, yy)
            if ck.tainted:
                fc, ec = C_TAINT, C_TAINT_EDGE
            else:
                fc, ec = "white", (C_ABANDONED if ck.abandoned else C_LIVE)
            ax.plot([ck.step], [yy], marker="s", markersize=7.5, markerfacecolor=fc, markeredgecolor=ec,
                    markeredgewidth=1.4, linestyle="none", zorder=5)
            if ck.marked_target:
                ax.plot([ck.step], [yy], marker="o", markersize=15, markerfacecolor="none",
                        markeredgecolor=C_TARGET, markeredgewidth=2.2, linestyle="none", zorder=5.5)
            if ck.quarantined_by:
                ax.plot([ck.step], [yy], marker="D", markersize=12, markerfacecolor="none",
                        markeredgecolor=C_QUARANTINE, markeredgewidth=1.3, linestyle="none", zorder=5.4)
            lab.obstacle(ck.step, yy, 9 if ck.marked_target else 5, 9 if ck.marked_target else 5)
    return ck_pos


def draw_onsets(ax, lab: Labeler, cm: CohortModel, ys: Rows) -> None:
    """Divergence onsets: a triangle above the row, filled for an incident's root."""
    for d in cm.divergences:
        yy = ys.get((d.job_id, d.incarnation))
        if yy is None:
            continue
        ax.plot([d.onset_step], [yy - ONSET_DY], marker="v", markersize=9,
                markerfacecolor=C_TAINT if d.root else "white", markeredgecolor=C_TAINT_EDGE,
                markeredgewidth=1.4, linestyle="none", zorder=6)
        lab.obstacle(d.onset_step, yy - ONSET_DY, 6, 6)


def draw_rollbacks(ax, lab: Labeler, cm: CohortModel, ys: Rows) -> None:
    """Rollbacks: from where the old incarnation stood to where the new one resumed."""
    from matplotlib.patches import FancyArrowPatch

    for rb in cm.rollbacks:
        y1 = ys.get((rb.job_id, rb.to_incarnation))
        y0 = ys.get((rb.job_id, rb.from_incarnation)) if rb.from_incarnation is not None else None
        if y1 is None or y0 is None or rb.from_step is None:
            continue
        ax.add_patch(FancyArrowPatch((rb.from_step, y0), (rb.resumed_step, y1),
                                     connectionstyle="arc3,rad=-0.35", arrowstyle="-|>", mutation_scale=11,
                                     color=C_ROLLBACK, lw=1.5, linestyle=(0, (4, 2)), shrinkA=4, shrinkB=5,
                                     zorder=4))
        curve_obstacles(lab, (rb.from_step, y0), (rb.resumed_step, y1), -0.35)


def draw_edges(ax, lab: Labeler, cm: CohortModel, ys: Rows) -> None:
    """Consumption edges (clean ones fainter when there are many); an untraceable source is a
    "?" on the consumer's row."""
    from matplotlib.patches import FancyArrowPatch

    busy = sum(1 for e in cm.edges if e.resolved) > 30
    for e in cm.edges:
        if e.consumer_incarnation is None:
            continue
        y1 = ys.get((e.consumer_job_id, e.consumer_incarnation))
        if y1 is None:
            continue
        if not e.resolved:
            ax.plot([e.consumer_step], [y1], marker="$?$", markersize=10, color=C_ALIAS, zorder=6)
            lab.place(e.consumer_step, y1, f"untraceable: {e.source_checkpoint_id}", ABOVE, required=True,
                      fontsize=7.5, color=C_ALIAS, zorder=7)
            continue
        p0 = (e.source_step, ys[(e.source_job_id, e.source_incarnation)]) \
            if (e.source_job_id, e.source_incarnation) in ys else None
        if p0 is None:
            continue
        p1 = (e.consumer_step, y1)
        style = _edge_style(e, busy)
        rad = _edge_bow(e, p0, p1)
        ax.add_patch(FancyArrowPatch(p0, p1, connectionstyle=f"arc3,rad={rad}", arrowstyle="-|>",
                                     mutation_scale=9, shrinkA=4, shrinkB=3,
                                     zorder=4.5 if e.carries_taint else 3.5, **style))
        if e.carries_taint or e.kind == "alias":  # what spreads the taint: no label on top of it
            curve_obstacles(lab, p0, p1, rad)


def _edge_style(e: Edge, busy: bool) -> dict:
    """Dotted orange for an alias, dashed grey for an EVAL_ONLY read, red when the edge carries
    a taint, blue (fainter when the cohort is ``busy``) otherwise."""
    if e.kind == "alias":
        return dict(color=C_ALIAS, lw=1.4, linestyle=(0, (1, 1.5)), alpha=0.95)
    if not e.tainting:
        return dict(color=C_EVAL, lw=1.0, linestyle=(0, (4, 3)), alpha=0.8)
    if e.carries_taint:
        return dict(color=C_TAINT, lw=1.6, alpha=0.9)
    return dict(color=C_CLEAN_EDGE, lw=1.1 if busy else 1.2, alpha=0.38 if busy else 0.65)


def _edge_bow(e: Edge, p0: tuple[float, float], p1: tuple[float, float]) -> float:
    """The ``arc3`` radius of an edge's arrow."""
    dy = p1[1] - p0[1]
    if e.kind == "restore" and e.source_job_id == e.consumer_job_id:
        return 0.0
    if abs(dy) < 1e-9:
        return -0.45  # same row: an arch over the line
    # a gentle bow, flatter for long edges so they stay inside the plot
    return math.copysign(min(0.18, 0.9 / abs(dy)), dy)
