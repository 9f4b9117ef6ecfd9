"""Have every cohort's newest checkpoint cosigned by its witnesses (``traintrace
witness-client``): what the witnesses last cosigned is kept in a small state (witness URL ->
origin -> size), each submission carries the consistency proof from that size, and a witness
that refuses or cannot be reached is one outcome, never the end of the round."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from streams.core import merkle
from streams.signing.notes import Checkpoint, NoteError, parse_note
from streams.witness.client import Witness, WitnessError, WitnessRefused, cosign


@dataclass
class WitnessState:
    """What each witness cosigned last, by origin: ``{url: {origin: size}}``."""

    sizes: dict[str, dict[str, int]] = field(default_factory=dict)

    def known(self, url: str, origin: str) -> int:
        return self.sizes.get(url, {}).get(origin, 0)

    def set(self, url: str, origin: str, size: int) -> None:
        self.sizes.setdefault(url, {})[origin] = size

    @classmethod
    def load(cls, path: Path) -> "WitnessState":
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls({str(u): {str(o): int(n) for o, n in d.items()} for u, d in data["sizes"].items()})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise WitnessError(f"{path}: not a witness state file ({exc})") from None

    def save(self, path: Path) -> None:
        from streams.files.atomic import atomic_write

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, (json.dumps({"sizes": self.sizes}, indent=2, sort_keys=True) + "\n").encode("utf-8"))


@dataclass(frozen=True)
class Outcome:
    cohort: str
    origin: str
    size: int
    witness: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"cohort": self.cohort, "origin": self.origin, "size": self.size, "witness": self.witness,
                "ok": self.ok, "detail": self.detail}


def cosign_latest(commitments: Mapping[str, Sequence[Mapping[str, Any]]], leaves_of: Callable[[str], Sequence[bytes]],
                  witnesses: Sequence[Witness], state: WitnessState,
                  timeout: float = 10.0) -> tuple[dict[str, dict[str, Any]], list[Outcome]]:
    """Each cohort's newest commitment with a checkpoint, submitted to every witness; returns
    the commitments whose note gained cosignatures (cohort -> the record with the cosigned
    ``checkpoint``) and one outcome per (cohort, witness). ``state`` is updated."""
    cosigned: dict[str, dict[str, Any]] = {}
    outcomes: list[Outcome] = []
    for cohort in sorted(commitments):
        com = next((c for c in reversed(commitments[cohort]) if c.get("checkpoint")), None)
        if com is None:
            continue
        note = str(com["checkpoint"])
        try:
            cp = Checkpoint.parse(parse_note(note).text)
        except NoteError as exc:
            outcomes.append(Outcome(cohort, "?", -1, "-", False, f"its checkpoint is malformed: {exc}"))
            continue
        leaves = leaves_of(cohort)
        if cp.size > len(leaves) or merkle.root(leaves[:cp.size]) != cp.root:
            outcomes.append(Outcome(cohort, cp.origin, cp.size, "-", False,
                                    "the checkpoint is not this log's fold log: not submitted"))
            continue
        gained = False
        for w in witnesses:
            known = state.known(w.url, cp.origin)
            if known == cp.size and w.key.name in {s.name for s in parse_note(note).signatures}:
                outcomes.append(Outcome(cohort, cp.origin, cp.size, w.url, True, "cosigned already"))
                continue
            if known > cp.size:
                outcomes.append(Outcome(cohort, cp.origin, cp.size, w.url, False,
                                        f"the witness cosigned size {known} of this log already"))
                continue
            try:
                out, size = cosign(w, note, known, lambda old, new: merkle.consistency_proof(leaves[:new], old),
                                   timeout)
            except WitnessRefused as exc:
                outcomes.append(Outcome(cohort, cp.origin, cp.size, w.url, False, f"refused: HTTP {exc.status} "
                                        f"{exc.body.strip()[:120]}"))
                continue
            except WitnessError as exc:
                outcomes.append(Outcome(cohort, cp.origin, cp.size, w.url, False, str(exc)))
                continue
            note, gained = str(out), True
            state.set(w.url, cp.origin, size)
            outcomes.append(Outcome(cohort, cp.origin, cp.size, w.url, True, f"cosigned (from size {known})"))
        if gained:
            cosigned[cohort] = {**com, "checkpoint": note}
    return cosigned, outcomes
