"""Kafka-facing helpers: the local broker (``streams.adapters.broker``) and, later, clients."""
