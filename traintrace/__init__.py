"""traintrace: the record and the referee for fine-tuning jobs that train at the same time and
share state.

The public import name. A training job needs only this::

    import traintrace

    client = traintrace.JobClient("A", "cohort-1", "tiny-gpt", journal_dir="runs/A",
                                  worker_url="http://127.0.0.1:6066")

and, inside a framework, one of ``traintrace.integrations.torch``, ``.hf``, ``.lightning`` or
``.ray`` (each needs its extra: ``pip install 'traintrace[torch]'``, ``[hf]``, ``[lightning]``,
``[ray]``). The implementation lives in the ``streams`` package.
"""

from importlib.metadata import PackageNotFoundError, version

from streams.client import (
    ClientError,
    ControlCommand,
    GateRefused,
    JobClient,
    LoadedContent,
    Restored,
    checkpoint_status,
    hash_path,
)
from streams.errors import TraintraceError
from streams.integrations.errors import IntegrationError
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames

try:
    __version__ = version("traintrace")
except PackageNotFoundError:  # pragma: no cover - a source tree that was not installed
    __version__ = "0+unknown"

__all__ = [
    "ClientError",
    "ControlCommand",
    "GateRefused",
    "IntegrationError",
    "JobClient",
    "KafkaSettings",
    "LoadedContent",
    "Restored",
    "TopicNames",
    "TraintraceError",
    "__version__",
    "checkpoint_status",
    "hash_path",
]
