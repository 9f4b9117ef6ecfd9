"""traintrace: concurrent lineage for fine-tuning jobs that share state.

Packages, lowest first (a package imports only packages above it in this list; checked by
``tests/unit/test_layers.py``):

- ``streams.errors``: ``TraintraceError``, the root of every error traintrace raises.
- ``streams.core``: the lineage fold (SPEC §4–§10): events in, decisions out. Pure.
- ``streams.codec``: the Avro contract. ``streams.control``: the fold of ``lineage.control``
  (pure). ``streams.referee``: decisions -> records, and the processor's input (Kafka-free).
  ``streams.files``: JSON Lines, archives, atomic writes.
- ``streams.signing``: Ed25519 keys and commitment signatures. ``streams.kafka``: every Kafka
  client from one ``KafkaSettings``; topics; the local broker.
- ``streams.worker``: the Faust worker. ``streams.audit``: the log, the audit, proofs, export.
  ``streams.operator_commands``: publish, plans, release, alerts. ``streams.client``: the job client.
- ``streams.report``: the incident report. ``streams.demo``: the demo and the smoke test.
- ``streams.testing``: generators and invariants for tests and benchmarks.
- ``streams.cli``: the ``traintrace`` command line (parse, call, print).
"""

__version__ = "0.1.0"
