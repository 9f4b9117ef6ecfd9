"""Offline analysis of a JSON Lines log through the same core the stream processor uses.

A large file is folded by several forked processes at once (``processes``): cohorts are
independent (SPEC §2), so each process folds the cohorts of its share and the SPEC §11 outputs
are merged as one process's would be (:func:`~streams.core.cohorts.merge_final_states`). Every
process reads every line; each line is judged (validated, folded) by exactly one process, the
one whose share holds the line's cohort, and every process learns each job's cohort from its
``JobStarted`` as :class:`~streams.core.cohorts.CohortRouter` does, so the routing, the skipped
lines and the first bad line are the ones a single process finds. A line of another share
whose job is sure from its text is not even parsed (:func:`_known_job`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

from streams.core.cohorts import UNREGISTERED_COHORT, CohortLineage, merge_final_states
from streams.core.events import JobStarted
from streams.core.state import Config
from streams.files.jsonl import JsonlError, LineError, display_name, event_of, line_data, open_text, read_events

#: the smallest file (bytes) worth forking for: about 40,000 events
PARALLEL_MIN_BYTES = 8 << 20


@dataclass
class Analysis:
    result: dict[str, Any]
    #: the folded engines (None when the file was folded by several processes)
    lineage: CohortLineage | None
    events: int = 0
    skipped: list[LineError] = field(default_factory=list)


Progress = Callable[[int, int], None]


def analyze_file(
    path: str,
    config: Config | None = None,
    skip_invalid: bool = False,
    progress: Progress | None = None,
    processes: int = 1,
) -> Analysis:
    """Fold every event of ``path`` and return the final state (SPEC §11).

    Raises :class:`JsonlError` on the first bad line unless ``skip_invalid``. ``progress`` is
    called with (bytes read, total bytes) now and then. ``processes`` > 1: a file of at least
    :data:`PARALLEL_MIN_BYTES` is folded by that many forked processes (same result; no
    ``lineage`` in the :class:`Analysis`).
    """
    if processes > 1 and path != "-" and "fork" in mp.get_all_start_methods() \
            and os.path.getsize(path) >= PARALLEL_MIN_BYTES:
        return _analyze_forked(path, config, skip_invalid, progress, processes)
    lineage = CohortLineage(config)
    skipped: list[LineError] = []
    total = os.path.getsize(path) if path != "-" else 0
    events = 0
    fh = open_text(path)
    try:
        for item in read_events(path, fh):
            if isinstance(item, LineError):
                if not skip_invalid:
                    raise JsonlError(item)
                skipped.append(item)
                continue
            lineage.fold(item)
            events += 1
            if progress is not None and events % 20000 == 0 and total:
                progress(fh.buffer.tell() if hasattr(fh, "buffer") else 0, total)
    finally:
        if fh is not None and path != "-":
            fh.close()
    lineage.finish_input()
    if progress is not None and total:
        progress(total, total)
    return Analysis(lineage.final_state(), lineage, events, skipped)


@dataclass
class _Share:
    """What one process folded: each of its cohorts' SPEC §11 output, the events folded, the
    lines skipped, and the first bad line (when not skipping)."""

    states: list[tuple[str, dict[str, Any]]]
    events: int
    skipped: list[LineError]
    error: LineError | None


def _share_of(cohort: str, n: int) -> int:
    return zlib.crc32(cohort.encode("utf-8", "surrogatepass")) % n


_JOB_KEY = '"job_id": "'


def _known_job(line: str, mapping: dict[str, str]) -> str | None:
    """The cohort of the job a line names, read without parsing the line where that is sure,
    else None (the line is parsed). Sure: the line has no backslash (so every ``"`` delimits a
    string), one ``{`` (no nested object), ``"job_id"`` once, as ``"job_id": "``, and that job's
    cohort is known. In a valid event that is the object's one ``job_id`` key (a string followed
    by a colon is a key), and its value is the text up to the next quote: the job the line's
    JSON names. In a line that is no valid event, it decides only which share reports the line,
    and every share would report the same error of the same line. A first ``JobStarted`` (its
    job not known yet), another spacing, an escape: parsed, as every line of this share is."""
    at = line.find(_JOB_KEY)
    if at < 0 or "\\" in line or line.count("{") != 1 or line.count('"job_id"') != 1:
        return None
    start = at + len(_JOB_KEY)
    end = line.find('"', start)
    return mapping.get(line[start:end]) if end >= 0 else None


def _fold_share(path: str, config: Config | None, skip_invalid: bool, k: int, n: int,
                progress: Progress | None) -> _Share:
    """Fold the lines of share ``k`` of ``n``: those of the cohorts :func:`_share_of` gives
    it, and (share 0) the lines that name no job; learn every job's cohort on the way."""
    lineage = CohortLineage(config)
    mapping = lineage.router.mapping
    name = display_name(path)
    total = os.path.getsize(path)
    skipped: list[LineError] = []
    events = 0
    owner: dict[str, int] = {}  # cohort -> share, memoised

    def share(cohort: str) -> int:
        s = owner.get(cohort)
        if s is None:
            s = owner[cohort] = _share_of(cohort, n)
        return s

    with open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            known = _known_job(line, mapping)
            if known is not None and share(known) != k:
                continue  # another share's line, not even parsed
            if not line.strip():
                continue
            data = line_data(name, lineno, line)
            item: Any = None
            job = data.get("job_id") if type(data) is dict else None
            if type(job) is not str:
                mine = k == 0  # not JSON, not an object, no job: an error share 0 tells
            else:
                cohort = mapping.get(job)
                if cohort is None and data.get("type") == "JobStarted":  # type: ignore[union-attr]
                    item = event_of(name, lineno, data)  # every share learns the job's cohort
                    if isinstance(item, JobStarted):
                        cohort = mapping[job] = item.cohort_id
                mine = share(cohort if cohort is not None else UNREGISTERED_COHORT) == k
            if not mine:
                continue
            if item is None:
                item = event_of(name, lineno, data)
            if isinstance(item, LineError):
                if not skip_invalid:
                    return _Share([], events, skipped, item)
                skipped.append(item)
                continue
            lineage.fold(item)
            events += 1
            if progress is not None and events % 20000 == 0:
                progress(fh.buffer.tell(), total)
    lineage.finish_input()
    return _Share([(c, lineage.cohorts[c].final_state()) for c in sorted(lineage.cohorts)], events, skipped, None)


def _child(conn: Any, path: str, config: Config | None, skip_invalid: bool, k: int, n: int) -> None:
    try:
        conn.send(_fold_share(path, config, skip_invalid, k, n, None))
    except BaseException as exc:  # the parent says what failed
        conn.send(exc)
    finally:
        conn.close()


def _analyze_forked(path: str, config: Config | None, skip_invalid: bool, progress: Progress | None,
                    n: int) -> Analysis:
    ctx = mp.get_context("fork")
    children = []
    for k in range(1, n):
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(send, path, config, skip_invalid, k, n), daemon=True)
        proc.start()
        send.close()
        children.append((proc, recv))
    try:
        shares = [_fold_share(path, config, skip_invalid, 0, n, progress)]  # share 0 here, with the progress
        for proc, recv in children:
            got = recv.recv()
            if isinstance(got, BaseException):
                raise got
            shares.append(got)
    finally:
        for proc, recv in children:
            recv.close()
            proc.join(5)
            if proc.is_alive():
                proc.kill()
    errors = [s.error for s in shares if s.error is not None]
    if errors:  # each line is judged by one share: the first bad line of all is the file's first
        raise JsonlError(min(errors, key=lambda e: e.line))
    if progress is not None:
        total = os.path.getsize(path)
        progress(total, total)
    states = sorted((st for s in shares for st in s.states), key=lambda st: st[0])
    skipped = sorted((e for s in shares for e in s.skipped), key=lambda e: e.line)
    return Analysis(merge_final_states(states), None, sum(s.events for s in shares), skipped)
