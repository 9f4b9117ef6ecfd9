"""The root of every error traintrace raises on purpose: ``except TraintraceError`` catches ours.

One family per package, each a subclass of :class:`TraintraceError`:

==========================  ====================================================================
``streams.core``            ``CoreError`` (``InvalidEvent``: an event breaks SPEC §4)
``streams.codec``           ``CodecError`` (``DecodeError``, ``EncodeError``, ``SchemaRegistryUnavailable``)
``streams.files``           ``FilesError`` (``JsonlError``: file, line, field; ``ArchiveError``)
``streams.kafka``           ``KafkaAdapterError`` (``ReaderError``, ``BrokerError``, ``FiniteRetentionError``)
``streams.signing``         ``SigningError``
``streams.referee``           ``BadBatch`` (an input record that is no ``EventBatch``)
``streams.worker``          ``WorkerError`` (``DataDirError``)
``streams.audit``           ``AuditError`` (``AuditLogError``, ``ProofError``)
``streams.operator_commands``       ``OperatorError``
``streams.client``          ``ClientError`` (``GateRefused``)
``streams.demo``            ``DemoError`` (``SmokeError``)
``streams.integrations``    ``IntegrationError``
``streams.openlineage``     ``OpenLineageError`` (``TransportConfigError``, ``EmitError``)
``streams.ui``              ``UIError`` (``PortInUse``)
==========================  ====================================================================
"""

from __future__ import annotations


class TraintraceError(Exception):
    """Base of every error traintrace raises; the message says what went wrong and what to do."""
