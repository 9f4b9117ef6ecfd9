"""The ``witnesses`` check (issue 28): the cohorts' C2SP checkpoints against the log the audit
read, against each other, and against a quorum of witnesses.

It runs when the audit is given witness keys, a quorum or saved checkpoints
(:class:`WitnessPolicy`), and needs the trusted keys: a checkpoint counts only once the
processor's key opens it. It gathers every checkpoint note — those the commitments carry, and
those kept elsewhere (``witness-client --out``, another auditor's copy, a bundle's note) — and:

* **split view**: two checkpoints of one origin and size with different roots, both signed by
  the processor, are named as such (the processor signed two histories);
* **this log**: every checkpoint must be a prefix of the fold log this audit recomputed (its root
  at that size); one that is not is a split view too, and one longer than the log says the log
  read is behind or forked (a warning only for a log cut with ``--until``);
* **quorum** (``required`` N): every cohort with a fold log needs a checkpoint consistent with
  the log that N of the given witnesses validly cosigned; the failure names the witnesses
  missing. Entries after the newest witnessed checkpoint are a warning (not yet witnessed).

A cosignature by a given witness that does not verify fails the checkpoint (named).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from streams.audit.items import where
from streams.audit.report import Check, Finding
from streams.core import merkle
from streams.errors import TraintraceError
from streams.signing.notes import COSIGNATURE_V1, Checkpoint, NoteError, NoteKey, open_checkpoint, parse_note


class WitnessPolicyError(TraintraceError):
    """Witness keys or a quorum that cannot be used (named)."""


@dataclass(frozen=True)
class WitnessPolicy:
    """What the ``witnesses`` check asks: the witnesses' cosignature keys, how many of them must
    have cosigned, and checkpoint notes kept outside the log (``(where, note text)``)."""

    witnesses: tuple[NoteKey, ...] = ()
    required: int = 0
    saved: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for w in self.witnesses:
            if w.kind != COSIGNATURE_V1:
                raise WitnessPolicyError(f"witness {w.name}: not a cosignature/v1 key (type 0x04)")
        if self.required < 0 or self.required > len(self.witnesses):
            raise WitnessPolicyError(f"a quorum of {self.required}: {len(self.witnesses)} witness key(s) given")

    @property
    def active(self) -> bool:
        return bool(self.witnesses or self.required or self.saved)

    @classmethod
    def parse(cls, specs: Iterable[str], required: int = 0,
              saved: Iterable[tuple[str, str]] = ()) -> "WitnessPolicy":
        """Witness keys as verifier-key strings; ``VKEY@URL`` (the form ``witness-client`` takes)
        is read as its key."""
        keys = []
        for spec in specs:
            vkey = spec.split("@", 1)[0] if "@" in spec else spec
            try:
                keys.append(NoteKey.parse(vkey))
            except NoteError as exc:
                raise WitnessPolicyError(str(exc)) from None
        return cls(tuple(keys), required, tuple(saved))


@dataclass(frozen=True)
class Seen:
    """One checkpoint opened by a trusted processor key."""

    where: str
    cohort: str
    checkpoint: Checkpoint
    key_id: str
    cosigners: tuple[str, ...]


def check_witnesses(log: Any, policy: WitnessPolicy, trusted: Mapping[str, Any] | None, source: Any = None,
                    codec: Any = None, config: Any = None, cut: bool = False) -> Check:
    """The ``witnesses`` check of ``log`` (an :class:`~streams.audit.log.AuditLog`). ``source``
    is its replayed fold logs (:func:`streams.audit.proofs.replay`; replayed here when None)."""
    chk = Check("witnesses")
    if trusted is None:
        chk.skipped = True
        chk.notes.append("needs --trusted-keys: a checkpoint counts only once the processor's key opens it")
        return chk
    if codec is None:  # one codec for the replay and the commitments: the archive's own schemas too
        from streams.audit.log import codec_for

        codec = codec_for(log)
    if source is None:
        from streams.audit.proofs import replay

        source = replay(log, config, codec)
    seen = _in_log(log, policy, trusted, chk, codec)
    origins = {s.checkpoint.origin: s.cohort for s in seen}
    for at, note in policy.saved:
        chk.checked += 1
        try:
            cp, opened, kid = open_with_keyring(note, trusted, policy.witnesses)
        except NoteError as exc:
            chk.fail(Finding(f"saved checkpoint not opened: {exc}", where=at))
            continue
        cohort = origins.get(cp.origin) or _cohort_by_origin(cp.origin, source.cohorts)
        if cohort is None:
            chk.fail(Finding(f"the checkpoint of {cp.origin!r} is of no cohort of this log "
                             f"(cohorts: {', '.join(sorted(source.cohorts)) or 'none'})", where=at))
            continue
        seen.append(Seen(at, cohort, cp, kid, tuple(k.name for k in opened.cosigners())))
    _split_views(seen, chk)
    roots = _roots_at(seen, source)
    consistent = [s for s in seen if _against_log(s, source, roots, chk, cut)]
    _add(chk, "consistent with this log", len(consistent))
    _add(chk, "cosignatures", sum(len(s.cosigners) for s in consistent))
    if policy.required:
        _quorum(consistent, source, policy, chk)
    chk.notes.append(f"{len(seen)} checkpoint(s) opened by a trusted processor key, {len(consistent)} a prefix of "
                     f"this log" + (f"; quorum {policy.required} of {len(policy.witnesses)} witness(es): "
                                    f"{', '.join(w.name for w in policy.witnesses)}" if policy.required else
                                    "; no quorum asked (--witnesses-required)"))
    return chk


def open_with_keyring(note: str, trusted: Mapping[str, Any], witnesses: Iterable[NoteKey] = ()
                      ) -> tuple[Checkpoint, Any, str]:
    """A checkpoint note opened by whichever trusted processor key signed it (under the name its
    signature line carries): (checkpoint, opened note, key id). :class:`NoteError` when none."""
    from streams.signing.keys import COMMITMENT, TrustedKeys
    from streams.signing.message import public_key_of

    parsed = parse_note(note)
    for sig in parsed.signatures:
        for kid, key in trusted.items():
            if isinstance(trusted, TrustedKeys) and not trusted.allows(kid, COMMITMENT):
                continue
            public = public_key_of(key)
            if public is None:
                continue
            log_key = NoteKey.of(sig.name, public)
            if log_key.key_hash != sig.key_hash:
                continue
            cp, opened = open_checkpoint(parsed, log_key, witnesses)
            return cp, opened, kid
    names = ", ".join(sorted({f"{s.name}+{s.key_hash:08x}" for s in parsed.signatures}))
    raise NoteError(f"not signed by a trusted processor key (signed by: {names})")


def _in_log(log: Any, policy: WitnessPolicy, trusted: Mapping[str, Any], chk: Check, codec: Any) -> list[Seen]:
    from streams.codec import DecodeError
    from streams.signing.commitments import open_commitment_checkpoint
    from streams.signing.message import public_key_of

    seen: list[Seen] = []
    for rec in log.topic("commitments"):
        if rec.value is None:
            continue
        try:
            name, value = codec.decode_record(rec.value)
        except DecodeError:
            continue  # the commitments check names it
        if name != "LineageCommitment" or not value.get("checkpoint"):
            continue
        chk.checked += 1
        cohort, kid = str(value["cohort_id"]), value.get("key_id")
        key = public_key_of(trusted.get(kid)) if isinstance(kid, str) else None
        if key is None:
            chk.fail(Finding(f"checkpoint of cohort {cohort!r}: its key {kid} is not in the trusted keyring",
                             where=where(rec)))
            continue
        try:
            cp, opened = open_commitment_checkpoint(value, key, policy.witnesses)
        except (NoteError, ValueError) as exc:
            chk.fail(Finding(f"checkpoint of cohort {cohort!r} not opened: {exc}", where=where(rec)))
            continue
        seen.append(Seen(where(rec), cohort, cp, str(kid), tuple(k.name for k in opened.cosigners())))
    return seen


def _add(chk: Check, key: str, n: int = 1) -> None:
    chk.counts[key] = chk.counts.get(key, 0) + n


def _cohort_by_origin(origin: str, cohorts: Iterable[str]) -> str | None:
    """The cohort whose log ``origin`` names (``<prefix>/<cohort>``; the longest such cohort)."""
    fits = [c for c in cohorts if origin.endswith("/" + c)]
    return max(fits, key=len) if fits else None


def _split_views(seen: list[Seen], chk: Check) -> None:
    """Two checkpoints of one origin and size with different roots: the processor signed two
    histories."""
    roots: dict[tuple[str, int], dict[bytes, list[Seen]]] = {}
    for s in seen:
        roots.setdefault((s.checkpoint.origin, s.checkpoint.size), {}).setdefault(s.checkpoint.root, []).append(s)
    for (origin, size), by_root in sorted(roots.items()):
        if len(by_root) < 2:
            continue
        (a, *_), (b, *_) = list(by_root.values())[:2]
        chk.fail(Finding(f"split view of {origin}: {len(by_root)} checkpoints of size {size} with different roots, "
                         f"each signed by processor key {a.key_id if a.key_id == b.key_id else a.key_id + '/' + b.key_id}"
                         f" (one at {a.where}, another at {b.where})", field="root",
                         expected=a.checkpoint.root.hex(), found=b.checkpoint.root.hex()))


def _roots_at(seen: list[Seen], source: Any) -> dict[tuple[str, int], bytes]:
    """The recomputed fold log's root of each cohort at each size a checkpoint names, in one
    pass over each cohort's leaves (a compact range: O(leaves + sizes x log leaves), not a
    whole tree per checkpoint)."""
    sizes: dict[str, set[int]] = {}
    for s in seen:
        sizes.setdefault(s.cohort, set()).add(s.checkpoint.size)
    out: dict[tuple[str, int], bytes] = {}
    for cohort, wanted in sizes.items():
        c = source.cohorts.get(cohort)
        leaves = c.leaves if c is not None else []
        rng = merkle.CompactRange()
        for size in sorted(n for n in wanted if n <= len(leaves)):
            while rng.size < size:
                rng.append(leaves[rng.size])
            out[(cohort, size)] = rng.root()
    return out


def _against_log(s: Seen, source: Any, roots: dict[tuple[str, int], bytes], chk: Check, cut: bool) -> bool:
    """Whether the checkpoint is a prefix of the fold log this audit recomputed."""
    c = source.cohorts.get(s.cohort)
    n = c.size if c is not None else 0
    cp = s.checkpoint
    if cp.size > n:
        f = Finding(f"{cp.origin}: a checkpoint of size {cp.size}, but this log has {n} entries of cohort "
                    f"{s.cohort!r}: the processor signed a longer history (a split view), or the log read is "
                    "behind", where=s.where)
        if cut:
            f.what += " (the log was cut with --until)"
            chk.warn(f)
        else:
            chk.fail(f)
        return False
    mine = roots[(s.cohort, cp.size)]
    if mine != cp.root:
        chk.fail(Finding(f"split view of {cp.origin}: the checkpoint of size {cp.size} is not this log's history "
                         "(signed by the processor, with another root)", where=s.where, field="root",
                         expected=mine.hex(), found=cp.root.hex()))
        return False
    return True


def _quorum(consistent: list[Seen], source: Any, policy: WitnessPolicy, chk: Check) -> None:
    need = policy.required
    for cohort in sorted(source.cohorts):
        size = source.cohorts[cohort].size
        if size == 0:
            continue
        mine = [s for s in consistent if s.cohort == cohort]
        ok = [s for s in mine if len(s.cosigners) >= need]
        if not ok:
            if not mine:
                chk.fail(Finding(f"cohort {cohort!r}: no checkpoint of its fold log ({size} entries) to be witnessed "
                                 "(a worker without --signing-key or --log-origin?)"))
                continue
            best = max(mine, key=lambda s: (len(s.cosigners), s.checkpoint.size))
            missing = [w.name for w in policy.witnesses if w.name not in best.cosigners]
            chk.fail(Finding(f"cohort {cohort!r}: no checkpoint has the {need} witness cosignature(s) required; "
                             f"the best (size {best.checkpoint.size}, at {best.where}) has {len(best.cosigners)}"
                             + (f" ({', '.join(best.cosigners)})" if best.cosigners else "")
                             + f"; missing: {', '.join(missing)}"))
            continue
        top = max(s.checkpoint.size for s in ok)
        _add(chk, "cohorts witnessed")
        if top < size:
            chk.warn(Finding(f"cohort {cohort!r}: entries {top}..{size - 1} come after the newest witnessed "
                             f"checkpoint (size {top}): not yet witnessed"))

