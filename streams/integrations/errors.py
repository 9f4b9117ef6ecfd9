"""The errors of the framework integrations."""

from streams.errors import TraintraceError


class IntegrationError(TraintraceError):
    """A framework integration cannot do what it was asked: a checkpoint that is not in the
    store, a rollback target it cannot restore, a framework missing (install its extra)."""


def missing_framework(name: str, extra: str, exc: ImportError) -> IntegrationError:
    return IntegrationError(f"{name} is not installed: pip install 'traintrace[{extra}]' ({exc})")
