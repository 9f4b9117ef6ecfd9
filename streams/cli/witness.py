"""``traintrace witness-client``: have each cohort's newest checkpoint cosigned by witnesses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from streams.cli.common import (err_console, fail, kafka_options, kafka_settings, operator_errors, topic_prefix_option,
                                topics_for)


@click.command("witness-client")
@click.argument("source", metavar="SOURCE")
@click.option("--witness", "witness_specs", multiple=True, required=True, metavar="VKEY@URL",
              help="A witness: its cosignature verifier key and its tlog-witness URL, e.g. "
                   "'witness.example/w1+e75f6532+BAOh…@http://witness:7380'; repeatable.")
@click.option("--state", "state_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path(".traintrace/witness-state.json"), show_default=True, envvar="TRAINTRACE_WITNESS_STATE",
              show_envvar=True, help="What each witness cosigned last (kept between runs).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Write each cohort's cosigned checkpoint note to DIR/<cohort>.note.")
@click.option("--publish", is_flag=True,
              help="SOURCE kafka: publish each commitment whose checkpoint gained cosignatures again on "
                   "lineage.commitments, the note cosigned (its signature does not cover the note's "
                   "cosignature lines, so it still verifies); prove --bundle then carries them.")
@click.option("--timeout", type=click.FloatRange(0.1), default=10.0, show_default=True,
              help="Seconds a witness may take to answer.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcomes as JSON.")
@kafka_options(start_broker=False)
@topic_prefix_option
def witness_client(source: str, witness_specs: tuple[str, ...], state_path: Path, out_dir: Path | None,
                   publish: bool, timeout: float, as_json: bool, bootstrap: str | None, kafka_config: str | None,
                   topic_prefix: str | None) -> None:
    """Submit the newest checkpoint of every cohort in SOURCE (an archive, or `kafka`) to each
    --witness over C2SP tlog-witness, with the consistency proof from the size that witness
    cosigned last, and keep the cosignatures. A witness that refuses (a split view, an unknown
    log) or cannot be reached is reported and the others go on; exits 1 when any refused or
    failed."""
    from streams.cli.proofs import _load
    from streams.audit.proofs import replay
    from streams.signing.notes import NoteError
    from streams.witness import Witness, WitnessError, WitnessState, cosign_latest

    try:
        witnesses = [Witness.parse(w) for w in witness_specs]
        state = WitnessState.load(state_path)
    except (WitnessError, NoteError) as exc:
        fail(str(exc))
    if publish and source != "kafka":
        fail("--publish goes with SOURCE kafka")
    log = _load(source, bootstrap, kafka_config, topic_prefix)
    with err_console.status("folding the log", spinner="dots"):
        src = replay(log)
    cosigned, outcomes = cosign_latest(src.commitments, lambda c: src.cohort(c).leaves, witnesses, state, timeout)
    state.save(state_path)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for cohort, com in cosigned.items():
            (out_dir / f"{cohort}.note").write_text(com["checkpoint"], encoding="utf-8")
    published = 0
    if publish and cosigned:
        with operator_errors():
            published = _publish(list(cosigned.values()), kafka_settings(bootstrap, kafka_config),
                                 topics_for(topic_prefix))
    if as_json:
        click.echo(json.dumps({"outcomes": [o.as_dict() for o in outcomes], "cosigned": sorted(cosigned),
                               "published": published, "state": str(state_path)}, indent=2))
    else:
        con = Console(soft_wrap=True)
        for o in outcomes:
            mark = "[green]ok[/green]" if o.ok else "[red]FAILED[/red]"
            con.print(f"{mark} {escape(o.cohort)} size {o.size} → {escape(o.witness)}: {escape(o.detail)}",
                      highlight=False)
        if not outcomes:
            con.print("no commitment with a checkpoint note in SOURCE (a worker without --signing-key?)")
        if published:
            con.print(f"published {published} cosigned commitment(s)")
    sys.exit(0 if all(o.ok for o in outcomes) else 1)


def _publish(records: list[dict], kafka, topics) -> int:
    from streams.codec import Codec
    from streams.operator_commands.publish import _not_delivered, _producer

    codec = Codec()
    producer, watch = _producer(kafka, 30.0)
    errors: list = []
    try:
        for rec in records:
            value = codec.encode_record("LineageCommitment", {k: v for k, v in rec.items() if k != "type"})
            producer.produce(topics.commitments, key=str(rec["cohort_id"]).encode("utf-8"), value=value,
                             headers=codec.headers.record("LineageCommitment"),
                             on_delivery=lambda err, _m: errors.append(err) if err is not None else None)
        remaining = producer.flush(35.0)
    except Exception as exc:  # a fatal producer error
        raise _not_delivered(kafka, watch, exc, topics.commitments, "the cosigned commitments") from exc
    if errors or remaining or watch.failure is not None:
        fail(f"the cosigned commitments were not all delivered to {topics.commitments}: "
             f"{errors[0] if errors else watch.failure or 'timed out'}")
    return len(records)
