"""The job client's command application: :class:`CommandsMixin`, the part of
:class:`~streams.client.job.JobClient` that takes the control records its fetcher
(:mod:`streams.client.control`) brought in, keeps those whose signature verifies, lets the
control fold (:func:`streams.control.decide`) say what each one means for the job, and applies
them (rollback, quarantine, halt, release) through the job's callbacks, recording each in the
journal."""

from __future__ import annotations

import json
import logging
import queue
import time
from dataclasses import replace

from streams.client.errors import ClientError
from streams.client.restored import Restored
from streams.control.commands import ControlCommand
from streams.control.obey import ACTIONS, HALT, QUARANTINE, RELEASE, ROLLBACK, JobView, decide
from streams.files.atomic import atomic_write
from streams.signing import check_control

log = logging.getLogger("traintrace.client")

#: rejected commands kept for :attr:`JobClient.rejected_commands` (the count has them all)
MAX_REJECTED_KEPT = 1000
#: the file a default quarantine writes in the journal directory
QUARANTINE_FILE = "QUARANTINED"


class CommandsMixin:
    """Polling and applying the job's commands (a part of ``JobClient``: it uses the client's
    journal, lock, callbacks and counters)."""

    def poll(self, timeout: float = 0.0) -> list[ControlCommand]:
        """Process the job's control records fetched so far (waiting up to ``timeout`` s for the
        first); run the callbacks in this thread (one poll at a time: a second thread calling it
        waits). Returns every record processed, each with its
        ``outcome`` (``rollback``, ``halt``, ``release``, ``quarantine``: applied; or
        ``superseded``, ``stale``, ``duplicate``, ``cleared``, ``no-change``, ``finished``,
        ``future``, ``unhandled``)."""
        with self._poll_lock:
            return self._poll(timeout)

    def _poll(self, timeout: float) -> list[ControlCommand]:
        if self._closed:
            return []
        items = self._inbox
        self._inbox = []
        try:
            if not items and timeout > 0:
                items.append(self._queue.get(timeout=timeout))
        except queue.Empty:
            return []
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if not items:
            return []
        with self._lock:
            st = self._journal.state
            q = st.quarantine
            view = JobView(st.incarnation, set(st.applied_commands), st.halt is not None, st.finished,
                           (str(q[0]), tuple(sorted(q[1]))) if q else None)
            batch = self._verified(self._take_notices([c for it in items for c in it.commands],  # type: ignore[attr-defined]
                                                      self._reject))
            decided = decide(view, batch)
        results: list[ControlCommand] = []
        try:
            for c in decided:
                if c.outcome in ACTIONS:
                    c = self._apply(c)
                results.append(c)
        except BaseException:
            self._inbox = items + self._inbox  # decided again at the next poll
            raise
        with self._lock:
            st = self._journal.state
            for c in decided:  # a halt or release is never acted on twice, whatever its outcome
                if c.kind == "HaltCommand" and c.command_id not in st.applied_commands:
                    st.applied_commands.append(c.command_id)
            st.control_topic = self.topics.control
            st.control_positions = dict(items[-1].positions)
            self._journal.save()
            self.commands_seen += len(results)
        for c in results:
            log.info("traintrace client %s: %s %s (%s) -> %s", self.job_id, c.kind, c.command_id[:12],
                     c.action, c.outcome)
        return results

    def _verified(self, batch: list[ControlCommand]) -> list[ControlCommand]:
        """The commands whose signature verifies (all of them without a keyring); the others
        are rejected here, before the fold of :func:`decide` sees them."""
        if self.trusted_keys is None or not batch:
            return batch
        ok: list[ControlCommand] = []
        for c in batch:
            chk = check_control(c.kind, c.record, self.trusted_keys)
            if chk.ok:
                ok.append(c)
            else:
                self._reject(c, f"{chk.reason}: {chk.detail}")
        return ok

    def _reject(self, c: ControlCommand, reason: str) -> None:
        self.commands_rejected += 1
        self.rejected_commands.append((replace(c, outcome="rejected"), reason))
        del self.rejected_commands[:-MAX_REJECTED_KEPT]
        log.error("traintrace client %s: REJECTED %s %s (%s) at %s[%s]@%s, not applied: %s", self.job_id, c.kind,
                  c.command_id[:12], c.action, self.topics.control, c.partition, c.offset, reason)
        if self.on_rejected is not None:
            try:
                self.on_rejected(c, reason)
            except Exception:  # a reporting hook must not stop the training loop
                log.exception("traintrace client %s: on_rejected failed", self.job_id)

    def _apply(self, c: ControlCommand) -> ControlCommand:
        if c.outcome == ROLLBACK:
            if self.on_rollback is None:
                log.warning("traintrace client %s: %s %s to %s at step %s, and no on_rollback: call "
                            "rolled_back() once restored", self.job_id, c.action, c.command_id[:12],
                            c.target_checkpoint_id, c.target_step)
                return replace(c, outcome="unhandled")
            log.warning("traintrace client %s: %s to %s (step %s) by command %s", self.job_id, c.action,
                        c.target_checkpoint_id, c.target_step, c.command_id[:12])
            done = self.on_rollback(c)
            # the callback may say how it restored; otherwise it did what the command asked
            r = done if isinstance(done, Restored) else Restored.of(c)
            self.rolled_back(r.checkpoint_id, r.step, c.command_id, from_scratch=r.from_scratch)
        elif c.outcome == QUARANTINE:
            (self.on_quarantine or self._default_quarantine)(c)
            with self._lock:
                st = self._journal.state
                before = st.quarantine[1] if st.quarantine and st.quarantine[0] == c.command_id else []
                st.quarantine = [c.command_id, sorted({*before, *c.quarantined_checkpoint_ids})]
            self._record_applied(c)
        elif c.outcome == HALT:
            with self._lock:
                self._journal.state.halt = {"command_id": c.command_id, "reason": c.reason,
                                            "detail": c.detail, "issued_ts": c.issued_ts}
                self._record_applied(c)
            log.warning("traintrace client %s: halted (%s): %s", self.job_id, c.reason, c.detail)
            if self.on_halt is not None:
                self.on_halt(c)
        elif c.outcome == RELEASE:
            with self._lock:
                self._journal.state.halt = None
                self._record_applied(c)
            log.warning("traintrace client %s: released: %s", self.job_id, c.detail)
            if self.on_release is not None:
                self.on_release(c)
        self.commands_applied += 1
        return c

    def _record_applied(self, c: ControlCommand) -> None:
        with self._lock:
            st = self._journal.state
            if c.command_id not in st.applied_commands:
                st.applied_commands.append(c.command_id)
            self._journal.save()

    def _default_quarantine(self, c: ControlCommand) -> None:
        log.warning("traintrace client %s: QUARANTINE by command %s: do not ship %s (incidents %s)",
                    self.job_id, c.command_id[:12], ", ".join(c.quarantined_checkpoint_ids),
                    ", ".join(c.incident_ids))
        atomic_write(self.journal_dir / QUARANTINE_FILE, (json.dumps({
            "job_id": self.job_id, "command_id": c.command_id, "incarnation": c.incarnation,
            "incident_ids": list(c.incident_ids),
            "quarantined_checkpoint_ids": list(c.quarantined_checkpoint_ids),
            "issued_ts": c.issued_ts}, indent=1) + "\n").encode("utf-8"))

    def wait_while_halted(self, timeout: float | None = None) -> bool:
        """Poll until the job is not halted (True), or ``timeout`` s passed (False). Callbacks
        (on_release, a rollback arriving meanwhile) run in this thread."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.poll(0)
        while self.halted:
            if self._closed:
                raise ClientError("the client was closed while the job is halted")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.poll(0.5 if left is None else max(0.01, min(0.5, left)))
        return True
