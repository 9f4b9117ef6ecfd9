"""The Faust application: two thin agents around the router and the referee.

Flow (docs/pipeline.md has the diagram)::

    lineage.events ──(route agent: decode, validate, job→cohort map)──▶ lineage.by-cohort
       keyed job_id                     │ bad records                        keyed cohort_id
                                        ▼                                       │
                                   lineage.dlq            (referee agent: one core engine per cohort)
                                                                                 ▼
                 lineage.control · lineage.manifests · lineage.alerts · lineage.commitments ·
                 lineage.checkpoints (compacted checkpoint statuses, for /checkpoints/{id})

- Both agents use ``take_events`` batches; outputs go through an idempotent confluent-kafka
  producer of each stage (``murmur2_random``, :mod:`streams.worker.outbox`) and are delivered
  before the positions count as processed, so offsets are committed only after everything the
  batch caused is on the broker (at-least-once; the next batch is processed meanwhile). The
  worker commits its positions itself (:mod:`streams.worker.positions`,
  :mod:`streams.worker.assignment`).
- The router's job → cohort map is kept in ``lineage.job-cohorts`` (:mod:`streams.worker.jobmap`),
  keyed and partitioned like ``lineage.events``.
- The referee's state is event-sourced from ``lineage.by-cohort`` (kept forever): when a worker
  is assigned a partition it replays it up to the group's committed offset without publishing,
  re-reads the command ids already on ``lineage.control``, and goes on
  (:mod:`streams.worker.recovery`); duplicates of events are dropped by the core's
  (job_id, seq) digests and duplicate commands by their ids.

This module only wires the parts (:mod:`streams.worker.stages`, :mod:`streams.worker.housekeeping`,
:mod:`streams.worker.checkpoint_view`, :mod:`streams.worker.views`) to Faust's agents, timers
and rebalance signals.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading

import faust
from faust.types import TP

from streams.codec import Codec
from streams.referee.input import ParsedEvents
from streams.referee.referee import Referee
from streams.worker import metrics, views
from streams.worker.assignment import Assignment
from streams.worker.checkpoint_view import CheckpointView
from streams.worker.clock import InputClock
from streams.worker.feed import DirectFeed
from streams.worker.gctune import TRIM_INTERVAL_S, release_free_memory
from streams.worker.health import Health, Watchdog, guarded
from streams.worker.housekeeping import Housekeeping
from streams.worker.jobmap import JobCohortMap
from streams.worker.outbox import Outbox
from streams.worker.recovery import Takeover
from streams.worker.rocks import open_disk_map, open_disk_set
from streams.worker.sentinel import ControlSentinel, sentinel_keyring
from streams.worker.settings import WorkerSettings
from streams.worker.snapshots import SnapshotStore
from streams.worker.stages import FoldStage, RouteStage, StallWatch, die, faust_record

log = logging.getLogger("traintrace.worker")


def _signers(settings: WorkerSettings):
    """The commitment and control signers of ``settings.signing_key`` (None, None: commitments
    and control records go out unsigned, which only a local demo should do)."""
    if settings.signing_key is None:
        log.warning("no --signing-key: LineageCommitments and lineage.control records go out UNSIGNED; "
                    "a job client with a trusted keyring ignores every command of this worker")
        return None, None
    from streams.signing import CommitmentSigner, ControlSigner

    origin = None if settings.log_origin == "none" else settings.log_origin
    signer = CommitmentSigner.from_file(settings.signing_key).with_log_origin(origin)
    log.info("signing LineageCommitments and control records with key %s (%s); checkpoints of origin %s/<cohort>, "
             "note key %s", signer.key_id, settings.signing_key, origin or "(none)", signer.note_signer.key
             if signer.note_signer else "-")
    return signer, ControlSigner(signer.private_key)


#: how much of a partition one fetch of Faust's consumer brings when feeds read every input it
#: subscribes to (WorkerSettings.all_fed): it only keeps the group then, and its fetcher still
#: fetched and unpacked a megabyte a partition at each assignment (86,000 of a 203,000-event
#: backlog at start-up, ~2 % of a worker's time) before the pause took hold, to skip them all.
#: A fetch brings at least one record batch whatever the limit.
FAUST_FETCH_BYTES_FED = 16 * 1024

#: how long the agent of a stage that a direct feed reads waits for a batch: its partitions are
#: paused in Faust's consumer, so nothing comes, and each empty round of ``take_events`` costs
#: three tasks; at ``batch_within_s`` (10 ms) the two agents woke an idle worker 200 times a
#: second, most of its 7 % of a core
FED_AGENT_WITHIN_S = 1.0


def _faust_app(settings: WorkerSettings) -> faust.App:
    fetch = {"consumer_max_fetch_size": FAUST_FETCH_BYTES_FED} if settings.all_fed else {}
    return faust.App(
        settings.group_id,  # the app id, or its route group for a route-only worker (--stages)
        # broker and broker_client_id (traintrace-<host>-<web port>, also the client.id of this
        # process's confluent-kafka clients)
        **settings.kafka.faust_options(),
        store=settings.store,
        datadir=str(settings.data_dir),
        web_enabled=settings.web_enabled,
        web_host=settings.web_host,
        web_bind=settings.web_host,
        web_port=settings.web_port,
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=settings.partitions,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=settings.commit_interval_s,
        stream_wait_empty=False,
        producer_acks=-1,
        # a dead worker's partitions move to the others within seconds
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=max(0.5, settings.session_timeout_s / 10),
        broker_rebalance_timeout=max(20.0, settings.session_timeout_s * 2),
        **fetch,
    )


async def commit_owned(app: faust.App, offsets: dict[TP, int]) -> dict[TP, int]:
    """Commit ``offsets`` through Faust's consumer; returns those committed. Faust's ``_commit``
    silently leaves out partitions not in the consumer's assignment and says True: those are left
    out here first and logged, so a position is never taken for committed when it is not."""
    assigned = app.consumer.assignment()
    mine = {tp: o for tp, o in offsets.items() if tp in assigned}
    if len(mine) < len(offsets):
        log.warning("positions of %s not committed: not in the consumer's assignment (a rebalance under way)",
                    sorted(f"{tp.topic}[{tp.partition}]" for tp in offsets if tp not in mine))
    if mine and await app.consumer._commit(mine):
        return mine
    return {}


def create_app(settings: WorkerSettings) -> faust.App:
    codec = Codec()
    app = _faust_app(settings)
    topics = settings.topics
    # acks=False: Faust commits nothing for the two inputs; the worker commits what it has
    # processed and flushed itself (streams.worker.positions explains why)
    events_topic = app.topic(topics.events, key_serializer="raw", value_serializer="raw",
                             partitions=settings.partitions, acks=False)
    by_cohort_topic = app.topic(topics.by_cohort, key_serializer="raw", value_serializer="raw",
                                partitions=settings.partitions, acks=False)

    outbox = Outbox(settings, codec)  # the fold stage's, housekeeping's and a takeover's (under the fold's lock)
    signer, control_signer = _signers(settings)
    referee = Referee(settings.core, settings.ack_timeout_ms, signer=signer, control_signer=control_signer)
    ckview = CheckpointView(settings, codec)
    # the input watermark: how far the events are routed, by whichever group routes them (--stages)
    clock = InputClock(settings.kafka, topics.events, settings.routing_group)
    jobmap = JobCohortMap()  # job_id -> cohort_id, kept in lineage.job-cohorts
    # the router's parsed events, handed to the fold: one decode an event (both stages in this process)
    parsed = ParsedEvents() if settings.stages == "all" else None
    # the route stage's own outbox: a stage waits for what it sent (a Ticket), not for the other
    # stage's records too (in a route-only worker nothing else sends: no cohort is folded there)
    route_outbox = Outbox(settings, codec) if settings.routes and settings.folds else outbox
    route = RouteStage(settings, codec, jobmap, route_outbox, asyncio.Lock(), parsed)  # the router
    fold = FoldStage(settings, codec, referee, outbox, asyncio.Lock(), parsed)  # the fold (decide agent, timers)
    snapshots = SnapshotStore(settings, codec, referee, signer)  # lineage.snapshots
    snapshots.folded_everywhere = lambda: fold.folded_all  # (quiet counts in the worker's events)
    assignment = Assignment(settings, route, fold,
                            Takeover(settings, codec, referee, outbox, fold.input.position, snapshots),
                            commit_offsets=functools.partial(commit_owned, app), snapshots=snapshots)
    stalls = StallWatch(settings, (route, fold),
                        faust_read_offset=lambda topic, p: app.consumer._read_offset.get(TP(topic, p)))
    housekeeping_ = Housekeeping(settings, codec, referee, outbox, clock, fold, snapshots.resting)
    health = Health()
    keyring = sentinel_keyring(settings)
    # (with the route stage, whose job map names a job's cohort; a fold-only worker leaves it to the route workers)
    sentinel = ControlSentinel(settings, codec, keyring, cohort_of=jobmap.get) \
        if keyring is not None and settings.routes else None
    watchdog = Watchdog(health, settings.watchdog_s) if settings.watchdog_s > 0 else None

    app.traintrace = {  # for the web views and tests
        "settings": settings, "referee": referee, "router": route.router, "checkpoints": ckview,
        "position": fold.input.position, "route_position": route.input.position, "health": health,
        "sentinel": sentinel,
    }

    @app.on_partitions_revoked.connect
    async def on_revoked(app_, revoked, **kwargs) -> None:
        await assignment.revoked(revoked)

    # only the stages this worker runs (--stages) have a feed and an agent: Faust subscribes to their inputs
    feeds = ([DirectFeed(settings, route)] if settings.routes and settings.route_feed == "direct" else []) \
        + ([DirectFeed(settings, fold)] if settings.folds and settings.fold_feed == "direct" else [])
    fed = {f.stage.topic for f in feeds}

    def within(topic: str) -> float:
        """How long an agent's ``take_events`` waits to fill a batch: ``batch_within_s`` when Faust
        feeds it; :data:`FED_AGENT_WITHIN_S` when a direct feed reads its topic (nothing comes)."""
        return FED_AGENT_WITHIN_S if topic in fed else settings.batch_within_s

    @app.on_partitions_assigned.connect
    async def on_assigned(app_, assigned, **kwargs) -> None:
        await assignment.assigned(assigned)
        if fed:  # the feeds read these: Faust's fetch of them would only be skipped
            app.consumer.pause_partitions({tp for tp in assigned if tp.topic in fed})

    closers = ((clock.close, stalls.close, snapshots.close) + ((sentinel.close,) if sentinel is not None else ())
               + tuple(f.close for f in feeds))
    app.on_before_shutdown.connect(lambda *a, **kw: assignment.stop(closers))

    # every timer's round is guarded: its exception is counted and told, never a crash of the
    # app (streams.worker.health); the next round tries again
    @app.timer(interval=settings.commit_interval_s)
    async def commit_positions() -> None:
        await guarded(health, "commit", assignment.commit_processed)

    async def route_agent(stream):
        """Stage one: decode and validate each record, route it to its cohort."""
        async for batch in stream.take_events(settings.batch_max, within(topics.events)):
            try:
                await route.process([faust_record(e) for e in batch])
            except Exception as exc:  # never let a batch whose outputs are not out count as done
                die("route", exc)

    if settings.routes:
        app.agent(events_topic)(route_agent)

    def feed_task(feed: DirectFeed) -> None:
        async def run_feed() -> None:
            """A stage's records in batches from the feed's own consumer (streams.worker.feed)."""
            try:
                await feed.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # as in the agents: never count unflushed outputs as done
                die(f"{feed.stage.name}-feed", exc)

        run_feed.__name__ = run_feed.__qualname__ = f"{feed.stage.name}_feed"
        app.task(run_feed)

    for f in feeds:
        feed_task(f)

    def highwater(topic: str, partition: int) -> int | None:
        """A fed partition's end offset as its feed last saw it (no broker call)."""
        for f in feeds:
            high = f.highwater(topic, partition)
            if high is not None:
                return high
        return None

    async def decide(stream):
        """Stage two: fold each cohort's events through the core, publish the decisions."""
        async for batch in stream.take_events(64, within(topics.by_cohort)):
            try:
                await fold.process([faust_record(e) for e in batch])
            except Exception as exc:  # never let a batch whose outputs are not out count as done
                die("decide", exc)

    if settings.folds:
        app.agent(by_cohort_topic)(decide)

    @app.timer(interval=2.0)
    async def stalled_partitions() -> None:
        """Records Faust read but never delivered at the tail of an owned partition."""
        await guarded(health, "stall-check", stalls.check)

    @app.timer(interval=1.0)
    async def housekeeping() -> None:
        await guarded(health, "housekeeping", housekeeping_.run)

    @app.timer(interval=2.0)
    async def lag_metrics() -> None:
        async def observe() -> None:
            lags = metrics.observe_lag(app.consumer, (route.input, fold.input),
                                       highwater=highwater if feeds else None)
            if watchdog is not None:
                watchdog.progress(lags)

        await guarded(health, "lag-metrics", observe)

    @app.timer(interval=TRIM_INTERVAL_S)
    async def give_memory_back() -> None:
        """What the fold, a takeover's reads and the cohorts that left memory freed goes back to
        the system (a fraction of a millisecond: streams.worker.gctune)."""
        release_free_memory()

    @app.timer(interval=1.0)
    async def heartbeat() -> None:
        """The watchdog's sign that the event loop turns."""
        if watchdog is not None:
            watchdog.beat()

    @app.task
    async def start_views() -> None:
        ckview.start()
        if settings.store.startswith("rocksdb"):  # what grows with every command ever published, out of memory
            published = open_disk_set(settings.data_dir / "published-commands", "the published command ids",
                                      referee.published)
            if published is not None:
                referee.published = published
            in_force = open_disk_map(settings.data_dir / "plans-in-force", "the plans in force", referee.in_force,
                                     write_buffer=256 * 1024, cache=256 * 1024)
            if in_force is not None:
                referee.in_force = in_force
        snapshots.resting.start()
        if sentinel is not None:
            sentinel.start()
        if watchdog is not None:
            watchdog.beat()
            watchdog.start()

    views.register(app, referee, ckview, fold.lock, health,
                   owned=lambda: {"events": sorted(route.input.owned), "by_cohort": sorted(fold.input.owned)},
                   snapshots=snapshots, folded=lambda: metrics.counter_value(metrics.FOLDED))
    _exit_on_crash(app, health)
    return app


def _exit_on_crash(app: faust.App, health: Health, grace_s: float = 15.0) -> None:
    """A crashed Faust app stops its services but may leave the process alive, consuming
    nothing (seen: "Stopping..." and then silence): no supervisor would restart it. On a crash
    the worker says dead on /health and, ``grace_s`` later whatever the shutdown did, exits 70
    (:mod:`streams.worker.supervise`)."""
    crash = app.crash

    async def crashed(reason: BaseException) -> None:
        if health.dead is None:
            health.dead = f"crashed: {reason!r}"
            log.critical("the worker crashed (%r): exiting with status 70 within %.0f s so that it is restarted",
                         reason, grace_s)

            def leave() -> None:
                logging.shutdown()
                os._exit(70)

            timer = threading.Timer(grace_s, leave)  # a thread: the event loop may be stopping
            timer.daemon = True
            timer.start()
        await crash(reason)

    app.crash = crashed  # type: ignore[method-assign]
