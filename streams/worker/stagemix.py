"""Workers of one app id run every stage, or are route and fold workers: never both kinds.

``traintrace worker --stages route`` joins the group ``APP_ID-route`` and routes every event;
all-stage workers (``--stages all``) route every event in the group ``APP_ID``: side by side,
both would route each event (the fold drops the copies, but the work is doubled), and fold
workers (``--stages fold``, group ``APP_ID``) would share a group with all-stage workers under
another subscription. A worker looks at the two groups before it starts and refuses, in one
line, to run beside the other kind (a crashed worker's membership lasts its session timeout).

What a group's members hold tells the kinds apart: an all-stage worker holds partitions of
``lineage.events`` in ``APP_ID``, a fold worker only ``lineage.by-cohort`` ones there, and any
member of ``APP_ID-route`` is a route worker. A member with nothing assigned (a rebalance under
way) tells nothing.
"""

from __future__ import annotations

import logging
from typing import Iterable

from confluent_kafka import KafkaException

from streams.kafka.errors import KafkaAdapterError
from streams.kafka.retry import retry_transient
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.worker.errors import WorkerError
from streams.worker.settings import route_group

log = logging.getLogger("traintrace.worker")


class StageMixError(WorkerError):
    """Workers of the other kind run for this app id (:mod:`streams.worker.stagemix`)."""


def conflict(stages: str, app_id: str, topics: TopicNames, members: dict[str, list[set[str]]]) -> str | None:
    """Why a worker of ``stages`` must not start beside the running workers (None: it may).
    ``members``: group -> the topics each of its members holds partitions of."""
    in_app = members.get(app_id, [])
    all_stage = sum(1 for held in in_app if topics.events in held)
    if stages in ("route", "fold") and all_stage:
        return (f"{all_stage} worker(s) running every stage (group {app_id!r} holds {topics.events}) would "
                + ("route every event a second time" if stages == "route" else "share their group with this fold worker"))
    if stages == "all":
        routing = len(members.get(route_group(app_id), []))
        folding = sum(1 for held in in_app if held and topics.events not in held)
        if routing:
            return f"{routing} route worker(s) (group {route_group(app_id)!r}) would route every event a second time"
        if folding:
            return f"{folding} fold worker(s) (--stages fold, group {app_id!r}) would share their group with this one"
    return None


def group_members(kafka: KafkaSettings, groups: Iterable[str], timeout: float = 10.0) -> dict[str, list[set[str]]]:
    """Group -> the topics each member holds partitions of (a group without members: none).
    Retriable errors are retried for ``timeout`` seconds (:func:`streams.kafka.retry.retry_transient`)."""
    admin = kafka.admin()
    out: dict[str, list[set[str]]] = {}
    for group in groups:
        def describe(left: float, group: str = group):
            fut = admin.describe_consumer_groups([group], request_timeout=left)[group]  # retried: retry_transient
            return fut.result(timeout=left + 1)

        d = retry_transient(describe, f"the members of group {group}", timeout)
        out[group] = [{tp.topic for tp in m.assignment.topic_partitions} for m in d.members]
    return out


def check_stage_mix(kafka: KafkaSettings, stages: str, app_id: str, topics: TopicNames) -> None:
    """Raise :class:`StageMixError` when workers of the other kind run for ``app_id``. A
    cluster that cannot be asked (no DESCRIBE on the groups, a broker away) is told in a warning
    and the worker starts: the check is a guard rail, not a lock."""
    try:
        members = group_members(kafka, (app_id, route_group(app_id)))
    except (KafkaAdapterError, KafkaException, TimeoutError, OSError) as exc:
        log.warning("could not look for workers of another --stages (%s): starting without the check", exc)
        return
    why = conflict(stages, app_id, topics, members)
    if why is not None:
        raise StageMixError(
            f"traintrace worker --stages {stages}: {why}. The workers of app id {app_id!r} either all run every "
            f"stage or are route and fold workers: stop the running ones first (a crashed worker counts until its "
            f"session times out) [docs/pipeline.md]")
