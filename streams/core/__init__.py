"""The lineage core: SPEC §4–§10 as pure, incremental code.

No Kafka, Faust, Avro or I/O here: events in, decisions out. The live agents, ``analyze``,
``audit`` and the demo all call this package, so live and replay cannot disagree.
"""

from streams.core.errors import CoreError, InvalidEvent
from streams.core.events import Event, event_to_dict, parse_event
from streams.core.state import Config, LineageState, fold_all
from streams.core.project import final_state

__all__ = [
    "Config",
    "CoreError",
    "Event",
    "InvalidEvent",
    "LineageState",
    "event_to_dict",
    "final_state",
    "fold_all",
    "parse_event",
]
