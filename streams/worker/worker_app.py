"""The worker's Faust app at module level, for Faust's own command line.

``faust -A streams.worker.worker_app agents`` (or ``tables``, ``--json agents``, …) imports this
module and finds ``app``: the app ``traintrace worker`` runs, built from the same
``TRAINTRACE_*`` / ``KAFKA_BOOTSTRAP_SERVERS`` variables with the same defaults
(:meth:`WorkerSettings.from_env`; without ``KAFKA_BOOTSTRAP_SERVERS``, ``localhost:9092``: this
module is the runtime's, it does not look for the laptop's local broker). Importing it starts nothing and needs no broker; the listing
commands only read the app's agents and tables. Run workers with ``traintrace worker`` (it
creates the topics and checks the data directory first).
"""

from __future__ import annotations

from streams.worker.faust_app import create_app
from streams.worker.gctune import tune as tune_gc
from streams.worker.settings import WorkerSettings


def settings_from_env() -> WorkerSettings:
    """The settings of ``traintrace worker`` without flags (its environment variables)."""
    import os

    return WorkerSettings.from_env(os.environ)


tune_gc()
app = create_app(settings_from_env())
