"""``traintrace prove`` and ``traintrace verify-proof``: Merkle proofs over a traintrace log."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from streams.cli.common import (
    err_console,
    fail,
    kafka_options,
    kafka_settings,
    operator_errors,
    topic_prefix_option,
    topics_for,
)


def _split(text: str, what: str, example: str) -> tuple[str, str]:
    left, sep, right = text.rpartition(":")
    if not sep or not left or not right:
        fail(f"bad {what} {text!r}: want {example}", 1)
    return left, right


def _int(text: str, what: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        fail(f"bad {what} {text!r}: want an integer >= 0", 1)
    return n


@click.command()
@click.argument("source", metavar="SOURCE")
@click.option("--head", "head_job", metavar="JOB",
              help="Prove JOB's chain head (job_id, seq, hash) is in its cohort's latest published commitment.")
@click.option("--event", "event_ref", metavar="JOB:SEQ",
              help="Prove the event (JOB, SEQ) is in its cohort's fold log of --size leaves.")
@click.option("--consistency", "sizes", metavar="OLD:NEW",
              help="Prove the fold log of --cohort at OLD leaves is a prefix of the one at NEW leaves.")
@click.option("--cohort", default=None, help="The cohort (required with --consistency; otherwise found from the job).")
@click.option("--size", type=click.IntRange(min=0), default=None, metavar="N",
              help="--event: the fold log size to prove against [default: the latest commitment's log_size, "
                   "else the whole log].")
@click.option("--recompute", is_flag=True,
              help="--head: prove against a commitment recomputed from the end of the log, not the latest "
                   "published one.")
@click.option("--bundle", is_flag=True,
              help="--event: an offline bundle: the proof with the commitment's signed C2SP checkpoint (and its "
                   "witness cosignatures) and, under the names standard tlog tools read, the leaf and its "
                   "inclusion proof; checked without Kafka or traintrace (docs/keys-and-proofs.md).")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
              help="Write the proof document to FILE instead of stdout.")
@click.option("--json", "as_json", is_flag=True, help="With --out: print a JSON summary.")
@kafka_options(start_broker=False)
@topic_prefix_option
def prove(source: str, head_job: str | None, event_ref: str | None, sizes: str | None, cohort: str | None,
          size: int | None, recompute: bool, bundle: bool, out: Path | None, as_json: bool, bootstrap: str | None,
          kafka_config: str | None, topic_prefix: str | None) -> None:
    """Write a self-contained Merkle proof about SOURCE: an archive (`traintrace export`), a
    JSON Lines file of events, or `kafka` (the live topics).

    The log is folded per cohort in the processor's fold order; every accepted event is a leaf
    of the cohort's fold log. Each root in the proof is tied to the LineageCommitment that
    carries it: the published one when the log has it (signed if the processor signs), else one
    recomputed from the log. Check the document with `traintrace verify-proof FILE`.
    Exits 1 when the proof cannot be made (unknown job, event, cohort or size).
    """
    _check_mode(head_job, event_ref, sizes, cohort, size, recompute)
    if bundle and event_ref is None:
        fail("--bundle goes with --event", 1)
    log = _load(source, bootstrap, kafka_config, topic_prefix)
    from streams.audit.proofs import ProofError, make_bundle, prove_consistency, prove_event, prove_head, replay

    try:
        with err_console.status("folding the log", spinner="dots") if err_console.is_terminal else nullcontext():
            src = replay(log)
        if head_job is not None:
            doc = prove_head(src, head_job, cohort, recompute=recompute)
        elif event_ref is not None:
            job, seq = _split(event_ref, "--event", "JOB:SEQ, e.g. A:12")
            doc = prove_event(src, job, _int(seq, "seq"), size, cohort)
            if bundle:
                doc = make_bundle(doc)
        else:
            old, new = _split(sizes, "--consistency", "OLD:NEW, e.g. 10:25")
            doc = prove_consistency(src, cohort, _int(old, "old size"), _int(new, "new size"))
    except ProofError as exc:
        fail(str(exc), 1)
    if src.undecodable_commitments:
        err_console.print(f"[yellow]warning:[/yellow] {src.undecodable_commitments} commitment record(s) could not be "
                          "decoded and were ignored", highlight=False)
    _print_proof(doc, out, as_json)


def _check_mode(head_job: str | None, event_ref: str | None, sizes: str | None, cohort: str | None,
                size: int | None, recompute: bool) -> None:
    """Exactly one kind of proof, with only the options that go with it (else exit 1)."""
    modes = [m for m in (head_job, event_ref, sizes) if m is not None]
    if len(modes) != 1:
        fail("choose exactly one of --head JOB, --event JOB:SEQ, --consistency OLD:NEW", 1)
    if sizes is not None and cohort is None:
        fail("--consistency needs --cohort", 1)
    if size is not None and event_ref is None:
        fail("--size goes with --event", 1)
    if recompute and head_job is None:
        fail("--recompute goes with --head", 1)


def _load(source: str, bootstrap: str | None, kafka_config: str | None, topic_prefix: str | None):
    """The log of SOURCE; one line and exit 2 when it cannot be read."""
    from streams.audit.log import AuditLogError, load
    from streams.files.archive import ArchiveError

    with operator_errors():
        try:
            if source == "kafka":
                return load(source, None, kafka_settings(bootstrap, kafka_config), topics_for(topic_prefix))
            return load(source)
        except (AuditLogError, ArchiveError) as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"cannot read {source}: {exc.strerror or exc}")


def _print_proof(doc: dict, out: Path | None, as_json: bool) -> None:
    """The proof document on stdout, or written to ``out`` with a summary line (or JSON)."""
    text = json.dumps(doc, indent=2, sort_keys=True)
    if out is None:
        click.echo(text)
        return
    try:
        out.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    anchored = doc.get("commitment_source") or ", ".join(f"{k} {v}" for k, v in doc["commitment_sources"].items())
    if as_json:
        click.echo(json.dumps({"out": str(out), "type": doc["type"], "cohort": doc["cohort"],
                               "commitment": anchored}, indent=2))
        return
    Console().print(f"wrote {doc['type']} proof for cohort [bold]{escape(doc['cohort'])}[/bold] to "
                    f"{escape(str(out))} [dim](commitment: {anchored})[/dim]", highlight=False)


@click.command("verify-proof")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--trusted-keys", "trusted_keys", multiple=True, metavar="DIR|FILE",
              type=click.Path(exists=True, path_type=Path),
              help="Keyring: a directory of public keys (*.pub, *.pem) or a key file; repeatable. Then every "
                   "commitment in the proof must be signed by one of them.")
@click.option("--witness", "witness_keys", multiple=True, metavar="VKEY",
              help="A witness's cosignature verifier key (name+id+base64, C2SP tlog-cosignature); repeatable.")
@click.option("--witnesses-required", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="A bundle's checkpoint must carry valid cosignatures of N of the --witness keys.")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"valid", "reason", "type", "cohort", "commitments": [...]}.')
def verify_proof(file: str, trusted_keys: tuple[Path, ...], witness_keys: tuple[str, ...], witnesses_required: int,
                 as_json: bool) -> None:
    """Check a proof document of `traintrace prove` on its own: the Merkle path, that the
    commitment it names carries the proven root and size (and is self-consistent), and with
    --trusted-keys the commitment's Ed25519 signature. A bundle (`prove --bundle`): also that its
    C2SP checkpoint note says the proven fold log (signed by the commitment's key, with
    --trusted-keys), and with --witnesses-required N that N of the --witness keys cosigned it.

    Prints "VALID …" and exits 0, or "INVALID: why" and exits 1 (2 when FILE or the keyring
    cannot be read).
    """
    from streams.audit.proofs import verify_proof as check
    from streams.signing import SigningError, load_keyring

    trusted = None
    if trusted_keys:
        try:
            trusted = load_keyring(trusted_keys)
        except SigningError as exc:
            fail(str(exc))
    from streams.signing.notes import COSIGNATURE_V1, NoteError, NoteKey

    witnesses = []
    for vkey in witness_keys:
        try:
            w = NoteKey.parse(vkey)
        except NoteError as exc:
            fail(f"--witness: {exc}")
        if w.kind != COSIGNATURE_V1:
            fail(f"--witness {w.name}: not a cosignature/v1 key (type 0x04)")
        witnesses.append(w)
    if witnesses_required > len(witnesses):
        fail(f"--witnesses-required {witnesses_required}: only {len(witnesses)} --witness key(s) given")
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}")
    except UnicodeDecodeError:
        text = ""
    from streams.audit.proofs import ProofVerdict

    try:
        verdict = check(json.loads(text), trusted, witnesses, witnesses_required)
    except ValueError as exc:
        verdict = ProofVerdict(False, f"INVALID: {file} is not JSON ({exc})")
    if as_json:
        click.echo(json.dumps(verdict.as_dict(), indent=2, sort_keys=True))
    else:
        style = "green" if verdict.ok else "red"
        sep = " " if verdict.ok else ":"
        head, _, rest = verdict.reason.partition(sep)
        Console(soft_wrap=True).print(f"[{style}]{head}[/{style}]{sep}{escape(rest)}", highlight=False)
    sys.exit(0 if verdict.ok else 1)
