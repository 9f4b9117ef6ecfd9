"""Where the picture's labels go: greedy placement without overlaps (:class:`Labeler`), the
candidate offsets of each kind of label, the paths of arrows no label may cover, and
:func:`place_labels`, which labels a cohort's marks most important first."""

from __future__ import annotations

import math
from typing import Any, Iterable

from streams.report.model import CohortModel, Edge
from streams.report.style import (
    C_ALIAS,
    C_CLEAN_EDGE,
    C_EVAL,
    C_ROLLBACK,
    C_TAINT_EDGE,
    C_TARGET,
    MODE_ABBR,
    short_label,
)

Candidates = list[tuple[float, float, str, str]]


class Labeler:
    """Greedy label placement without overlaps, in display coordinates.

    Labels are placed in the order given (most important first); each tries its candidate
    offsets and takes the first whose box hits nothing placed so far (markers count as
    obstacles); an optional label that fits nowhere is dropped, a required one takes its first
    candidate anyway.
    """

    def __init__(self, ax, renderer) -> None:
        self.ax = ax
        self.renderer = renderer
        self.boxes: dict[tuple[int, int], list[tuple[float, float, float, float]]] = {}
        self.cell = 60.0
        self.dropped = 0

    def _cells(self, b):
        x0, y0, x1, y1 = b
        c = self.cell
        for i in range(int(x0 // c), int(x1 // c) + 1):
            for j in range(int(y0 // c), int(y1 // c) + 1):
                yield (i, j)

    def hits(self, b) -> bool:
        x0, y0, x1, y1 = b
        for cell in self._cells(b):
            for (a0, b0, a1, b1) in self.boxes.get(cell, ()):
                if x0 < a1 and a0 < x1 and y0 < b1 and b0 < y1:
                    return True
        return False

    def occupy(self, b) -> None:
        for cell in self._cells(b):
            self.boxes.setdefault(cell, []).append(b)

    def obstacle(self, x: float, y: float, half_w: float, half_h: float) -> None:
        px, py = self.ax.transData.transform((x, y))
        self.occupy((px - half_w, py - half_h, px + half_w, py + half_h))

    def place(self, x: float, y: float, text: str, candidates: Iterable[tuple[float, float, str, str]],
              required: bool = False, pad: float = 1.5, counted: bool = True, **kw) -> Any:
        first = None
        for dx, dy, ha, va in candidates:
            t = self.ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points",
                                 ha=ha, va=va, annotation_clip=False, **kw)
            bb = t.get_window_extent(self.renderer)
            b = (bb.x0 - pad, bb.y0 - pad, bb.x1 + pad, bb.y1 + pad)
            if not self.hits(b):
                self.occupy(b)
                if first is not None:
                    first[0].remove()
                return t
            if first is None and required:
                first = (t, b)
            else:
                t.remove()
        if first is not None:
            self.occupy(first[1])
            return first[0]
        if counted:
            self.dropped += 1
        return None


ABOVE = [(0, 6, "center", "bottom"), (0, -7, "center", "top"), (9, 6, "left", "bottom"),
         (-9, 6, "right", "bottom"), (9, -7, "left", "top"), (-9, -7, "right", "top"),
         (0, 16, "center", "bottom"), (0, -17, "center", "top")]
MAX_ALL_LABELS = 150  # above this many checkpoints, label only the tainted and the consumed ones
ONSET_DY = 0.3   # onset markers sit above their row, pointing at the step
ONSET_AT = [(0, 5, "center", "bottom"), (7, 0, "left", "center"), (-7, 0, "right", "center"),
            (0, 14, "center", "bottom")]
MODE_AT = [(-5, 5, "right", "bottom"), (-5, -6, "right", "top"), (5, -6, "left", "top")]
BELOW = [ABOVE[1], ABOVE[0], ABOVE[4], ABOVE[5], ABOVE[2], ABOVE[3], ABOVE[7], ABOVE[6]]


def curve_obstacles(lab: Labeler, p0: tuple[float, float], p1: tuple[float, float], rad: float) -> None:
    """Mark the path of an ``arc3`` arrow from ``p0`` to ``p1`` (data coordinates) as taken,
    so that no label is placed on top of it."""
    t = lab.ax.transData
    (x1, y1), (x2, y2) = t.transform(p0), t.transform(p1)
    cx, cy = (x1 + x2) / 2 + rad * (y2 - y1), (y1 + y2) / 2 - rad * (x2 - x1)  # matplotlib's arc3
    n = max(2, int(math.hypot(x2 - x1, y2 - y1) / 6))
    for i in range(n + 1):
        u = i / n
        x = (1 - u) ** 2 * x1 + 2 * (1 - u) * u * cx + u ** 2 * x2
        y = (1 - u) ** 2 * y1 + 2 * (1 - u) * u * cy + u ** 2 * y2
        lab.occupy((x - 2.0, y - 2.0, x + 2.0, y + 2.0))


#: where the mode of an edge that spreads a taint may go, before giving up
SPREADING_MODE_AT = MODE_AT + [(-12, 0, "right", "center"), (12, 0, "left", "center"), (5, 5, "left", "bottom"),
                               (-5, 14, "right", "bottom"), (-5, -15, "right", "top")]
ROLLBACK_AT = [(8, -7, "left", "top"), (8, 6, "left", "bottom"), (-8, -7, "right", "top")]
MAX_MODE_LABELS = 40  # above this many edges, no mode is written


def place_labels(lab: Labeler, cm: CohortModel, ys: dict[tuple[str, int], float],
                 ck_pos: dict[str, tuple[float, float]]) -> int:
    """Labels, most important first: onsets, targets, rollbacks, the mode of the consumptions
    that spread a taint (before the checkpoint labels take the room), tainted / consumed
    checkpoints, the other checkpoints, then the other consumption modes (dropped first when
    crowded). Returns how many checkpoints were left unlabelled on purpose (a crowded cohort)."""
    _onset_labels(lab, cm, ys)
    _target_labels(lab, cm, ck_pos)
    _rollback_labels(lab, cm, ys)
    n_edges = sum(1 for e in cm.edges if e.resolved)
    spreading = [e for e in cm.edges if e.carries_taint or e.kind == "alias"] if n_edges <= MAX_MODE_LABELS else []
    for e in spreading:
        _mode_label(lab, e, ys, SPREADING_MODE_AT)
    unlabelled = _checkpoint_labels(lab, cm, ck_pos)
    if n_edges <= MAX_MODE_LABELS:
        for e in cm.edges:
            if e not in spreading:
                _mode_label(lab, e, ys, MODE_AT)
    return unlabelled


def _onset_labels(lab: Labeler, cm: CohortModel, ys: dict[tuple[str, int], float]) -> None:
    for d in cm.divergences:
        yy = ys.get((d.job_id, d.incarnation))
        if yy is None:
            continue
        text = f"onset {d.onset_step}" + ("" if d.root else " (ext.)")
        lab.place(d.onset_step, yy - ONSET_DY, text, ONSET_AT, required=True, fontsize=8, color=C_TAINT_EDGE,
                  fontweight="bold", zorder=7)


def _target_labels(lab: Labeler, cm: CohortModel, ck_pos: dict[str, tuple[float, float]]) -> None:
    for ln in cm.lanes:
        for ck in ln.checkpoints:
            if ck.marked_target:
                x, yy = ck_pos[ck.checkpoint_id]
                name = short_label(ck.checkpoint_id, ck.job_id)
                jobs = ck.target_of or ck.restored_by
                text = f"↺ target {name}" + ("" if jobs == [ck.job_id] else f" (of {', '.join(jobs)})")
                if not ck.is_target:
                    text += " · restored"
                lab.place(x, yy, text, BELOW, required=True, fontsize=8, color=C_TARGET, fontweight="bold",
                          zorder=7)


def _rollback_labels(lab: Labeler, cm: CohortModel, ys: dict[tuple[str, int], float]) -> None:
    for rb in cm.rollbacks:
        y1 = ys.get((rb.job_id, rb.to_incarnation))
        if y1 is None:
            continue
        if rb.from_scratch:  # a restart from the pretrained model, not a restore of the base
            lane = cm.lane(rb.job_id)
            text = f"↺ from scratch ({(lane.base_model if lane else None) or 'pretrained'})"
        else:
            text = f"↺ rolled back to {short_label(rb.restored_checkpoint_id or 'base', rb.job_id)}"
        lab.place(rb.resumed_step, y1, text, ROLLBACK_AT, fontsize=7.5, color=C_ROLLBACK, zorder=7)


def _mode_label(lab: Labeler, e: Edge, ys: dict[tuple[str, int], float], candidates: Candidates) -> None:
    y1 = ys.get((e.consumer_job_id, e.consumer_incarnation))
    if y1 is None or not e.resolved or e.kind == "restore":
        return
    colour = C_ALIAS if e.kind == "alias" else (
        C_TAINT_EDGE if e.carries_taint else (C_EVAL if not e.tainting else C_CLEAN_EDGE))
    lab.place(e.consumer_step, y1, MODE_ABBR.get(e.mode, e.mode), candidates,
              fontsize=6.5, color=colour, fontstyle="italic", zorder=7, counted=False)


def _checkpoint_labels(lab: Labeler, cm: CohortModel, ck_pos: dict[str, tuple[float, float]]) -> int:
    """Checkpoint labels, tainted first, then consumed ones, by step; above
    :data:`MAX_ALL_LABELS` checkpoints only those. Returns how many were left unlabelled."""
    consumed = {e.source_checkpoint_id for e in cm.edges}
    order = sorted((ck for ln in cm.lanes for ck in ln.checkpoints),
                   key=lambda c: (not c.tainted, c.checkpoint_id not in consumed, c.step))
    label_all = len(order) <= MAX_ALL_LABELS
    unlabelled = 0
    for ck in order:
        if ck.marked_target:
            continue  # its target label names it
        if not label_all and not ck.tainted and ck.checkpoint_id not in consumed:
            unlabelled += 1
            continue
        x, yy = ck_pos[ck.checkpoint_id]
        colour = C_TAINT_EDGE if ck.tainted else ("#8a9099" if ck.abandoned else "#333333")
        lab.place(x, yy, short_label(ck.checkpoint_id, ck.job_id), ABOVE, fontsize=7.5, color=colour, zorder=7)
    return unlabelled
