"""Entry point of the ``traintrace`` command.

Each sub-command lives in its own module and is registered lazily, so ``traintrace --help``
stays fast and a missing optional dependency only breaks the command that needs it: a command
of an extra that is not installed (``streams.cli.extras``: ``worker``, ``report``, ``ui``,
``demo``, ``openlineage``) exits 2 with one line naming the extra to install, before it starts;
``--help`` still works.
"""

from __future__ import annotations

import copy
import functools
import importlib
import sys

import click

from streams import __version__
from streams.cli import extras

# command name -> (module, attribute)
_COMMANDS: dict[str, tuple[str, str]] = {
    "acl": ("streams.cli.acl", "acl"),
    "alerts": ("streams.cli.alerts", "alerts"),
    "analyze": ("streams.cli.analyze", "analyze"),
    "audit": ("streams.cli.audit", "audit"),
    "broker": ("streams.cli.broker", "broker"),
    "demo": ("streams.cli.demo", "demo"),
    "export": ("streams.cli.export", "export"),
    "keygen": ("streams.cli.keys", "keygen"),
    "openlineage": ("streams.cli.openlineage", "openlineage"),
    "prove": ("streams.cli.proofs", "prove"),
    "report": ("streams.cli.report", "report"),
    "retention": ("streams.cli.retention", "retention"),
    "verify-proof": ("streams.cli.proofs", "verify_proof"),
    "plans": ("streams.cli.plans", "plans"),
    "publish": ("streams.cli.publish", "publish"),
    "release": ("streams.cli.release", "release"),
    "smoke": ("streams.cli.smoke", "smoke"),
    "ui": ("streams.cli.ui", "ui"),
    "worker": ("streams.cli.worker", "worker"),
    "watch": ("streams.cli.watch", "watch"),
    "witness-client": ("streams.cli.witness", "witness_client"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = _COMMANDS.get(name)
        if target is None:
            return None
        module = importlib.import_module(target[0])
        command = getattr(module, target[1])
        if name in extras.COMMAND_NEEDS and command.callback is not None:
            command = _checked(command, name)
        return command


def _checked(command: click.Command, name: str) -> click.Command:
    """A copy of ``command`` whose callback first checks its extra (``--help`` never runs it)."""
    callback = command.callback

    @functools.wraps(callback)
    def run(*args, **kwargs):
        extras.require(name)
        return callback(*args, **kwargs)

    checked = copy.copy(command)
    checked.callback = run
    return checked


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traintrace")
def cli() -> None:
    """traintrace: the record and the referee for fine-tuning jobs that share state.

    Configuration comes from flags and from the environment: KAFKA_BOOTSTRAP_SERVERS and
    TRAINTRACE_* variables (each flag's help names its variable).
    """


def main() -> None:
    try:
        cli(prog_name="traintrace")
    except ModuleNotFoundError as exc:
        # a lazy import of an extra's package deep in a command: the same one line, no traceback
        extra = extras.extra_of_module(exc.name)
        if extra is None:
            raise
        command = next((a for a in sys.argv[1:] if not a.startswith("-")), "") or "this command"
        extras.fail_missing(command, extra, [exc.name or "?"])


if __name__ == "__main__":
    main()
