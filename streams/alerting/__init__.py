"""Alerts where the operators already are (issue 26): the referee's alerts of ``lineage.alerts``
forwarded to an Alertmanager (its v2 API), labelled for a routing tree and resolved when what
they ask for is done.

- :mod:`.mapping` (pure): an Alert record as an Alertmanager alert — labels (``alertname``,
  ``kind``, ``severity``, ``cohort``, ``job``, ``incident``), annotations a person can act on.
- :mod:`.book` (pure): which alerts are active and which resolved, folded from ``lineage.alerts``,
  ``lineage.control`` and ``lineage.manifests`` — an incident's page resolves when every plan it
  made has ended (acknowledged: the job rolled back past it), a halt's when it is released.
- :mod:`.forwarder`: follows the three topics and posts to Alertmanager, restartably (the same
  labels every time: Alertmanager deduplicates, nothing pages twice).
"""
