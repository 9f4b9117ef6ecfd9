"""Write the Helm chart's data files from the code's own tables (one source of truth):

    python deploy/helm/tables.py

- ``traintrace/files/tables.json``: the topics of ``standard_topics`` and the roles' ACLs of
  ``role_grants`` (:func:`streams.kafka.strimzi.chart_tables`), rendered by the chart's KafkaTopic
  and KafkaUser templates;
- ``traintrace/files/traintrace-rules.yml``: ``deploy/prometheus/traintrace-rules.yml``, rendered
  as the chart's PrometheusRule (Helm reads only files inside the chart).

``tests/unit/test_helm.py`` checks the committed files are what this writes, and that
``helm template`` renders exactly ``traintrace acl --strimzi``'s resources.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHART = HERE / "traintrace"
RULES = HERE.parent / "prometheus" / "traintrace-rules.yml"


def files() -> dict[Path, str]:
    sys.path.insert(0, str(HERE.parents[1]))
    from streams.kafka.strimzi import chart_tables

    return {CHART / "files" / "tables.json": json.dumps(chart_tables(), indent=1) + "\n",
            CHART / "files" / "traintrace-rules.yml": RULES.read_text()}


if __name__ == "__main__":
    for path, text in files().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(HERE.parents[1])}")
