"""The facets traintrace puts on OpenLineage events: a few standard ones and its own.

Standard (OpenLineage spec 2-0-2): ``parent`` (ParentRunFacet 1-2-0: the rollback link, see
:mod:`streams.openlineage.mapping`), ``version`` (DatasetVersionDatasetFacet 1-0-1: a
checkpoint's content hash), ``jobType`` (JobTypeJobFacet 2-0-4) and ``lifecycleStateChange``
(LifecycleStateChangeDatasetFacet 1-0-1: ``DROP`` for a deleted checkpoint); the client adds ``tags``
(TagsRunFacet 1-0-0) to every run.

Custom (``traintrace_*``): each has a JSON schema of its own, shipped in ``facets/`` beside this
module and named by its ``_schemaURL`` (the spec requires ``_producer`` and ``_schemaURL`` on
every facet, and a custom facet's schema URL to point at its published schema). Pure: dicts in,
dicts out.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from streams import __version__

SPEC_VERSION = "2-0-2"
#: who made an event (``producer``) and each facet (``_producer``): a URI naming this code
PRODUCER = f"https://github.com/traintrace/traintrace/tree/v{__version__}/streams/openlineage"
#: where the custom facet schemas are published: the files of ``facets/`` at this version's tag
SCHEMA_BASE = f"https://github.com/traintrace/traintrace/raw/v{__version__}/streams/openlineage/facets/"

#: facet key -> schema file (without .json) of every custom facet
CUSTOM: dict[str, str] = {
    "traintrace_incarnation": "TraintraceIncarnationRunFacet",
    "traintrace_progress": "TraintraceProgressRunFacet",
    "traintrace_divergence": "TraintraceDivergenceRunFacet",
    "traintrace_incidents": "TraintraceIncidentsRunFacet",
    "traintrace_plan": "TraintracePlanRunFacet",
    "traintrace_halt": "TraintraceHaltRunFacet",
    "traintrace_checkpoint": "TraintraceCheckpointDatasetFacet",
    "traintrace_taint": "TraintraceTaintDatasetFacet",
    "traintrace_consumption": "TraintraceConsumptionInputDatasetFacet",
}

#: the standard facets used: key -> schema URL of the spec version they follow
STANDARD: dict[str, str] = {
    "parent": "https://openlineage.io/spec/facets/1-2-0/ParentRunFacet.json#/$defs/ParentRunFacet",
    "version": "https://openlineage.io/spec/facets/1-0-1/DatasetVersionDatasetFacet.json#/$defs/DatasetVersionDatasetFacet",
    "jobType": "https://openlineage.io/spec/facets/2-0-4/JobTypeJobFacet.json#/$defs/JobTypeJobFacet",
    # a checkpoint the job deleted (CheckpointDeleted, SPEC §13): its dataset is DROPped
    "lifecycleStateChange": "https://openlineage.io/spec/facets/1-0-1/LifecycleStateChangeDatasetFacet.json"
                            "#/$defs/LifecycleStateChangeDatasetFacet",
    # not ours: the openlineage-python client adds it to every run (openlineage_client_version)
    "tags": "https://openlineage.io/spec/facets/1-0-0/TagsRunFacet.json#/$defs/TagsRunFacet",
}


def schema_url(key: str) -> str:
    """The ``_schemaURL`` of facet ``key`` (custom or standard)."""
    if key in CUSTOM:
        name = CUSTOM[key]
        return f"{SCHEMA_BASE}{name}.json#/$defs/{name}"
    return STANDARD[key]


def facet(key: str, **fields: Any) -> dict[str, Any]:
    """Facet ``key`` with ``fields`` (None values left out: the spec has no nulls) and the base
    fields ``_producer`` / ``_schemaURL``."""
    body = {k: v for k, v in fields.items() if v is not None}
    return {"_producer": PRODUCER, "_schemaURL": schema_url(key), **body}


@lru_cache(maxsize=None)
def custom_schemas() -> dict[str, dict[str, Any]]:
    """Schema ``$id`` -> the schema of every custom facet, read from the package's ``facets/``."""
    out = {}
    for name in CUSTOM.values():
        text = resources.files(__package__).joinpath("facets", f"{name}.json").read_text(encoding="utf-8")
        schema = json.loads(text)
        out[schema["$id"]] = schema
    return out


# ------------------------------------------------------------------ standard facets


def parent_run(namespace: str, job: str, run_id: str, root_run_id: str | None = None) -> dict[str, Any]:
    """ParentRunFacet: ``run_id`` of job ``job`` is the parent; ``root_run_id`` (same job) the root."""
    value: dict[str, Any] = {"run": {"runId": run_id}, "job": {"namespace": namespace, "name": job}}
    if root_run_id is not None:
        value["root"] = {"run": {"runId": root_run_id}, "job": {"namespace": namespace, "name": job}}
    return facet("parent", **value)


def dataset_version(content_hash: str) -> dict[str, Any]:
    return facet("version", datasetVersion=content_hash)


def job_type() -> dict[str, Any]:
    return facet("jobType", processingType="BATCH", integration="TRAINTRACE", jobType="TRAINING")


__all__ = ["CUSTOM", "PRODUCER", "SCHEMA_BASE", "SPEC_VERSION", "STANDARD", "custom_schemas", "dataset_version",
           "facet", "job_type", "parent_run", "schema_url"]
