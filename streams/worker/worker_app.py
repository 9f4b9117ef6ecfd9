"""The worker's Faust app at module level, for Faust's own command line.

``faust -A streams.worker.worker_app agents`` (or ``tables``, ``--json agents``, …) imports this
module and finds ``app``: the app ``traintrace worker`` runs, built from the same
``TRAINTRACE_*`` / ``KAFKA_BOOTSTRAP_SERVERS`` variables with the same defaults
(:meth:`WorkerSettings.from_env`). Importing it starts nothing and needs no broker; the listing
commands only read the app's agents and tables. Run workers with ``traintrace worker`` (it
creates the topics and checks the data directory first).
"""

from __future__ import annotations

from streams.worker.faust_app import create_app
from streams.worker.gctune import tune as tune_gc
from streams.worker.settings import WorkerSettings


def settings_from_env() -> WorkerSettings:
    """The settings of ``traintrace worker`` without flags (its environment variables)."""
    return WorkerSettings.from_env()


tune_gc()
app = create_app(settings_from_env())
