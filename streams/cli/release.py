"""``traintrace release``: an operator releases a halted job."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from streams.cli.common import fail, kafka_options, kafka_settings, operator_errors, topic_prefix_option, topics_for


@click.command()
@click.argument("job")
@click.option("--operator", default=None, metavar="NAME",
              help="Who releases, recorded in the command's detail. [default: $USER]")
@click.option("--cohort", "cohort_id", default=None, metavar="COHORT",
              help="The job's cohort_id, recorded in the command.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the HaltCommand produced and the halt it lifts as JSON.")
@click.option("--signing-key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              envvar="TRAINTRACE_OPERATOR_KEY", metavar="KEY",
              help="The operator's Ed25519 private key (PEM): sign the release, as job clients with a "
                   "trusted keyring require (its public key in their keyring's operator/). "
                   "[env TRAINTRACE_OPERATOR_KEY; default: unsigned, which only an unauthenticated "
                   "(demo) job obeys]")
@kafka_options(start_broker=False)
@topic_prefix_option
def release(job: str, operator: str | None, cohort_id: str | None, as_json: bool, signing_key: Path | None,
            bootstrap: str | None, kafka_config: str | None, topic_prefix: str | None) -> None:
    """Release the halted job JOB.

    Produces a HaltCommand with reason RELEASE to the control topic, keyed by JOB (command_id
    = SHA-256 over "RELEASE", JOB and the issue time, SPEC §10 encoding); the job then counts as
    released in `traintrace plans` until a later halt. The halt in force is looked up first and
    reported; a job that is not halted is released anyway (a no-op for the pipeline). Exit 2
    when the broker or the topic is missing.
    """
    kafka = kafka_settings(bootstrap, kafka_config)
    topics = topics_for(topic_prefix)
    from streams.codec import Codec
    from streams.operator_commands.plans import read_control
    from streams.operator_commands.release import release_job

    codec = Codec()
    signer = _signer(signing_key)
    with operator_errors():
        before = read_control(kafka, topics, codec).halts.get(job)
        record = release_job(kafka, topics, job, operator=operator, cohort_id=cohort_id,
                             codec=codec, signer=signer)
    if isinstance(record.get("signature"), bytes):
        record = {**record, "signature": record["signature"].hex()}
    if as_json:
        click.echo(json.dumps({"released": record, "was_halted": before is not None,
                               "previous_halt": before}, indent=2, sort_keys=True))
        return
    console = Console()
    if signer is None:
        console.print("[yellow]unsigned release[/yellow]: a job client with trusted keys will reject it "
                      "(--signing-key)", highlight=False)
    if before is None:
        console.print(f"[yellow]{job} was not halted[/yellow]; release recorded anyway "
                      f"(command {record['command_id'][:12]} on {topics.control})", highlight=False)
    else:
        console.print(f"[green]released[/green] [bold]{job}[/bold] (was halted "
                      f"{before['reason']}: {before['detail']}); command "
                      f"{record['command_id'][:12]} on {topics.control}", highlight=False)


def _signer(signing_key: Path | None):
    """The operator's control signer; an unreadable key exits 2 with one line."""
    if signing_key is None:
        return None
    from streams.signing import ControlSigner, SigningError

    try:
        return ControlSigner.from_file(signing_key)
    except SigningError as exc:
        fail(f"--signing-key {signing_key}: {exc}", command="release")
