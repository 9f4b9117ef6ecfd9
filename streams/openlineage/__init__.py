"""OpenLineage out: traintrace's lineage as OpenLineage RunEvents (spec 2-0-2) for Marquez,
DataHub and any other OpenLineage backend.

- :mod:`.mapping`: events and the referee's records -> RunEvent dicts (pure, incremental);
- :mod:`.facets`: the standard facets used and traintrace's own (``traintrace_*``), whose JSON
  schemas ship in ``facets/``;
- :mod:`.emitter`: the official ``openlineage-python`` client and its transports (http, kafka,
  file, console);
- :mod:`.follow`: reading the topics in rounds and emitting as records arrive
  (``traintrace openlineage``).
"""

from streams.openlineage.errors import EmitError, OpenLineageError, TransportConfigError
from streams.openlineage.mapping import OpenLineageMapper, dataset_of_uri, event_time, run_id

__all__ = ["EmitError", "OpenLineageError", "OpenLineageMapper", "TransportConfigError", "dataset_of_uri",
           "event_time", "run_id"]
