"""What a finished run leaves on a broker can be deleted (the demo and the benches do): its
prefix's topics, its app id's own topics and consumer groups, and nothing of another run's."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer

from streams.kafka.topics import delete_run, ensure_topics


def _committed_group(bootstrap: str, group: str, topic: str) -> None:
    """A consumer group with a committed offset on ``topic``, and no member left."""
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, b"x")
    p.flush(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        for _ in range(60):
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                c.commit(m, asynchronous=False)
                break
        else:
            pytest.fail(f"no record of {topic} within 60 s")
    finally:
        c.close()


def test_a_runs_topics_and_groups_are_deleted_and_no_others(kafka_bootstrap, kafka_admin):
    run, other = f"dr{uuid.uuid4().hex[:8]}.", f"dr{uuid.uuid4().hex[:8]}."
    app_id, other_app = f"app-{run.rstrip('.')}", f"app-{other.rstrip('.')}"
    mine = [f"{run}lineage.events", f"{run}lineage.control", f"{app_id}-__assignor-__leader"]
    theirs = [f"{other}lineage.events", f"{other_app}-__assignor-__leader"]
    ensure_topics(kafka_bootstrap, [(t, 1, None) for t in mine + theirs])
    _committed_group(kafka_bootstrap, app_id, mine[0])
    _committed_group(kafka_bootstrap, f"{app_id}-route", mine[0])
    _committed_group(kafka_bootstrap, other_app, theirs[0])
    try:
        topics, groups = delete_run(kafka_bootstrap, run, app_id)
        assert topics == sorted(mine)
        assert groups == sorted([app_id, f"{app_id}-route"])
        left = kafka_admin.list_topics(timeout=10).topics
        assert not any(t in left for t in mine) and all(t in left for t in theirs)
        listed = {g.group_id for g in kafka_admin.list_consumer_groups(request_timeout=10).result().valid}
        assert other_app in listed and app_id not in listed
        assert delete_run(kafka_bootstrap, run, app_id) == ([], [])  # nothing left: nothing to do
    finally:
        delete_run(kafka_bootstrap, other, other_app)


def test_an_empty_prefix_or_app_id_is_refused_before_anything_is_asked():
    for prefix, app_id in (("", None), ("", "app"), ("run.", "")):
        with pytest.raises(ValueError, match="empty one names every topic"):
            delete_run("127.0.0.1:9", prefix, app_id)
