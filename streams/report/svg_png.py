"""A cohort's figure serialised: PNG bytes, and an SVG that can be inlined in a page (text drawn
as paths, no prolog or metadata, ids salted per cohort so two pictures on a page never clash and
the output is the same for the same log). A figure is built and serialised under
:data:`~streams.report.figure.DRAWING`."""

from __future__ import annotations

import io
import re

from streams.report.figure import DRAWING, FigureInfo, render_figure
from streams.report.model import CohortModel


def render_png(cm: CohortModel, **kw) -> bytes:
    """The figure of :func:`~streams.report.figure.render_figure` (same keywords) as PNG."""
    with DRAWING:
        fig, _ = render_figure(cm, **kw)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def render_svg(cm: CohortModel, **kw) -> tuple[str, FigureInfo]:
    """The figure of :func:`~streams.report.figure.render_figure` (same keywords) as inline-able SVG."""
    import matplotlib

    with DRAWING:
        matplotlib.use("Agg")
        fig, info = render_figure(cm, **kw)
        buf = io.StringIO()
        with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": f"traintrace-{cm.cohort_id}"}):
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return _fix_svg(buf.getvalue()), info


def _fix_svg(svg: str) -> str:
    """Inline-able SVG: no XML prolog or DOCTYPE, no RDF metadata, scales to its container."""
    svg = re.sub(r"<\?xml[^>]*\?>\s*", "", svg)
    svg = re.sub(r"<!DOCTYPE[^>]*>\s*", "", svg)
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    svg = re.sub(r'(<svg[^>]*?)\swidth="[^"]*"\s+height="[^"]*"', r'\1 width="100%"', svg, count=1)
    return svg.strip()
