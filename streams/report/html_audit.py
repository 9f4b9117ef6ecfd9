"""The page's audit block: the report's verdict, then per check its verdict (PASS / FAIL /
SKIPPED), what it checks, how many items it checked and how many failed, its first failures,
warnings and notes, and what was established about the commitments' signatures (never more)."""

from __future__ import annotations

from typing import Any

from streams.audit.run import finding_line
from streams.report.audit_lines import signature_line, verdict_of
from streams.report.html_base import e, nw, table

_VERDICT_TAG = {"PASS": ("pass", "PASS"), "FAIL": ("fail", "FAIL"), "SKIPPED": ("skip", "SKIPPED")}
_FINDINGS_SHOWN = 5


def audit_html(audit: dict[str, Any], audit_path: str | None, audit_href: str | None) -> str:
    """The verdict block. Takes ``AuditReport.as_dict()`` (``traintrace audit --json``) and the
    simpler ``{passed, checks: [{name, passed, detail}]}``; ``audit_href`` links ``audit_path``."""
    passed = bool(audit.get("passed"))
    checks = audit.get("checks") or []
    counted = any("checked" in c for c in checks)
    rows = [_check_row(c, counted) for c in checks]
    where = ""
    if audit_path:
        where = (f' · report: <a href="{e(audit_href)}"><code>{e(audit_path)}</code></a>' if audit_href
                 else f" · report: <code>{e(audit_path)}</code>")
    headers = ["", "check"] + (["checked", "failed"] if counted else []) + ["what" if counted else "detail"]
    return (f'<section class="audit {"passed" if passed else "failed"}"><h2 style="margin-top:0;border:0">Audit: '
            f'<span class="tag {"pass" if passed else "fail"}">{"PASSED" if passed else "FAILED"}</span></h2>'
            f'<p class="meta">{_facts(audit, checks)}{where}</p>'
            + (table(headers, rows, raw=True, wrap={len(headers) - 1}) if rows else "") + "</section>")


def _facts(audit: dict[str, Any], checks: list[dict[str, Any]]) -> str:
    """The tally of verdicts, the events re-folded and the log audited."""
    verdicts = [verdict_of(c) for c in checks]
    tally = [f"{len(checks)} check(s)", f"{verdicts.count('PASS')} passed", f"{verdicts.count('FAIL')} failed"]
    if verdicts.count("SKIPPED"):
        tally.append(f"{verdicts.count('SKIPPED')} skipped")
    facts = ", ".join(tally)
    if isinstance(audit.get("events"), int):
        facts += f" · {audit['events']} events re-folded"
        if isinstance(audit.get("seconds"), (int, float)):
            facts += f" in {audit['seconds']:.2f}s"
    if audit.get("source"):
        facts += f" · log <code>{e(audit['source'])}</code>"
    return facts


def _check_row(c: dict[str, Any], counted: bool) -> list[str]:
    """One check: its verdict tag (and signature tag), name, counts, and what it found."""
    cls, label = _VERDICT_TAG[verdict_of(c)]
    what = [f"<b>{e(c.get('title'))}</b>"] if c.get("title") else []
    if c.get("detail"):
        what.append(e(c.get("detail")))
    tags = ""
    sig = c.get("signatures")
    if isinstance(sig, dict) and verdict_of(c) != "SKIPPED":
        line, tags = _signatures(c, sig)
        what.append(line)
    what += _findings(c)
    row = [f'<span class="tag {cls}">{label}</span>{tags}', f"<code>{e(c.get('name'))}</code>"]
    if counted:
        row += [e(c.get("checked", "")), e(c.get("failed", "")) if c.get("failed") else "0"]
    row.append("<br>".join(what))
    return row


def _signatures(c: dict[str, Any], sig: dict[str, Any]) -> tuple[str, str]:
    """What was established about the signatures, never more (the verdict line of the audit),
    and its tag. Returns ``(line, tag)``."""
    checked = bool(sig.get("trusted_keys"))
    line = (f'<span class="{"sig-ok" if checked and not sig.get("rejected") else "sig-warn"}">'
            f'{nw(e(c.get("summary") or signature_line(sig)))}</span>')
    tag = (' <span class="tag warn">signatures NOT checked</span>' if not checked else
           f' <span class="tag pass">{e(sig.get("verified", 0))} verified</span>' if not sig.get("rejected")
           else f' <span class="tag fail">{e(sig.get("rejected"))} rejected</span>')
    return line, tag


def _findings(c: dict[str, Any]) -> list[str]:
    """A check's first failures (and how many more), warnings and notes."""
    out = []
    failures = c.get("failures") or []
    for f in failures[:_FINDINGS_SHOWN]:
        out.append(f'<span class="finding fail-text">✗ {e(finding_line(f))}</span>')
    n_failed = c.get("failed", len(failures)) or 0
    if n_failed > min(len(failures), _FINDINGS_SHOWN):
        out.append(f'<span class="muted">… {n_failed - min(len(failures), _FINDINGS_SHOWN)} more '
                   f'failure(s) in the report</span>')
    for f in (c.get("warnings") or [])[:_FINDINGS_SHOWN]:
        out.append(f'<span class="finding">! {e(finding_line(f))}</span>')
    for n in (c.get("notes") or [])[:_FINDINGS_SHOWN]:
        out.append(f'<span class="muted">{e(n)}</span>')
    return out
