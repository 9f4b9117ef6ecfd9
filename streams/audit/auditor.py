"""The :class:`Auditor`: one audit of one log, in one process.

It is the checks' shared context (:class:`~streams.audit.context.AuditContext`: the log, the
codec, a :class:`~streams.audit.report.Check` per verdict, the decoded events by position, the
fold order) and runs the checks on it in the order they depend on each other:

1. :func:`~streams.audit.chains.read_dead_letters`, then :func:`~streams.audit.chains.check_chains`
   (decodes every event once, for everything after);
2. :func:`~streams.audit.input_check.check_input` (the fold order);
3. :func:`~streams.audit.replay.replay` (the re-fold through the referee, checking each
   commitment at the position it covers);
4. :func:`~streams.audit.compare.compare_control` and
   :func:`~streams.audit.compare.compare_manifests` (what the replay decided against the topics).
"""

from __future__ import annotations

import time

from streams.audit import chains, compare, input_check, replay
from streams.audit.context import AuditContext
from streams.audit.report import CHECKS, AuditReport


class Auditor(AuditContext):
    """One audit of one log: its context (:class:`~streams.audit.context.AuditContext`) and
    the checks run on it in order."""

    def run(self) -> AuditReport:
        t0 = time.perf_counter()
        chains.read_dead_letters(self)
        chains.check_chains(self)
        input_check.check_input(self)
        expected, at_end, referee = replay.replay(self)
        compare.compare_control(self, expected["control"], at_end)
        compare.compare_manifests(self, expected["manifests"])
        report = AuditReport(self.log.source, [self.checks[c] for c in CHECKS], len(self.items))
        report.final_state = referee.final_state()
        report.recomputed = {t: [(em.key, em.record, self.codec.encode_record(em.record, em.value))
                                 for em, _cause in v] for t, v in expected.items()}
        report.seconds = time.perf_counter() - t0
        report.meta = {"cut": self.cut, "has_input": self.log.has_input,
                       "records": {t: len(v) for t, v in self.log.records.items()}}
        return report
