"""Settings declared once: a :class:`Setting` names a flag, its environment variable, type,
bounds, default and help; the command line's options (``streams.cli.common.click_options``) and
the reading of an environment (:func:`read_env`) are both made from the same declarations, so
``traintrace worker --grace-seconds`` and ``TRAINTRACE_GRACE_SECONDS`` cannot drift apart.

Nothing here reads ``os.environ``: an entry point passes its environment in.

:data:`CORE_SETTINGS` are the fold's tunables (SPEC §5) and the seal policy, taken by every
command that folds events; :func:`core_config` makes the core's ``Config`` of their values. The
worker's own table is ``streams.worker.settings.WORKER_SETTINGS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from streams.core.state import Config

#: the spellings a boolean variable may take
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Setting:
    """One setting: ``--flag`` on the command line, ``env`` in the environment.

    ``kind`` is ``int``, ``float``, ``str``, ``Path``, ``bool`` (a flag; with ``negative``, a
    ``--flag/--negative`` pair) or a tuple of the allowed strings. ``minimum``/``maximum`` bound
    a number (``min_open``: the minimum itself is refused). ``path`` holds what the command line
    checks of a path (``exists``, ``dir_okay``, ``file_okay``); the environment's reading does
    not look at the file system."""

    flag: str
    env: str
    kind: Any
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    min_open: bool = False
    negative: str | None = None
    metavar: str | None = None
    path: tuple[tuple[str, bool], ...] = ()
    #: shown in --help instead of the default (when the default is computed, or None)
    default_text: str | None = None

    @property
    def name(self) -> str:
        """The parameter's Python name: ``--grace-seconds`` -> ``grace_seconds``."""
        return self.flag.lstrip("-").replace("-", "_")

    def parse(self, raw: str) -> Any:
        """The value of ``raw`` (an environment variable's text); ValueError naming the
        variable when it is not one."""
        try:
            return self._parse(raw)
        except ValueError as exc:
            raise ValueError(f"{self.env}={raw!r}: {exc}") from None

    def _parse(self, raw: str) -> Any:
        kind = self.kind
        if kind is bool:
            low = raw.strip().lower()
            if low in TRUE:
                return True
            if low in FALSE:
                return False
            raise ValueError(f"must be one of {', '.join(TRUE + FALSE)}")
        if isinstance(kind, tuple):
            if raw not in kind:
                raise ValueError(f"must be one of {', '.join(kind)}")
            return raw
        value = kind(raw)
        if self.minimum is not None and (value < self.minimum or (self.min_open and value == self.minimum)):
            raise ValueError(f"must be {'>' if self.min_open else '>='} {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"must be <= {self.maximum:g}")
        return value


def read_env(settings: Sequence[Setting], env: Mapping[str, str]) -> dict[str, Any]:
    """Each setting's value by :attr:`Setting.name`: parsed from ``env`` where its variable is
    set (and not empty), its default otherwise. ValueError names the first bad variable."""
    out: dict[str, Any] = {}
    for s in settings:
        raw = env.get(s.env)
        out[s.name] = s.default if raw is None or raw == "" else s.parse(raw)
    return out


JOB_KEYS = Setting("--job-keys", "TRAINTRACE_JOB_KEYS", Path, None,
                   "Issued job keys: a public key file (PEM) or a directory of them (a keyring's trainer/ "
                   "subdirectory when it has one). A job may then declare only one of these; its events are "
                   "dead-lettered otherwise.", path=(("exists", True),))
CORE_SETTINGS: tuple[Setting, ...] = (
    Setting("--window", "TRAINTRACE_WINDOW", int, 10, "Finite losses in the detector's rolling median.",
            minimum=1),
    Setting("--spike-factor", "TRAINTRACE_SPIKE_FACTOR", float, 3.0,
            "A loss above factor x the rolling median is a divergence.", minimum=0, min_open=True),
    Setting("--taint-margin", "TRAINTRACE_TAINT_MARGIN", int, 0,
            "T1 taints checkpoints with step >= onset - margin.", minimum=0),
    Setting("--require-sealed-events", "TRAINTRACE_REQUIRE_SEALED_EVENTS", bool, False,
            "Refuse (dead-letter) every job that declares no key in its JobStarted: only sealed jobs are "
            "recorded."),
    JOB_KEYS,
)


def core_config(values: Mapping[str, Any]) -> "Config":
    """The core's ``Config`` of the values of :data:`CORE_SETTINGS` (by name); ValueError
    naming ``--job-keys`` when its keys do not load."""
    from streams.core.seals import SealPolicy
    from streams.core.state import Config
    from streams.signing import SigningError, issued_job_keys

    job_keys = values.get("job_keys")
    try:
        issued = issued_job_keys(job_keys) if job_keys is not None else frozenset()
    except SigningError as exc:
        raise ValueError(f"--job-keys {job_keys}: {exc}") from None
    return Config(window=values["window"], spike_factor=values["spike_factor"], taint_margin=values["taint_margin"],
                  seals=SealPolicy(require_sealed=bool(values.get("require_sealed_events")), issued_keys=issued))


__all__ = ["CORE_SETTINGS", "JOB_KEYS", "Setting", "core_config", "read_env"]
