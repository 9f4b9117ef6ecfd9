"""The load-time gate: ask a worker whether a checkpoint may be loaded.

``GET {worker_url}/checkpoints/{id}`` (see :mod:`streams.worker.views`) answers
``{"status": "clean" | "tainted" | "unknown", "content_hash", "incident_ids", ...}``. Any failure
to get an answer (connection refused, timeout, HTTP error, a body that is not that JSON) is
reported as ``unknown`` with the reason in ``error``: a gate that cannot ask does not let a
checkpoint through as clean.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

STATUSES = ("clean", "tainted", "unknown")


def checkpoint_status(worker_url: str, checkpoint_id: str, timeout: float = 2.0) -> dict[str, Any]:
    """The worker's view of ``checkpoint_id`` (never raises; ``status`` is always one of
    :data:`STATUSES`, ``error`` says why when the worker could not be asked)."""
    url = f"{worker_url.rstrip('/')}/checkpoints/{urllib.parse.quote(checkpoint_id, safe='')}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return {"checkpoint_id": checkpoint_id, "status": "unknown",
                "error": f"worker {worker_url} unreachable or unreadable: {exc}"}
    if not isinstance(body, dict) or body.get("status") not in STATUSES:
        return {"checkpoint_id": checkpoint_id, "status": "unknown",
                "error": f"unexpected answer from {url}: {str(body)[:200]}"}
    return body
