"""The topics: their names (:class:`TopicNames`), creating them with the configs the audit needs
(:func:`standard_topics`, :func:`ensure_topics`), checking that nothing the audit reads expires
(:func:`check_audit_retention`) and that every topic is replicated as the cluster allows
(:func:`check_replication`), and seeding a group's offsets. Clients come from
:class:`streams.kafka.settings.KafkaSettings`."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic

from streams.kafka import security
from streams.kafka.errors import KafkaAdapterError
from streams.kafka.retry import is_transient, retry_transient
from streams.kafka.settings import KafkaSettings


#: the variable of the topic names' prefix (``--topic-prefix``)
PREFIX_ENV = "TRAINTRACE_TOPIC_PREFIX"

_TOPIC_FIELDS = ("events", "control", "alerts", "manifests", "commitments", "dlq", "by_cohort", "checkpoints",
                 "job_cohorts", "snapshots")


@dataclass(frozen=True)
class TopicNames:
    """The topics of SPEC §3 and the processor's internal ones.

    Every name is configurable: ``TRAINTRACE_TOPIC_<NAME>`` sets one (e.g.
    ``TRAINTRACE_TOPIC_EVENTS``), ``TRAINTRACE_TOPIC_PREFIX`` prefixes them all (tests use a
    fresh prefix to get fresh topics).
    """

    events: str = "lineage.events"
    control: str = "lineage.control"
    alerts: str = "lineage.alerts"
    manifests: str = "lineage.manifests"
    commitments: str = "lineage.commitments"
    dlq: str = "lineage.dlq"
    # internal: events routed by cohort (EventBatch, kept), checkpoint statuses (compacted)
    by_cohort: str = "lineage.by-cohort"
    checkpoints: str = "lineage.checkpoints"
    # internal: the router's job -> cohort map (compacted, partitioned like lineage.events)
    job_cohorts: str = "lineage.job-cohorts"
    # internal: each cohort's fold state at a lineage.by-cohort offset (compacted: the latest per
    # cohort), so a worker taking a partition over replays only the tail
    snapshots: str = "lineage.snapshots"

    @classmethod
    def from_env(cls, prefix: str | None = None, env: Mapping[str, str] | None = None) -> "TopicNames":
        """The names of ``env`` (the process's environment by default): ``prefix`` (or
        ``TRAINTRACE_TOPIC_PREFIX``) before each, ``TRAINTRACE_TOPIC_<NAME>`` for one."""
        env = os.environ if env is None else env
        base = cls()
        if prefix is None:
            prefix = env.get(PREFIX_ENV, "")
        return cls(**{
            name: prefix + env.get(f"TRAINTRACE_TOPIC_{name.upper()}", getattr(base, name))
            for name in _TOPIC_FIELDS
        })

    def all(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in _TOPIC_FIELDS}


#: the most replicas a topic traintrace creates gets, when the settings name no factor
MAX_REPLICAS = 3


def replication(brokers: int, configured: int | None) -> tuple[int, dict[str, str]]:
    """The replication factor of a topic traintrace creates, and the topic configs that go with
    it: ``configured`` (``KafkaSettings.replication_factor``), else ``min(3, brokers)``;
    ``min.insync.replicas`` 2 from three replicas on (an ``acks=all`` write then survives the
    loss of any one broker), and never an unclean leader election (a replica that missed writes
    must not become the leader of the record the audit reads)."""
    rf = configured if configured is not None else max(1, min(MAX_REPLICAS, brokers))
    config = {"unclean.leader.election.enable": "false"}
    if rf >= 3:
        config["min.insync.replicas"] = "2"
    return rf, config


def ensure_topics(kafka: KafkaSettings | str, topics: Iterable[tuple[str, int, dict[str, str] | None]],
                  timeout: float = 30.0) -> None:
    """Create the topics that do not exist yet: (name, partitions, config), replicated
    ``kafka.replication_factor`` times, else on ``min(3, brokers)`` brokers (:func:`replication`)."""
    kafka = KafkaSettings.of(kafka)
    bootstrap = kafka.bootstrap
    watch = kafka.error_watch()
    admin = kafka.admin(error_cb=watch)
    try:
        md = security.list_topics(admin, watch, timeout)  # retried: in slices until the deadline
    except KafkaException as exc:
        raise KafkaAdapterError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    rf, replicated = replication(len(md.brokers), kafka.replication_factor)
    new = [NewTopic(name, num_partitions=parts, replication_factor=rf, config={**replicated, **(config or {})})
           for name, parts, config in topics if name not in md.topics]
    if not new:
        return
    pending = {t.topic: t for t in new}

    def create(left: float) -> None:
        """Create what is not created yet; a retriable error (a controller moving) is raised
        for the policy to retry, the others as one line naming the topic."""
        transient: KafkaException | None = None
        futures = admin.create_topics(list(pending.values()), operation_timeout=left)  # retried: create() is
        for name, fut in futures.items():  # called by retry_transient below
            try:
                fut.result()
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" in str(exc):
                    pass
                elif is_transient(exc):
                    transient = exc
                    continue
                else:
                    known = kafka.refusal(exc, operation="CREATE", resource=name)
                    raise (known or KafkaAdapterError(f"cannot create topic {name}: {exc}")) from exc
            pending.pop(name, None)
        if transient is not None:
            raise transient

    retry_transient(create, f"topics {sorted(pending)} created on {bootstrap}", timeout)
    deadline = time.monotonic() + timeout
    wanted = {t.topic for t in new}
    while time.monotonic() < deadline:
        md = retry_transient(lambda left: admin.list_topics(timeout=left), f"the topics of {bootstrap}",
                             timeout).topics
        if all(n in md and md[n].partitions and all(p.leader >= 0 for p in md[n].partitions.values())
               for n in wanted):
            wait_until_served(admin, {n: len(md[n].partitions) for n in wanted}, deadline - time.monotonic())
            return
        time.sleep(0.1)
    raise KafkaAdapterError(f"topics {sorted(wanted)} did not get leaders within {timeout}s")


def wait_until_served(admin: Any, topics: Mapping[str, int], timeout: float) -> None:
    """Wait until the leader of each partition of ``topics`` (name -> partition count) answers a
    ListOffsets for it: the partition is open on its leader, not only named in the metadata.

    A broker names a new partition's leader in its metadata before it has opened the partition
    (measured on Kafka 4.1: 259 of 600 new partitions refused ListOffsets with
    NOT_LEADER_OR_FOLLOWER right after the metadata named their leaders). An idempotent producer
    whose first write to such a partition is refused while its second, in flight behind it, is
    accepted loses the first one with no error at all (KAFKA-15591, fixed in Kafka 4.5; most likely
    what CI saw once: a new partition's first four events acknowledged and not on the topic). So nothing is written
    to a topic traintrace created before this returns. An error that is not transient (e.g. no
    DESCRIBE on the topic) ends the wait for that partition: it cannot be checked.
    :class:`KafkaAdapterError` after ``timeout`` s."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    deadline = time.monotonic() + max(0.0, timeout)
    pending = {(name, p) for name, count in topics.items() for p in range(count)}
    last = ""
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise KafkaAdapterError(f"partitions {sorted(pending)[:8]} of the new topics are not served by their "
                                    f"leaders after {timeout:.0f}s ({last})")
        try:
            futures = admin.list_offsets(  # retried: this loop, transient errors until the deadline
                {TopicPartition(n, p): OffsetSpec.earliest() for n, p in sorted(pending)},
                request_timeout=max(0.5, min(5.0, left)))
        except KafkaException as exc:
            if not is_transient(exc):
                raise KafkaAdapterError(f"cannot list the offsets of the new topics: {exc}") from exc
            last, futures = str(exc), {}
        for tp, fut in futures.items():
            try:
                fut.result()
            except KafkaException as exc:
                if is_transient(exc):
                    last = str(exc)
                    continue
            pending.discard((tp.topic, tp.partition))
        if pending:
            time.sleep(0.05)


#: the topics (fields of :class:`TopicNames`) the audit or a worker's recovery reads: every record
#: of them is kept (``retention.ms=-1``, ``retention.bytes=-1``, ``cleanup.policy=delete``) unless
#: the user chooses a finite retention (``TRAINTRACE_RETENTION_MS``) because they archive with
#: ``traintrace export``. ``lineage.manifests`` is not compacted (SPEC §3 says "compacted": a
#: deliberate deviation, the audit needs every manifest version).
AUDIT_TOPICS = ("events", "by_cohort", "control", "manifests", "commitments", "dlq")
RETENTION_ENV = "TRAINTRACE_RETENTION_MS"
KEEP_FOREVER = -1


def retention_from_env() -> int:
    """``TRAINTRACE_RETENTION_MS`` (ms; -1, the default, keeps everything)."""
    raw = os.environ.get(RETENTION_ENV, "").strip()
    if not raw:
        return KEEP_FOREVER
    try:
        value = int(raw)
    except ValueError:
        raise KafkaAdapterError(f"{RETENTION_ENV}={raw!r} is not a number of milliseconds "
                                f"(-1 keeps everything)") from None
    if value < KEEP_FOREVER or value == 0:
        raise KafkaAdapterError(f"{RETENTION_ENV}={raw} is not a retention: give milliseconds > 0, "
                                f"or -1 to keep everything")
    return value


def audit_topic_config(retention_ms: int = KEEP_FOREVER) -> dict[str, str]:
    """The config of a topic the audit or recovery reads: nothing expires (by default) or is
    compacted away."""
    return {"cleanup.policy": "delete", "retention.ms": str(retention_ms), "retention.bytes": "-1"}


def standard_topics(names: TopicNames, partitions: int = 8,
                    retention_ms: int | None = None) -> list[tuple[str, int, dict[str, str] | None]]:
    """Every topic of the pipeline with its partition count and config.

    ``retention_ms``: of the topics the audit or recovery reads (:data:`AUDIT_TOPICS`); default
    :func:`retention_from_env`, i.e. -1 (kept forever) unless ``TRAINTRACE_RETENTION_MS`` says
    otherwise. ``lineage.checkpoints`` (a latest-status view) is compacted; ``lineage.alerts``
    (not audited) gets the broker's defaults. ``lineage.snapshots`` (the latest fold state per
    cohort, partitioned like ``lineage.by-cohort``) is compacted, with room for a large state."""
    if retention_ms is None:
        retention_ms = retention_from_env()
    keep = audit_topic_config(retention_ms)
    compact = {"cleanup.policy": "compact"}
    small = max(1, partitions // 2)
    return [
        (names.events, partitions, dict(keep)),
        (names.control, partitions, dict(keep)),
        (names.alerts, small, None),
        (names.manifests, small, dict(keep)),  # every version: not compacted (see AUDIT_TOPICS)
        (names.commitments, small, dict(keep)),
        (names.dlq, small, dict(keep)),
        (names.by_cohort, partitions, dict(keep)),  # the processor's input: the fold order
        (names.checkpoints, partitions, compact),
        (names.job_cohorts, partitions, compact),  # the router's map: one record per job
        (names.snapshots, partitions, dict(SNAPSHOT_CONFIG)),  # like by_cohort: one partition each
    ]


#: the config of ``lineage.snapshots``: compacted by cohort key (the latest snapshot), records up
#: to 64 MiB (a cohort's serialised state), compacted as soon as the cleaner runs; segments roll
#: at 16 MiB or 10 minutes (the cleaner never compacts the active segment, and a recovering
#: worker reads the whole partition: what it reads follows the cohorts, not the history)
SNAPSHOT_CONFIG = {"cleanup.policy": "compact", "max.message.bytes": "67108864", "min.compaction.lag.ms": "0",
                   "segment.bytes": "16777216", "segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"}


@dataclass(frozen=True)
class RetentionFinding:
    """A setting of a topic the audit or recovery reads under which records would be lost."""

    topic: str
    setting: str
    value: str
    consequence: str

    def describe(self) -> str:
        return f"topic {self.topic} has {self.setting}={self.value}: {self.consequence}"


class FiniteRetentionError(KafkaAdapterError):
    """A topic the audit or recovery reads would lose records (finite retention, compaction).

    ``str()`` is one line: the first finding, how to fix it (``kafka-configs.sh``), how many more."""

    def __init__(self, findings: list[RetentionFinding], bootstrap: str = "BOOTSTRAP"):
        self.findings = list(findings)
        first = self.findings[0]
        fix = (f"keep it with `kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics "
               f"--entity-name {first.topic} --add-config "
               f"retention.ms=-1,retention.bytes=-1,cleanup.policy=delete`")
        more = len(self.findings) - 1
        tail = f" ({more} more such setting{'s' if more > 1 else ''})" if more else ""
        super().__init__(f"{first.describe()}{tail}; {fix}")


def _days(ms: int) -> str:
    days = ms / 86_400_000
    return f"{days:.3g} day{'s' if days != 1 else ''}" if days >= 1 else f"{ms / 3_600_000:.3g} h"


def retention_findings(kafka: KafkaSettings | str, names: TopicNames, retention_ms: int = KEEP_FOREVER,
                       timeout: float = 30.0) -> list[RetentionFinding]:
    """Every setting of the existing :data:`AUDIT_TOPICS` under which records would be lost
    (``AdminClient.describe_configs``, effective values, broker defaults included): compaction,
    ``retention.bytes`` other than -1, ``retention.ms`` other than -1 -- or, when the user chose a
    finite ``retention_ms``, shorter than that. Topics that do not exist are skipped."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    kafka = KafkaSettings.of(kafka)
    bootstrap = kafka.bootstrap
    admin = kafka.admin()
    wanted = [getattr(names, field) for field in AUDIT_TOPICS]
    existing = set(retry_transient(lambda left: admin.list_topics(timeout=left),
                                   f"the topics of Kafka at {bootstrap}", timeout).topics)
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in wanted if t in existing]
    if not resources:
        return []
    configs: dict[str, dict[str, Any]] = retry_transient(
        lambda left: {res.name: fut.result() for res, fut in
                      admin.describe_configs(resources, request_timeout=left).items()},
        f"the configs of topics {sorted(r.name for r in resources)}", timeout)
    out: list[RetentionFinding] = []
    for topic in wanted:
        conf = configs.get(topic)
        if conf is not None:
            out += topic_config_findings(topic, {k: None if e.value is None else str(e.value)
                                                 for k, e in conf.items()}, retention_ms)
    return out


def topic_config_findings(topic: str, config: dict[str, str | None],
                          retention_ms: int = KEEP_FOREVER) -> list[RetentionFinding]:
    """The settings of one audit topic's effective ``config`` under which records would be lost."""
    out: list[RetentionFinding] = []
    policy = config.get("cleanup.policy") or "delete"
    if "compact" in [p.strip() for p in policy.strip("[]").split(",")]:
        out.append(RetentionFinding(topic, "cleanup.policy", policy,
                                    "older records of a key would be compacted away"))
    ms = config.get("retention.ms")
    if ms is not None:
        try:
            ms_value = int(ms)
        except ValueError:
            ms_value = KEEP_FOREVER
        if ms_value >= 0 and (retention_ms < 0 or ms_value < retention_ms):
            wish = "" if retention_ms < 0 else f", shorter than the {retention_ms} ms asked for"
            out.append(RetentionFinding(topic, "retention.ms", ms,
                                        f"the audit trail would expire after {_days(ms_value)}{wish}"))
    by = config.get("retention.bytes")
    if by is not None and by.lstrip("-").isdigit() and int(by) >= 0:
        out.append(RetentionFinding(topic, "retention.bytes", by,
                                    "the audit trail would be cut at that size per partition"))
    return out


def check_audit_retention(kafka: KafkaSettings | str, names: TopicNames, retention_ms: int = KEEP_FOREVER,
                          timeout: float = 30.0) -> None:
    """Raise :class:`FiniteRetentionError` (one line: topic, setting, value, the fix) when a topic
    the audit or recovery reads would lose records (:func:`retention_findings`)."""
    kafka = KafkaSettings.of(kafka)
    findings = retention_findings(kafka, names, retention_ms, timeout)
    if findings:
        raise FiniteRetentionError(findings, kafka.bootstrap)


@dataclass(frozen=True)
class ReplicationFinding:
    """A topic replicated less safely than the cluster allows: too few replicas, too small an
    in-sync quorum for ``acks=all``, or a leader that may be elected unclean (losing writes)."""

    topic: str
    setting: str
    value: str
    wanted: str
    consequence: str

    def describe(self) -> str:
        return f"topic {self.topic} has {self.setting}={self.value} (wanted {self.wanted}): {self.consequence}"

    def fix(self, bootstrap: str) -> str:
        if self.setting == "replication.factor":
            return (f"see its replicas with `kafka-topics.sh --bootstrap-server {bootstrap} --describe --topic "
                    f"{self.topic}` and add replicas with `kafka-reassign-partitions.sh --bootstrap-server "
                    f"{bootstrap} --reassignment-json-file <plan with {self.wanted} replicas per partition> "
                    f"--execute`")
        return (f"set it with `kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics "
                f"--entity-name {self.topic} --add-config {self.setting}={self.wanted}`")


class UnderReplicatedError(KafkaAdapterError):
    """A topic is replicated less safely than the cluster allows (:class:`ReplicationFinding`).

    ``str()`` is one line: the first finding, how to fix it, how many more."""

    def __init__(self, findings: list[ReplicationFinding], bootstrap: str = "BOOTSTRAP"):
        self.findings = list(findings)
        first = self.findings[0]
        more = len(self.findings) - 1
        tail = f" ({more} more such setting{'s' if more > 1 else ''})" if more else ""
        super().__init__(f"{first.describe()}{tail}; {first.fix(bootstrap)}")


def topic_replication_findings(topic: str, replicas: int, config: dict[str, str | None],
                               wanted_rf: int) -> list[ReplicationFinding]:
    """The findings of one topic: ``replicas`` (the fewest of any partition), its effective
    ``config``, the replication factor the cluster allows (``wanted_rf``)."""
    out: list[ReplicationFinding] = []
    if replicas < wanted_rf:
        out.append(ReplicationFinding(topic, "replication.factor", str(replicas), str(wanted_rf),
                                      f"its records live on {replicas} broker{'s' if replicas != 1 else ''} only"))
    isr = config.get("min.insync.replicas")
    if replicas >= 3 and isr is not None and isr.isdigit() and int(isr) < 2:
        out.append(ReplicationFinding(topic, "min.insync.replicas", isr, "2",
                                      "an acks=all write may be acknowledged by one broker and lost with it"))
    unclean = (config.get("unclean.leader.election.enable") or "false").strip().lower()
    if unclean == "true":
        out.append(ReplicationFinding(topic, "unclean.leader.election.enable", "true", "false",
                                      "a replica that missed writes may become the leader and drop them"))
    return out


def replication_findings(kafka: KafkaSettings | str, names: TopicNames,
                         timeout: float = 30.0) -> list[ReplicationFinding]:
    """The findings (:func:`topic_replication_findings`) of every existing topic of ``names``:
    the cluster allows ``kafka.replication_factor`` replicas when set, else ``min(3, brokers)``
    (one broker: nothing to find but an unclean election). Topics that do not exist are skipped."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    kafka = KafkaSettings.of(kafka)
    admin = kafka.admin()
    md = retry_transient(lambda left: admin.list_topics(timeout=left), f"the topics of Kafka at {kafka.bootstrap}",
                         timeout)
    wanted_rf, _config = replication(len(md.brokers), kafka.replication_factor)
    topics = [t for t in names.all().values() if t in md.topics and md.topics[t].partitions]
    if not topics:
        return []
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
    configs: dict[str, dict[str, str | None]] = retry_transient(
        lambda left: {res.name: {k: None if e.value is None else str(e.value) for k, e in fut.result().items()}
                      for res, fut in admin.describe_configs(resources, request_timeout=left).items()},
        f"the configs of topics {topics}", timeout)
    out: list[ReplicationFinding] = []
    for topic in topics:
        replicas = min(len(p.replicas) for p in md.topics[topic].partitions.values())
        out += topic_replication_findings(topic, replicas, configs.get(topic, {}), wanted_rf)
    return out


def check_replication(kafka: KafkaSettings | str, names: TopicNames, timeout: float = 30.0) -> None:
    """Raise :class:`UnderReplicatedError` (one line: topic, setting, value, the fix) when a
    topic is replicated less safely than the cluster allows (:func:`replication_findings`)."""
    kafka = KafkaSettings.of(kafka)
    findings = replication_findings(kafka, names, timeout)
    if findings:
        raise UnderReplicatedError(findings, kafka.bootstrap)


def seed_group_offsets(kafka: KafkaSettings | str, group_id: str, topics: Iterable[str], timeout: float = 10.0,
                       like: str | None = None) -> int:
    """Give every partition of ``topics`` a committed offset for ``group_id`` (its low
    watermark, or the committed offset of group ``like`` where that has one) where it has none
    yet. Best effort, and only possible while the group has no member: a partition with no
    committed offset is left to the consumer's reset policy, which Faust applies late after a
    rebalance (records produced meanwhile could be skipped). Returns how many offsets were
    seeded. (``like``: a new group taking over from another, e.g. the route workers of
    ``--stages route`` from the all-stage workers before them, starts where that one stands.)"""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    topics = list(topics)
    kafka = KafkaSettings.of(kafka)
    consumer = kafka.consumer(group_id)
    other = kafka.consumer(like) if like is not None else None
    seeds: list[TopicPartition] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                seeds = []
                for topic in topics:
                    md = consumer.list_topics(topic, timeout=timeout)  # retried: this loop, until the deadline
                    if topic not in md.topics:
                        continue
                    parts = list(md.topics[topic].partitions)
                    committed = consumer.committed([TopicPartition(topic, p) for p in parts],  # retried: this loop
                                                   timeout=timeout)
                    missing = [tp.partition for tp in committed if tp.offset < 0]
                    theirs = {}
                    if missing and other is not None:
                        theirs = {tp.partition: tp.offset for tp in other.committed(  # retried: this loop
                            [TopicPartition(topic, p) for p in missing], timeout=timeout) if tp.offset >= 0}
                    for p in missing:
                        if p in theirs:
                            seeds.append(TopicPartition(topic, p, theirs[p]))
                            continue
                        low, _high = consumer.get_watermark_offsets(  # retried: this loop
                            TopicPartition(topic, p), timeout=timeout)
                        seeds.append(TopicPartition(topic, p, max(low, 0)))
                break
            except KafkaException:  # e.g. the group coordinator of a fresh broker is still loading
                if time.monotonic() > deadline:
                    return 0
                time.sleep(0.5)
    finally:
        consumer.close()
        if other is not None:
            other.close()
    if not seeds:
        return 0
    admin = kafka.admin()
    try:
        futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id, seeds)],
                                                     request_timeout=timeout)
        for fut in futures.values():
            fut.result()
    except KafkaException:
        return 0  # the group has members (they commit as they go): nothing to seed
    return len(seeds)


def delete_run(kafka: KafkaSettings | str, prefix: str, app_id: str | None = None,
               timeout: float = 30.0) -> tuple[list[str], list[str]]:
    """Delete what one finished run left on the cluster: the topics named with ``prefix``, and
    for ``app_id`` the workers' own ``APP_ID-…`` topics (Faust's) and the consumer groups
    ``APP_ID`` and ``APP_ID-…`` (a group with members left, a worker killed before its session
    ended, stays). For the demo and the benches: a local broker that serves many runs keeps every
    run's topics otherwise, and its log cleaner keeps compacting theirs. Returns the (topics,
    groups) deleted; raises :class:`KafkaAdapterError` when the cluster cannot be reached."""
    if not prefix or (app_id is not None and not app_id):
        raise ValueError("delete_run needs a run's topic prefix (and app id): an empty one names every topic")
    kafka = KafkaSettings.of(kafka)
    admin = kafka.admin()
    mine = (prefix,) if app_id is None else (prefix, app_id + "-")
    names = [t for t in retry_transient(lambda left: admin.list_topics(timeout=left), f"the topics of {kafka.bootstrap}",
                                        timeout).topics if t.startswith(mine)]
    topics = _settled(admin.delete_topics(names, operation_timeout=timeout)) if names else []
    groups: list[str] = []
    if app_id is not None:
        try:
            listed = admin.list_consumer_groups(request_timeout=timeout).result().valid
        except KafkaException:
            listed = []
        ids = [g.group_id for g in listed if g.group_id == app_id or g.group_id.startswith(app_id + "-")]
        if ids:
            groups = _settled(admin.delete_consumer_groups(ids, request_timeout=timeout))
    return sorted(topics), sorted(groups)


def _settled(futures: Mapping[str, Any]) -> list[str]:
    """The names whose admin future succeeded (the others' errors are not the caller's to act on)."""
    done = []
    for name, fut in futures.items():
        try:
            fut.result()
            done.append(name)
        except KafkaException:
            pass
    return done
