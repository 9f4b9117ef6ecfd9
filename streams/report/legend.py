"""The picture's legend: an entry for each kind of mark, only those the cohort's picture uses."""

from __future__ import annotations

from typing import Any

from streams.report.model import CohortModel
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


def legend_handles(cm: CohortModel) -> list[Any]:
    """Legend entries for what this cohort's picture actually shows."""
    from matplotlib.lines import Line2D

    spans = [sp for ln in cm.lanes for sp in ln.incarnations]
    cks = [ck for ln in cm.lanes for ck in ln.checkpoints]
    edges = [e for e in cm.edges if e.resolved]
    arrow = dict(marker=">", markersize=5)
    entries = [
        (True, Line2D([], [], color=C_LIVE, lw=2.4, label="live training (current ancestry)")),
        (any(sp.abandoned_from is not None for sp in spans),
         Line2D([], [], color=C_ABANDONED, lw=2.4, label="abandoned by a rollback")),
        (any(sp.onset_step is not None and sp.onset_step < sp.end_step for sp in spans),
         Line2D([], [], color=C_DIVERGED, lw=5.5, label="past a divergence onset")),
        (any(not c.tainted for c in cks),
         Line2D([], [], marker="s", markersize=7.5, markerfacecolor="white", markeredgecolor=C_LIVE,
                linestyle="none", label="checkpoint (clean)")),
        (any(c.tainted for c in cks),
         Line2D([], [], marker="s", markersize=7.5, markerfacecolor=C_TAINT, markeredgecolor=C_TAINT_EDGE,
                linestyle="none", label="checkpoint (tainted)")),
        (any(c.marked_target for c in cks),
         Line2D([], [], marker="o", markersize=13, markerfacecolor="none", markeredgecolor=C_TARGET,
                markeredgewidth=2.2, linestyle="none",
                label="↺ rollback target (" + " / ".join(
                    w for w, used in (("final plan", any(c.is_target for c in cks)),
                                      ("restored", any(c.restored_by and not c.is_target for c in cks))) if used)
                + ")")),
        (any(c.quarantined_by for c in cks),
         Line2D([], [], marker="D", markersize=10, markerfacecolor="none", markeredgecolor=C_QUARANTINE,
                linestyle="none", label="quarantined checkpoint")),
        (any(d.root for d in cm.divergences),
         Line2D([], [], marker="v", markersize=9, markerfacecolor=C_TAINT, markeredgecolor=C_TAINT_EDGE,
                linestyle="none", label="divergence onset (root incident)")),
        (any(not d.root for d in cm.divergences),
         Line2D([], [], marker="v", markersize=9, markerfacecolor="white", markeredgecolor=C_TAINT_EDGE,
                markeredgewidth=1.4, linestyle="none", label="onset caused by a consumption (ext.)")),
        (any(e.kind != "alias" and e.carries_taint for e in edges),
         Line2D([], [], color=C_TAINT, lw=1.6, label="consumption of a tainted ckpt", **arrow)),
        (any(e.kind != "alias" and e.tainting and not e.carries_taint for e in edges),
         Line2D([], [], color=C_CLEAN_EDGE, lw=1.1, alpha=0.7, label="consumption of a clean ckpt", **arrow)),
        (any(not e.tainting for e in edges),
         Line2D([], [], color=C_EVAL, lw=1.0, linestyle=(0, (4, 3)), label="EVAL_ONLY read (never taints)",
                **arrow)),
        (any(e.kind == "alias" for e in edges),
         Line2D([], [], color=C_ALIAS, lw=1.4, linestyle=(0, (1, 1.5)), label="same content, unrecorded (T3)")),
        (any(not e.resolved for e in cm.edges),
         Line2D([], [], marker="$?$", markersize=9, color=C_ALIAS, linestyle="none",
                label="source never recorded")),
        (bool(cm.rollbacks),
         Line2D([], [], color=C_ROLLBACK, lw=1.5, linestyle=(0, (4, 2)), label="rollback: restart from ckpt",
                **arrow)),
        (any(sp.finished for sp in spans),
         Line2D([], [], marker="|", markersize=11, markeredgewidth=2.5, color="#222222", linestyle="none",
                label="job finished")),
    ]
    return [h for used, h in entries if used]
