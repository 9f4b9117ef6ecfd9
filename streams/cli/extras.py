"""Which commands need an extra, and the one line they print when it is not installed.

A training environment installs ``traintrace`` alone: the job client, the gate, the integrations
and the light commands. The processor's packages (``traintrace worker``, ``report``, ``ui``,
``demo``, ``smoke --live``) are the ``worker`` extra, the OpenLineage client the ``openlineage``
extra. A command whose extra is missing exits 2 with one line on stderr, e.g.::

    error: traintrace worker needs the processor's packages (not installed: faust): pip install 'traintrace[worker]'

Checked with :func:`importlib.util.find_spec` (nothing is imported), when the command runs
(``--help`` still works). :func:`extra_of_module` names the extra of a module a lazy import
did not find, for the last-resort message of :func:`streams.cli.main.main`.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import NoReturn


#: extra -> what it brings, for the message
EXTRAS: dict[str, str] = {
    "worker": "the processor's packages",
    "openlineage": "the OpenLineage client",
}

#: command -> the modules of its extra it needs (a subset: report needs only the drawing)
COMMAND_NEEDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "worker": ("worker", ("faust", "aiokafka", "prometheus_client")),
    "demo": ("worker", ("faust", "aiokafka", "prometheus_client", "matplotlib", "numpy")),
    "report": ("worker", ("matplotlib",)),
    "ui": ("worker", ("matplotlib",)),
    "smoke --live": ("worker", ("faust", "aiokafka", "prometheus_client")),
    "openlineage": ("openlineage", ("openlineage.client",)),
}

#: top-level import name -> extra, for a ModuleNotFoundError that escapes a command
_MODULE_EXTRA: dict[str, str] = {
    "faust": "worker", "mode": "worker", "aiokafka": "worker", "prometheus_client": "worker",
    "rocksdict": "worker", "matplotlib": "worker", "numpy": "worker", "cramjam": "worker",
    "openlineage": "openlineage",
    "torch": "torch", "safetensors": "torch", "transformers": "hf", "accelerate": "hf",
    "pytorch_lightning": "lightning", "lightning": "lightning", "ray": "ray",
}


def _installed(module: str) -> bool:
    if sys.modules.get(module) is not None:  # imported already (Faust's module object has no __spec__)
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken one
        return False


def missing(modules: tuple[str, ...]) -> list[str]:
    """The modules of ``modules`` that are not installed."""
    return [m for m in modules if not _installed(m)]


def message(command: str, extra: str, absent: list[str], alternative: str | None = None) -> str:
    what = EXTRAS.get(extra, f"the {extra} extra")
    return (f"traintrace {command} needs {what} (not installed: {', '.join(absent)}): "
            f"pip install 'traintrace[{extra}]'" + (f" (or {alternative})" if alternative else ""))


def fail_missing(command: str, extra: str, absent: list[str], alternative: str | None = None) -> NoReturn:
    """``error: traintrace <command> needs …: pip install 'traintrace[<extra>]'`` on stderr, exit 2."""
    print(f"error: {message(command, extra, absent, alternative)}", file=sys.stderr, flush=True)
    sys.exit(2)


def require(command: str, alternative: str | None = None) -> None:
    """Exit 2 with the one line when ``command`` (a key of :data:`COMMAND_NEEDS`) lacks its extra;
    ``alternative``: what else the user may do, added to the line."""
    need = COMMAND_NEEDS.get(command)
    if need is None:
        return
    extra, modules = need
    absent = missing(modules)
    if absent:
        fail_missing(command, extra, absent, alternative)


def extra_of_module(name: str | None) -> str | None:
    """The extra that installs top-level module ``name`` (None when it is no extra's)."""
    if not name:
        return None
    return _MODULE_EXTRA.get(name.split(".", 1)[0])


__all__ = ["COMMAND_NEEDS", "EXTRAS", "extra_of_module", "fail_missing", "message", "missing", "require"]
