"""The picture's colours and abbreviations, shared by the drawing, its legend and its text."""

from __future__ import annotations

# colours (colour-blind-safe-ish: red/blue/green are never the only cue: shape and style differ)
C_LIVE = "#3b4f66"
C_ABANDONED = "#c4c8cc"
C_DIVERGED = "#e8a3a3"
C_TAINT = "#d62728"
C_TAINT_EDGE = "#8b0000"
C_CLEAN_EDGE = "#2f6fb0"
C_EVAL = "#8c8c8c"
C_TARGET = "#1a9641"
C_ROLLBACK = "#7b3294"
C_ALIAS = "#e66101"
C_QUARANTINE = "#5e3c99"
C_LANE = ("#f7f8fa", "#eef1f5")

MODE_ABBR = {"INIT": "INIT", "MERGE": "MERGE", "DISTILL": "DISTILL", "PBT_EXPLOIT": "PBT",
             "REFERENCE": "REF", "REPLAY": "REPLAY", "EVAL_ONLY": "EVAL", "OTHER": "OTHER",
             "CONTENT_ALIAS": "same content"}


def short_label(ck_id: str, job_id: str) -> str:
    """A checkpoint label without its writer's job prefix (the lane names the job)."""
    for sep in ("-", "_", "/", ":", "."):
        if ck_id.startswith(job_id + sep) and len(ck_id) > len(job_id) + 1:
            return ck_id[len(job_id) + 1:]
    return ck_id
