"""The versioned Avro schemas of ``schemas/``, parsed once.

Layout: ``schemas/v<N>/<RecordName>.avsc``, one self-contained top-level record per file (each named
type defined once in its file), namespace ``traintrace`` in every version (the version lives in the
directory name, not in the Avro names, so that schema resolution matches records across versions).

Every version directory is loaded. For each record name the *reader* is the schema of the highest
version that has it; every schema of every version is a known *writer*, looked up by its
CRC-64-AVRO fingerprint of the Parsing Canonical Form (what Avro single-object encoding carries,
little-endian, after ``C3 01``). Data written with any version is therefore read with the current
reader (BACKWARD_TRANSITIVE evolution: a new version may only add fields with defaults, remove
fields, or widen types as Avro resolution allows).

Where they are read from (:func:`default_schemas_dir`): ``$TRAINTRACE_SCHEMAS_DIR`` when set; else
the copy installed with the package (the top-level ``schemas/`` of the repository stays the source
of truth; the build maps it into the wheel and the sdist as the package data ``streams/_schemas/``,
read through :mod:`importlib.resources`); else, in a source tree that carries no such copy (an
editable install, ``PYTHONPATH``), that top-level ``schemas/`` itself.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Iterable, Mapping

from fastavro import parse_schema
from fastavro.schema import fingerprint as _fingerprint
from fastavro.schema import to_parsing_canonical_form

NAMESPACE = "traintrace"
SCHEMAS_DIR_ENV = "TRAINTRACE_SCHEMAS_DIR"
#: the package the build maps ``schemas/`` to (package data ``v*/*.avsc``; see ``setup.py``)
SCHEMAS_PACKAGE = "streams._schemas"

#: The record written on ``lineage.events``.
EVENT_RECORD = "LineageEvent"
#: The records the agent and the processor write, each its own top-level schema (SPEC §3).
AGENT_RECORDS: tuple[str, ...] = (
    "RollbackCommand",
    "QuarantineNotice",
    "HaltCommand",
    "Alert",
    "DivergenceManifest",
    "LineageCommitment",
    "DeadLetter",
    # added in v2
    "PlanCleared",
    "CheckpointStatus",
    "EventBatch",
    # added in v7
    "CohortSnapshot",
    "SnapshotRound",
    # added in v9
    "RetentionNotice",
)

_VERSION_DIR = re.compile(r"^v(\d+)$")


def _has_versions(root: Traversable) -> bool:
    try:
        return root.is_dir() and any(_VERSION_DIR.match(p.name) and p.is_dir() for p in root.iterdir())
    except OSError:  # pragma: no cover - an unreadable directory
        return False


def packaged_schemas() -> Traversable | None:
    """The schemas installed with the package (``streams/_schemas/`` of a wheel or an sdist
    build), or None when this copy of the package carries none (a source tree)."""
    try:
        root = resources.files(SCHEMAS_PACKAGE)
    except ModuleNotFoundError:
        return None
    return root if _has_versions(root) else None


def default_schemas_dir() -> Traversable:
    """``$TRAINTRACE_SCHEMAS_DIR``; else the schemas installed with the package; else the
    top-level ``schemas/`` of the source tree this package runs from. Raises FileNotFoundError
    (one line, what to do) when there is none of them."""
    env = os.environ.get(SCHEMAS_DIR_ENV)
    if env:
        return Path(env)
    packaged = packaged_schemas()
    if packaged is not None:
        return packaged
    tree = Path(__file__).resolve().parents[2] / "schemas"  # <tree>/streams/codec/schemas.py
    if _has_versions(tree):
        return tree
    raise FileNotFoundError(
        f"the Avro schemas are not installed with traintrace (no {SCHEMAS_PACKAGE.replace('.', '/')}/v<N>/ "
        f"next to {Path(__file__).resolve().parents[1]}) and this is not a source tree (no {tree}): "
        f"reinstall traintrace from a wheel or an sdist, or set ${SCHEMAS_DIR_ENV}")


def schema_fingerprint(parsed_or_raw: Any) -> bytes:
    """The 8-byte CRC-64-AVRO fingerprint of a schema's Parsing Canonical Form, in the byte order
    Avro single-object encoding writes (little-endian)."""
    canonical = to_parsing_canonical_form(parsed_or_raw)
    return bytes.fromhex(_fingerprint(canonical, "CRC-64-AVRO"))


def _fullname(raw: Mapping[str, Any]) -> str:
    name = raw["name"]
    if "." in name:
        return name
    ns = raw.get("namespace")
    return f"{ns}.{name}" if ns else name


@dataclass(frozen=True, eq=False)
class SchemaInfo:
    """One parsed schema of one version."""

    name: str  #: short record name, e.g. ``"LineageEvent"``
    fullname: str  #: e.g. ``"traintrace.LineageEvent"``
    version: int  #: the ``v<N>`` directory; 0 for a writer schema added by hand
    raw: Mapping[str, Any] = field(repr=False)  #: the JSON as written
    parsed: Any = field(repr=False)  #: fastavro's parsed schema
    canonical: str = field(repr=False)  #: Parsing Canonical Form
    fingerprint: bytes = field(repr=False)  #: 8 bytes, single-object order
    schema_str: str = field(repr=False)  #: compact JSON, what is registered with a Schema Registry
    path: Path | Traversable | None = None

    @classmethod
    def build(cls, raw: Mapping[str, Any] | str, version: int = 0, path: Path | Traversable | None = None) -> "SchemaInfo":
        if isinstance(raw, str):
            raw = json.loads(raw)
        if not isinstance(raw, Mapping) or raw.get("type") != "record" or "name" not in raw:
            raise ValueError(f"{path or 'schema'}: a top-level schema must be a named record")
        parsed = parse_schema(dict(raw), named_schemas={})
        canonical = to_parsing_canonical_form(parsed)
        fullname = _fullname(raw)
        return cls(
            name=fullname.rsplit(".", 1)[-1],
            fullname=fullname,
            version=version,
            raw=raw,
            parsed=parsed,
            canonical=canonical,
            fingerprint=bytes.fromhex(_fingerprint(canonical, "CRC-64-AVRO")),
            schema_str=json.dumps(raw, separators=(",", ":"), sort_keys=True),
            path=path,
        )


class SchemaSet:
    """Every known schema: the readers (current version per record name) and the writers (by
    fingerprint). Immutable; build it once and share it."""

    def __init__(self, infos: Iterable[SchemaInfo]) -> None:
        infos = list(infos)
        if not infos:
            raise ValueError("no schema found")
        self._infos: tuple[SchemaInfo, ...] = tuple(infos)
        readers: dict[str, SchemaInfo] = {}
        by_fp: dict[bytes, SchemaInfo] = {}
        by_fullname: dict[str, str] = {}
        for info in sorted(infos, key=lambda i: i.version):
            other = by_fullname.setdefault(info.fullname, info.name)
            if other != info.name:  # pragma: no cover - impossible by construction
                raise ValueError(f"{info.fullname} has two short names")
            cur = readers.get(info.name)
            if cur is None or info.version >= cur.version:
                readers[info.name] = info
            prev = by_fp.get(info.fingerprint)
            if prev is not None and prev.name != info.name:
                raise ValueError(
                    f"{info.name} and {prev.name} have the same fingerprint {info.fingerprint.hex()}"
                )
            # A schema unchanged across versions: keep the newest copy (same canonical form).
            by_fp[info.fingerprint] = info
        self.readers: Mapping[str, SchemaInfo] = readers
        self.by_fingerprint: Mapping[bytes, SchemaInfo] = by_fp
        self.versions: tuple[int, ...] = tuple(sorted({i.version for i in infos if i.version > 0}))

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_directory(cls, root: str | os.PathLike[str] | Traversable | None = None) -> "SchemaSet":
        """Every ``v<N>/*.avsc`` under ``root`` (a directory, or an :mod:`importlib.resources`
        traversable; default :func:`default_schemas_dir`)."""
        if root is None:
            root = default_schemas_dir()
        elif isinstance(root, (str, os.PathLike)):
            root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"schema directory {root} does not exist")
        infos: list[SchemaInfo] = []
        for vdir in sorted(root.iterdir(), key=lambda p: p.name):
            m = _VERSION_DIR.match(vdir.name)
            if not m or not vdir.is_dir():
                continue
            version = int(m.group(1))
            names: set[str] = set()
            avsc = (p for p in vdir.iterdir() if p.name.endswith(".avsc") and p.is_file())
            for path in sorted(avsc, key=lambda p: p.name):
                try:
                    raw = json.loads(path.read_text(encoding="utf-8"))
                    info = SchemaInfo.build(raw, version=version, path=path)
                except Exception as exc:
                    raise ValueError(f"cannot load schema {path}: {exc}") from exc
                if info.name != path.name.removesuffix(".avsc"):
                    raise ValueError(f"{path}: file name does not match record name {info.name}")
                if info.name in names:  # pragma: no cover - file names are unique
                    raise ValueError(f"{path}: {info.name} defined twice in v{version}")
                names.add(info.name)
                infos.append(info)
        if not infos:
            raise ValueError(f"no schemas/v<N>/*.avsc under {root}")
        return cls(infos)

    def with_writers(self, *schemas: Mapping[str, Any] | str | SchemaInfo) -> "SchemaSet":
        """A copy that also knows these writer schemas (e.g. a schema of an older producer that
        is not in ``schemas/``). They never become readers unless their version is higher."""
        extra = [s if isinstance(s, SchemaInfo) else SchemaInfo.build(s, version=0) for s in schemas]
        return SchemaSet([*self._infos, *extra])

    # -- queries ------------------------------------------------------------------------------

    @property
    def current_version(self) -> int:
        return self.versions[-1] if self.versions else 0

    def reader(self, name: str) -> SchemaInfo:
        try:
            return self.readers[name]
        except KeyError:
            raise KeyError(f"no schema for record {name!r}; known: {sorted(self.readers)}") from None

    def writer(self, fp: bytes) -> SchemaInfo | None:
        return self.by_fingerprint.get(fp)

    def version(self, version: int) -> dict[str, SchemaInfo]:
        """The schemas of one ``v<N>`` directory, by record name."""
        return {i.name: i for i in self._infos if i.version == version}

    def __iter__(self):
        return iter(self._infos)

    def __repr__(self) -> str:
        return f"SchemaSet(versions={list(self.versions)}, records={sorted(self.readers)})"


_LOADED: dict[str, SchemaSet] = {}


def default_schema_set() -> SchemaSet:
    """The schemas of :func:`default_schemas_dir` (``$TRAINTRACE_SCHEMAS_DIR``, the installed
    copy, or the source tree's ``schemas/``), parsed once per process."""
    root = default_schemas_dir()
    key = str(root.resolve()) if isinstance(root, Path) else str(root)
    found = _LOADED.get(key)
    if found is None:
        found = _LOADED.setdefault(key, SchemaSet.from_directory(root))
    return found


__all__ = [
    "AGENT_RECORDS",
    "EVENT_RECORD",
    "NAMESPACE",
    "SCHEMAS_DIR_ENV",
    "SCHEMAS_PACKAGE",
    "SchemaInfo",
    "SchemaSet",
    "default_schema_set",
    "default_schemas_dir",
    "packaged_schemas",
    "schema_fingerprint",
]
