"""Witnesses of the cohorts' fold logs (issue 28): the C2SP tlog-witness protocol's client.

A witness (https://c2sp.org/tlog-witness) cosigns a log's checkpoint only when it is consistent
with every checkpoint of that log it cosigned before, so a processor cannot show two auditors two
histories. :mod:`.client` submits a signed checkpoint with the consistency proof from the size the
witness last cosigned and returns its cosignature lines, verified by the witness's key.
"""

from streams.witness.client import (  # noqa: F401
    Witness,
    WitnessError,
    WitnessRefused,
    add_checkpoint_body,
    cosign,
    submit,
)
from streams.witness.follow import Outcome, WitnessState, cosign_latest  # noqa: F401
