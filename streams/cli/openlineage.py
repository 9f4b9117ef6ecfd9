"""``traintrace openlineage``: the pipeline's lineage as OpenLineage events, sent as it happens."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import click

from streams.cli.common import err_console, fail, kafka_options, kafka_settings, operator_errors, topic_prefix_option, \
    topics_for

_TRANSPORTS = ("http", "kafka", "file", "console")


@click.command()
@click.option("--transport", type=click.Choice(_TRANSPORTS), default="console", show_default=True,
              envvar="TRAINTRACE_OPENLINEAGE_TRANSPORT",
              help="Where the events go: http (a Marquez/OpenLineage URL), kafka (a topic), file (JSON lines), "
                   "console (stdout). [env TRAINTRACE_OPENLINEAGE_TRANSPORT]")
@click.option("--url", default=None, envvar="TRAINTRACE_OPENLINEAGE_URL", metavar="URL",
              help="http: the backend's base URL, e.g. http://marquez:5000. [env TRAINTRACE_OPENLINEAGE_URL]")
@click.option("--endpoint", default="api/v1/lineage", show_default=True, metavar="PATH",
              help="http: the path events are POSTed to.")
@click.option("--api-key", default=None, envvar="TRAINTRACE_OPENLINEAGE_API_KEY", metavar="KEY",
              help="http: a bearer token. Prefer the variable (a flag shows in the process list). "
                   "[env TRAINTRACE_OPENLINEAGE_API_KEY]")
@click.option("--topic", "ol_topic", default=None, envvar="TRAINTRACE_OPENLINEAGE_TOPIC", metavar="TOPIC",
              help="kafka: the topic events are produced to (on the --bootstrap cluster). "
                   "[env TRAINTRACE_OPENLINEAGE_TOPIC]")
@click.option("--path", "ol_path", default=None, envvar="TRAINTRACE_OPENLINEAGE_PATH", metavar="FILE",
              type=click.Path(dir_okay=False),
              help="file: the file events are appended to, one JSON object a line. [env TRAINTRACE_OPENLINEAGE_PATH]")
@click.option("--namespace", default="traintrace", show_default=True, envvar="TRAINTRACE_OPENLINEAGE_NAMESPACE",
              help="The OpenLineage namespace of the jobs. [env TRAINTRACE_OPENLINEAGE_NAMESPACE]")
@click.option("--from-end", is_flag=True, help="Only what arrives from now on (default: the topics from the beginning).")
@click.option("--once", is_flag=True, help="Stop at the end of the topics (a backfill; tests) instead of following.")
@click.option("--poll", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between rounds over the topics when following.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as one JSON object when done.")
@kafka_options(start_broker=False)
@topic_prefix_option
def openlineage(transport: str, url: str | None, endpoint: str, api_key: str | None, ol_topic: str | None,
                ol_path: str | None, namespace: str, from_end: bool, once: bool, poll: float, as_json: bool,
                bootstrap: str | None, kafka_config: str | None, topic_prefix: str | None) -> None:
    """Send the lineage as OpenLineage events (spec 2-0-2) through the openlineage-python client.

    Each job incarnation is a run of the job named after the job id (START, RUNNING on
    checkpoints, COMPLETE/FAIL/ABORT; a rollback ABORTs the incarnation and STARTs the next,
    linked by the parent facet); checkpoints are datasets (written: outputs; consumed: inputs
    with their mode); divergences, incidents, plans, halts and taint are traintrace_* facets.
    Reads lineage.events, lineage.manifests, lineage.control and lineage.checkpoints from the
    beginning (--from-end: only new records) and keeps following (--once: stop at their end).
    Ctrl-C stops (exit 0); exit 2 when Kafka, a topic or the transport fails.
    """
    from streams.openlineage import OpenLineageError, OpenLineageMapper
    from streams.openlineage.emitter import Emitter, TransportSpec
    from streams.openlineage.follow import Follower, FollowStats, stream_openlineage

    kafka = kafka_settings(bootstrap, kafka_config)
    topics = topics_for(topic_prefix)
    spec = TransportSpec(transport, url=url, endpoint=endpoint, api_key=api_key, topic=ol_topic, path=ol_path,
                         kafka_config=kafka.producer_config() if transport == "kafka" else None)
    if transport == "console":
        _console_logging()
    stats = FollowStats()

    def on_skip(topic: str, partition: int, offset: int, reason: str) -> None:
        stats.skipped += 1
        err_console.print(f"skipped {topic}[{partition}]@{offset}: {reason}", highlight=False, markup=False,
                          soft_wrap=True)

    try:
        emitter = Emitter(spec)
    except OpenLineageError as exc:
        fail(str(exc), command="openlineage")
    try:
        with operator_errors():
            follower = Follower(kafka, topics, from_end=from_end, on_skip=on_skip)
            stream_openlineage(follower, OpenLineageMapper(namespace), emitter.emit, once=once, poll=poll,
                               stats=stats)
    except KeyboardInterrupt:
        pass
    except OpenLineageError as exc:
        fail(str(exc), command="openlineage")
    finally:
        try:
            emitter.close()
        except OpenLineageError as exc:
            err_console.print(str(exc), markup=False, highlight=False, soft_wrap=True)
    _report(stats, transport, as_json)


def _console_logging() -> None:
    """The console transport logs each event at INFO: show exactly those lines on stdout."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("openlineage.client.transport.console")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def _report(stats: Any, transport: str, as_json: bool) -> None:
    counts = {"records": stats.records, "skipped": stats.skipped, "emitted": stats.emitted,
              "by_type": dict(sorted(stats.by_type.items())), "transport": transport}
    if as_json:
        sys.stdout.write(json.dumps(counts, sort_keys=True) + "\n")
        return
    kinds = ", ".join(f"{k} {v}" for k, v in counts["by_type"].items()) or "none"
    err_console.print(f"openlineage: {stats.emitted} event(s) sent via {transport} from {stats.records} "
                      f"record(s) ({kinds}); {stats.skipped} skipped", highlight=False, soft_wrap=True)
