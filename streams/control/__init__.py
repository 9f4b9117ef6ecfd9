"""``lineage.control`` read as commands (pure: no Kafka, no Avro).

- :mod:`.commands`: :class:`ControlCommand`, :func:`command_from_record` (a decoded record as a
  command) and the record names.
- :mod:`.fold`: :class:`JobControl` / :class:`ControlState` / :func:`fold_control`: per job the
  plan and halt in force, what is superseded, the command ids already there — for
  ``traintrace plans``, the worker taking a partition over, and :func:`decide`.
- :mod:`.obey`: :func:`decide`, the job client's outcome for each of its commands.
"""

from streams.control.commands import (
    CONTROL_RECORDS,
    PLAN_RECORDS,
    ControlCommand,
    command_from_record,
)
from streams.control.obey import ACTIONS, JobView, decide
from streams.control.fold import ControlState, JobControl, fold_control

__all__ = [
    "ACTIONS",
    "CONTROL_RECORDS",
    "PLAN_RECORDS",
    "ControlCommand",
    "ControlState",
    "JobControl",
    "JobView",
    "command_from_record",
    "decide",
    "fold_control",
]
