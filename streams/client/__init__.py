"""The training-job client of traintrace (issue 5): the job's side of the record.

::

    from streams.client import JobClient, ControlCommand, GateRefused, ClientError

    client = JobClient(job_id, cohort_id, base_model, *, journal_dir, bootstrap=None, topics=None,
                       worker_url=None, gate="refuse", on_rollback=None, on_halt=None,
                       on_release=None, on_quarantine=None, buffer_max=100_000, buffer_timeout=None,
                       gate_timeout=2.0, gate_unknown_wait=10.0, codec=None, fsync=True,
                       producer_overrides=None, follow_control=True, trusted_keys=None,
                       on_rejected=None, job_key=None, seal_every=64, seal_ms=1000)
    # job_key: Ed25519PrivateKey | PEM path | True | False | None ($TRAINTRACE_JOB_KEY, else a key
    # generated on the first start and kept in journal_dir); False: an unsealed job
    client.start(base_checkpoint_id=None, config_hash=None)          # JobStarted, once per job
    client.progress(step, epoch, loss, grad_norm=None, lr=None)
    client.checkpoint_written(checkpoint_id, path, step, epoch, uri=None) -> content_hash
    client.consumed(source_checkpoint_id, step, mode, load=None, expected_hash=None) -> hash | None
    client.diverged(onset_step, detector, reason)
    client.finished(status="SUCCEEDED", final_checkpoint_id=None)
    client.rolled_back(restored_checkpoint_id, resumed_step, command_id=None, *, from_scratch=False)  # manual
    # on_rollback(cmd) restores what cmd says; it may return Restored(checkpoint_id, step, from_scratch)
    # when it restored something else. RESTART_FROM_SCRATCH is acknowledged with from_scratch=True.
    client.poll(timeout=0.0) -> list[ControlCommand]   # callbacks run in the calling thread
    client.wait_while_halted(timeout=None) -> bool
    client.pending() -> int; client.flush(timeout=30.0) -> int; client.close(timeout=30.0) -> int
    client.incarnation, .seq (last emitted, -1 before), .next_seq, .head_hash, .halted, .halt,
    .started, .is_finished, .applied_commands, .public_key (hex, None when unsealed), .stats()
    (with events_sealed, seal_records), .wait_control_ready(timeout)

Modules: :mod:`.job` (the client), :mod:`.journal` (snapshot + write-ahead log),
:mod:`.sealing` (which events are sealed, and the job's key),
:mod:`.delivery` (the idempotent producer), :mod:`.control` (the fetcher of the job's control
records), :mod:`.restored` (what a rollback restored), :mod:`.gate` (the worker's checkpoint
status), :mod:`.hashing` (streamed content hashes of files and directories). The commands and
the choice of the one to apply (``ControlCommand``, ``command_from_record``, ``JobView``,
``decide``) are :mod:`streams.control`'s, re-exported here.
"""

from streams.client.errors import ClientError, GateRefused
from streams.client.gate import checkpoint_status
from streams.client.hashing import LoadedContent, hash_directory, hash_file, hash_path
from streams.client.commands import QUARANTINE_FILE
from streams.client.job import JobClient
from streams.client.journal import JOURNAL_FILE, WAL_FILE
from streams.client.restored import Restored
from streams.client.sealing import JOB_KEY_ENV, JOB_KEY_FILE, SealSchedule
from streams.control import ControlCommand, JobView, command_from_record, decide

__all__ = [
    "ClientError",
    "ControlCommand",
    "GateRefused",
    "JOB_KEY_ENV",
    "JOB_KEY_FILE",
    "JOURNAL_FILE",
    "JobClient",
    "JobView",
    "LoadedContent",
    "QUARANTINE_FILE",
    "Restored",
    "SealSchedule",
    "WAL_FILE",
    "checkpoint_status",
    "command_from_record",
    "decide",
    "hash_directory",
    "hash_file",
    "hash_path",
]
