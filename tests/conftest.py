"""Shared pytest configuration for traintrace.

Deliberately empty of global fixtures and hooks: unit tests (``tests/unit``) need nothing, and the
Kafka fixtures (``kafka_bootstrap``, ``kafka_admin``, ``topic_factory``, ``pipeline``, ``group_id``,
``group_factory``) live in ``tests/integration/conftest.py``, which also marks every test there
``integration`` (deselect them with ``-m "not integration"``).
"""
