"""An audit report in words, for the figure's header line and the page's verdict block: the
verdict of each check and what was established about the commitments' signatures. Takes
``AuditReport.as_dict()`` (``traintrace audit --json``) and the older
``{passed, checks: [{name, passed, detail}]}``."""

from __future__ import annotations

from typing import Any


def audit_summary(audit: dict[str, Any]) -> tuple[str, bool]:
    """One line for an audit report (``traintrace audit --json`` / ``AuditReport.as_dict()``, or
    the older ``{passed, checks: [{name, passed, detail}]}``): the verdict and each check's, with
    counts when the report has them. Returns ``(text, passed)``."""
    passed = bool(audit.get("passed"))
    parts = []
    for c in audit.get("checks") or []:
        v = verdict_of(c)
        n = f" {c['checked']}" if isinstance(c.get("checked"), int) and v != "SKIPPED" else ""
        f = f", {c['failed']} failed" if c.get("failed") else ""
        s = ""
        sig = c.get("signatures")
        if isinstance(sig, dict) and v != "SKIPPED":  # never let a PASS read as "signed and verified"
            s = (f" ({sig.get('verified', 0)} signatures verified)" if sig.get("trusted_keys")
                 else " (signatures NOT checked)")
        parts.append(f"{c.get('name')} {v}{n}{f}{s}")
    return f"audit {'PASSED' if passed else 'FAILED'}" + (f": {' · '.join(parts)}" if parts else ""), passed


def verdict_of(c: dict[str, Any]) -> str:
    """A check's verdict: PASS, FAIL or SKIPPED (the older shape has only ``passed``)."""
    v = c.get("verdict")
    if v in ("PASS", "FAIL", "SKIPPED"):
        return v
    return "PASS" if c.get("passed") else "FAIL"


def signature_line(sig: dict[str, Any]) -> str:
    """The commitments' signatures (``signatures`` of an audit check) in words, for a report
    without a ``summary``."""
    if not sig.get("trusted_keys"):
        return (f"signatures NOT checked (no --trusted-keys): {sig.get('signed', 0)} signed, "
                f"{sig.get('unsigned', 0)} unsigned")
    return f"{sig.get('verified', 0)} signatures verified, {sig.get('rejected', 0)} rejected"
