"""``traintrace ui``: the live lineage page, served from the pipeline's topics."""

from __future__ import annotations

import time
from pathlib import Path

import click

from streams.signing import TRUSTED_KEYS_ENV
from rich.console import Console

from streams.cli.common import (
    core_config,
    core_options,
    fail,
    kafka_options,
    kafka_settings,
    topic_prefix_option,
    topics_for,
    trusted_keyring,
)

PORT_ENV = "TRAINTRACE_UI_PORT"


@click.command()
@click.option("--port", type=click.IntRange(min=0, max=65535), default=6070, show_default=True, envvar=PORT_ENV,
              help=f"The port the page is served on. [env {PORT_ENV}]")
@click.option("--host", default="127.0.0.1", show_default=True, envvar="TRAINTRACE_UI_HOST",
              help="The address to listen on (0.0.0.0: every interface). [env TRAINTRACE_UI_HOST]")
@click.option("--trusted-keys", envvar=TRUSTED_KEYS_ENV, default=None, metavar="DIR|FILE",
              type=click.Path(exists=True),
              help="Verify every control record with this keyring (the job clients' one): a record that does "
                   "not verify is never shown as a plan, only listed as left out; without it the page says "
                   "signatures are not checked. " f"[env {TRUSTED_KEYS_ENV}]")
@kafka_options(start_broker=False)
@topic_prefix_option
@core_options
def ui(port: int, host: str, trusted_keys: str | None, bootstrap: str | None, kafka_config: str | None,
       topic_prefix: str | None, window: int, spike_factor: float, taint_margin: int,
       require_sealed_events: bool = False, job_keys: Path | None = None) -> None:
    """Serve the live lineage page: cohorts, jobs with their step and state, open incidents with
    their scope and attribution, plans and their acknowledgements, halts, alerts as they arrive,
    tainted checkpoints, and the lineage drawing of a cohort (the report's picture, redrawn as the
    cohort changes).

    Reads lineage.by-cohort (folded through the worker's own referee, in the worker's order),
    lineage.control and lineage.alerts from the beginning, then follows them; the page polls
    the server every second. /checkpoints/ID answers as a worker does (clean, tainted with its
    incidents, unknown). Give the pipeline's core options (--window, ...) when it runs with other
    than the defaults. Ctrl-C stops. Exit 2 when the port is taken or no broker is configured.
    """
    from streams.ui import UIError, start_ui

    config = core_config(window, spike_factor, taint_margin, require_sealed_events, job_keys)
    kafka = kafka_settings(bootstrap, kafka_config)
    trusted = trusted_keyring(trusted_keys)
    try:
        server = start_ui(kafka, topics_for(topic_prefix), port=port, host=host, config=config, trusted=trusted)
    except UIError as exc:
        fail(str(exc))
    Console(stderr=True).print(f"traintrace ui: serving {server.url} (topics from {kafka.bootstrap}); Ctrl-C stops",
                               highlight=False)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
