"""traintrace: concurrent lineage for fine-tuning jobs that share state.

Packages:
- ``streams.core``: the pure lineage semantics (SPEC §5–§10). No Kafka, Faust, Avro or I/O.
- ``streams.codec``: Avro schemas, single-object and Confluent wire formats.
- ``streams.adapters``: Kafka helpers and the local broker.
- ``streams.cli``: the ``traintrace`` command line (thin).
"""

__version__ = "0.1.0"
