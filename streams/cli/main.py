"""Entry point of the ``traintrace`` command.

Each sub-command lives in its own module and is registered lazily, so ``traintrace --help``
stays fast and a missing optional dependency only breaks the command that needs it.
"""

from __future__ import annotations

import importlib

import click

from streams import __version__

# command name -> (module, attribute)
_COMMANDS: dict[str, tuple[str, str]] = {
    "acl": ("streams.cli.acl", "acl"),
    "analyze": ("streams.cli.analyze", "analyze"),
    "audit": ("streams.cli.audit", "audit"),
    "broker": ("streams.cli.broker", "broker"),
    "demo": ("streams.cli.demo", "demo"),
    "export": ("streams.cli.export", "export"),
    "keygen": ("streams.cli.keys", "keygen"),
    "openlineage": ("streams.cli.openlineage", "openlineage"),
    "prove": ("streams.cli.proofs", "prove"),
    "report": ("streams.cli.report", "report"),
    "verify-proof": ("streams.cli.proofs", "verify_proof"),
    "plans": ("streams.cli.plans", "plans"),
    "publish": ("streams.cli.publish", "publish"),
    "release": ("streams.cli.release", "release"),
    "smoke": ("streams.cli.smoke", "smoke"),
    "ui": ("streams.cli.ui", "ui"),
    "worker": ("streams.cli.worker", "worker"),
    "watch": ("streams.cli.watch", "watch"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = _COMMANDS.get(name)
        if target is None:
            return None
        module = importlib.import_module(target[0])
        return getattr(module, target[1])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traintrace")
def cli() -> None:
    """traintrace: the record and the referee for fine-tuning jobs that share state.

    Configuration comes from flags and from the environment: KAFKA_BOOTSTRAP_SERVERS and
    TRAINTRACE_* variables (each flag's help names its variable).
    """


def main() -> None:
    cli(prog_name="traintrace")


if __name__ == "__main__":
    main()
