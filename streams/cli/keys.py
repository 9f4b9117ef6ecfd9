"""``traintrace keygen``: the processor's Ed25519 signing key for LineageCommitments."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from streams.cli.common import fail


@click.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, metavar="DIR", help="Directory to write the key files into (created if missing).")
@click.option("--force", is_flag=True, help="Replace an existing processor.key (its commitments then need the old "
                                            ".pub to verify: keep it).")
@click.option("--json", "as_json", is_flag=True, help='Print {"key_id", "private_key", "public_key"}.')
def keygen(out_dir: Path, force: bool, as_json: bool) -> None:
    """Generate the processor's Ed25519 key pair for signing LineageCommitments.

    Writes DIR/processor.key (the private key, PEM, mode 0600: give it to the workers with
    --signing-key or TRAINTRACE_SIGNING_KEY) and DIR/processor-<key id>.pub (the public key:
    put it in the auditors' keyring directory, for `traintrace verify-proof --trusted-keys`).
    The key id is the first 16 hex characters of SHA-256 of the raw public key. Refuses to
    replace an existing processor.key unless --force.
    """
    from streams.signing import SigningError, write_keypair

    try:
        pair = write_keypair(out_dir, overwrite=force)
    except SigningError as exc:
        fail(str(exc), 1)
    if as_json:
        click.echo(json.dumps({"key_id": pair.key_id, "private_key": str(pair.private_path),
                               "public_key": str(pair.public_path)}, indent=2))
        return
    console = Console()
    console.print(f"key id [bold]{pair.key_id}[/bold]", highlight=False)
    console.print(f"private key  {escape(str(pair.private_path))}  [dim](mode 0600; the workers' --signing-key)[/dim]",
                  highlight=False)
    console.print(f"public key   {escape(str(pair.public_path))}  [dim](add to the auditors' keyring)[/dim]", highlight=False)
