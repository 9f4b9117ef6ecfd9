"""``traintrace retention`` on the live pipeline: each job's last ``RetentionNotice`` (SPEC §13)
read from ``lineage.control`` to its end — what the referee lets each job delete, and why it
keeps the rest. With a keyring, a notice that does not verify is left out and listed."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from streams.codec import Codec, DecodeError, SchemaRegistryUnavailable
from streams.control.commands import RETENTION_RECORD
from streams.kafka import reader
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.operator_commands.errors import OperatorError
from streams.signing import check_control, unverified_row


def read_notices(kafka: KafkaSettings | str, topics: TopicNames, codec: Codec | None = None, timeout: float = 30.0,
                 trusted: Mapping[str, Any] | None = None, jobs: Iterable[str] = ()) -> dict[str, Any]:
    """``{"jobs": {job: its last notice}, "unverified": [...], "undecodable": n,
    "signatures_checked": bool}``; only ``jobs``' when given."""
    codec = codec or Codec()
    wanted = set(jobs)
    last: dict[str, dict[str, Any]] = {}
    unverified: list[dict[str, Any]] = []
    undecodable = 0
    for msg in reader.read_to_end(kafka, topics.control, timeout):
        try:
            name, record = codec.decode_record(msg.value)
        except DecodeError:
            undecodable += 1
            continue
        except SchemaRegistryUnavailable as exc:
            raise OperatorError(f"cannot decode {msg.topic!r}: {exc}") from exc
        if name != RETENTION_RECORD or (wanted and record.get("job_id") not in wanted):
            continue
        if trusted is not None:
            check = check_control(name, record, trusted)
            if not check.ok:
                unverified.append({**unverified_row(name, record, check), "partition": msg.partition,
                                   "offset": msg.offset})
                continue
        job = record["job_id"]
        if job not in last or record["version"] > last[job]["version"]:
            last[job] = {k: v for k, v in record.items() if k not in ("signature", "type")}
    return {"jobs": {j: last[j] for j in sorted(last)}, "unverified": unverified, "undecodable": undecodable,
            "signatures_checked": trusted is not None, "missing_jobs": sorted(wanted - set(last))}


def notice_rows(notices: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per checkpoint of the notices (job, checkpoint_id, deletable, reason, by)."""
    rows = []
    for job, n in notices.items():
        for may, key in ((True, "deletable"), (False, "kept")):
            for r in n.get(key) or ():
                rows.append({"job_id": job, "checkpoint_id": r["checkpoint_id"], "deletable": may,
                             "reason": r["reason"], "by": r.get("by"), "version": n["version"]})
    return rows


__all__ = ["notice_rows", "read_notices"]
