"""What an audit finds: a :class:`Finding` per problem, a :class:`Check` per verdict, and the
:class:`AuditReport` of a whole audit (its JSON form is what ``traintrace audit --json`` prints).

The checks (:data:`CHECKS`) and their titles are named here once, for the auditor, the merge of
sharded audits and the CLI alike.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

CHECKS = ("chains", "input", "commands", "manifests", "commitments", "snapshots", "deletions")
TITLES = {
    "chains": "hash chains and seq continuity",
    "input": "the processor's input is the events log",
    "commands": "every command follows from the log",
    "manifests": "every manifest version follows from the log",
    "commitments": "every commitment recomputes; with --trusted-keys, its signature verifies",
    "snapshots": "every fold snapshot recomputes at the input it covers; with --trusted-keys, its signature verifies",
    "deletions": "every recorded checkpoint deletion was of a checkpoint the referee had marked deletable (SPEC §13)",
    # only when asked (--witness, --witnesses-required, --checkpoint): streams.audit.witnessing
    "witnesses": "every C2SP checkpoint is a prefix of this log, no split view; with a quorum, every cohort witnessed",
}
MAX_LISTED = 200  # findings kept per check (counts stay exact)


@dataclass
class Finding:
    what: str
    job_id: str | None = None
    seq: int | None = None
    where: str | None = None
    field: str | None = None
    expected: Any = None
    found: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("what", self.what), ("job_id", self.job_id), ("seq", self.seq),
                                  ("where", self.where), ("field", self.field),
                                  ("expected", self.expected), ("found", self.found)) if v is not None}

    def line(self) -> str:
        return finding_line(self.as_dict(), value=_short)


def finding_line(f: Any, value: Callable[[Any], str] | None = None) -> str:
    """One finding (a :class:`Finding`'s ``as_dict()``, as in a JSON report) as one line:
    ``job J, seq S, at topic[p]@o: what — field: expected E, found F``. ``value`` renders the
    expected and found values (default: ``str``, cut at 80 characters); a string is returned
    as it is."""
    if not isinstance(f, dict):
        return str(f)
    value = value or (lambda v: str(v)[:80])
    head = [x for x in (f"job {f['job_id']}" if f.get("job_id") is not None else "",
                        f"seq {f['seq']}" if f.get("seq") is not None else "",
                        f"at {f['where']}" if f.get("where") else "") if x]
    s = (", ".join(head) + ": " if head else "") + str(f.get("what", ""))
    if f.get("field") is not None:
        s += f" — {f['field']}: expected {value(f.get('expected'))}, found {value(f.get('found'))}"
    return s


def _short(v: Any, n: int = 80) -> str:
    s = repr(v)
    return s if len(s) <= n else s[: n - 1] + "…"


@dataclass
class Check:
    name: str
    checked: int = 0
    failed: int = 0
    warned: int = 0
    failures: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: what was seen besides the checked records (jobs, unhashed events, …): summed over shards
    counts: dict[str, int] = field(default_factory=dict)
    skipped: bool = False
    #: the commitments check only: whether trusted keys were given (None for the other checks),
    #: and per record what was found (summed over shards): ``recompute`` (equal to the
    #: recomputed one), ``signed``, ``unsigned``, ``verified``, ``rejected``, ``rejected:REASON``
    trusted: bool | None = None
    tally: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.failed == 0

    def count(self, key: str, n: int = 1) -> None:
        self.tally[key] = self.tally.get(key, 0) + n

    def signatures(self) -> dict[str, Any] | None:
        """What is known of the commitments' signatures (the commitments check only): how many
        were ``signed`` and ``unsigned``, and — only with trusted keys — ``verified`` (a valid
        signature by a trusted key) or ``rejected`` (by reason); without trusted keys every
        signed one is ``not_checked``. Nothing here is ever counted as verified unless it was."""
        if self.trusted is None:
            return None
        t = self.tally
        signed, unsigned = t.get("signed", 0), t.get("unsigned", 0)
        return {"trusted_keys": self.trusted, "signed": signed, "unsigned": unsigned,
                "verified": t.get("verified", 0) if self.trusted else 0,
                "rejected": t.get("rejected", 0) if self.trusted else 0,
                "not_checked": 0 if self.trusted else signed,
                "rejected_by_reason": {k.split(":", 1)[1]: v for k, v in sorted(t.items())
                                       if k.startswith("rejected:")},
                # v10: the C2SP checkpoint notes the commitments carry (issue 28)
                "checkpoints_verified": t.get("checkpoint verified", 0) if self.trusted else 0,
                "checkpoints_rejected": t.get("checkpoint rejected", 0) if self.trusted else 0}

    @property
    def summary(self) -> str:
        """The verdict line: ``PASS — …`` saying exactly what was established. For the
        commitments: how many recompute, and how many signatures were verified — or that they
        were NOT checked (no trusted keys), with how many records are signed and unsigned."""
        if self.skipped:
            return f"{self.verdict} — " + (self.notes[0] if self.notes else "nothing to check")
        sig = self.signatures()
        if sig is None:
            s = f"{self.verdict} — {self.checked} checked, {self.failed} failed"
            return s + (f", {self.warned} warning(s)" if self.warned else "")
        ok = self.tally.get("recompute", 0)
        head = (f"{ok} commitment{'s recompute' if ok != 1 else ' recomputes'}" if ok == self.checked
                else f"{ok} of {self.checked} commitments recompute{'s' if ok == 1 else ''}")
        if not sig["trusted_keys"]:
            return (f"{self.verdict} — {head}; signatures NOT checked (no --trusted-keys): "
                    f"{sig['signed']} signed, {sig['unsigned']} unsigned")
        cps = sig["checkpoints_verified"]
        notes = f", {cps} checkpoint note{'s' if cps != 1 else ''} verified" if cps else ""
        if sig["checkpoints_rejected"]:
            notes += f", {sig['checkpoints_rejected']} checkpoint note(s) REJECTED"
        if not sig["rejected"]:
            v = sig["verified"]
            return f"{self.verdict} — {head}, {v} signature{'s' if v != 1 else ''} verified{notes}"
        why = ", ".join(f"{r} {n}" for r, n in sig["rejected_by_reason"].items())
        return (f"{self.verdict} — {head}; signatures: {sig['verified']} verified, {sig['rejected']} rejected"
                + (f" ({why})" if why else "") + f" of {self.checked}{notes}")

    def fail(self, f: Finding) -> None:
        self.failed += 1
        if len(self.failures) < MAX_LISTED:
            self.failures.append(f)

    def warn(self, f: Finding) -> None:
        self.warned += 1
        if len(self.warnings) < MAX_LISTED:
            self.warnings.append(f)

    @property
    def verdict(self) -> str:
        return "SKIPPED" if self.skipped else ("PASS" if self.passed else "FAIL")

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "title": TITLES[self.name], "verdict": self.verdict, "passed": self.passed,
               "summary": self.summary,
               "checked": self.checked, "failed": self.failed, "warned": self.warned,
               "failures": [f.as_dict() for f in self.failures],
               "warnings": [f.as_dict() for f in self.warnings], "notes": self.notes,
               "counts": dict(sorted(self.counts.items()))}
        sig = self.signatures()
        if sig is not None:
            out["recompute"] = self.tally.get("recompute", 0)
            out["signatures"] = sig
        return out


@dataclass
class AuditReport:
    source: str
    checks: list[Check]
    events: int = 0
    seconds: float = 0.0
    final_state: dict[str, Any] = field(default_factory=dict)
    #: what the replay decided, encoded: topic -> [(key, record name, bytes)] in decision order
    recomputed: dict[str, list[tuple[str, str, bytes]]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "passed": self.passed, "verdict": "PASS" if self.passed else "FAIL",
                "events": self.events, "seconds": round(self.seconds, 3),
                "checks": [c.as_dict() for c in self.checks],
                "recomputed": {t: len(v) for t, v in self.recomputed.items()},
                "final_state": self.final_state, "meta": self.meta}


def recomputed_digest(report: AuditReport, topics: Iterable[str] = ("manifests", "commitments")) -> str:
    """SHA-256 over the recomputed records of ``topics``, in order: equal digests mean
    byte-identical replays."""
    h = hashlib.sha256()
    for t in topics:  # in a canonical order: how the audit was split must not matter
        for key, name, data in sorted(report.recomputed.get(t, [])):
            h.update(f"{t}\x00{key}\x00{name}\x00{len(data)}\x00".encode())
            h.update(data)
    return h.hexdigest()
