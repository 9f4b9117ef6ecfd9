"""Errors of the Kafka adapters."""

from __future__ import annotations

from streams.errors import TraintraceError


class KafkaAdapterError(TraintraceError):
    """A Kafka operation of traintrace failed; the message says which and why."""


class KafkaSecurityError(KafkaAdapterError):
    """Kafka refused this client: who it is, what it may do, or the TLS it speaks."""


class KafkaAuthenticationError(KafkaSecurityError):
    """The broker rejected the client's credentials (SASL)."""


class KafkaTlsError(KafkaSecurityError):
    """The TLS handshake failed (untrusted certificate, wrong name, no TLS on that port)."""


class KafkaAuthorizationError(KafkaSecurityError):
    """The broker denied an operation (an ACL is missing): principal, resource, operation."""


class KafkaProtocolError(KafkaSecurityError):
    """The client and the listener speak different protocols (PLAINTEXT against TLS, TLS
    against PLAINTEXT, no SASL login where the listener wants one): no retry can help."""
