"""The demo's audit trail: once the pipeline is quiescent, the run's topics are exported to
``work_dir/log.avro`` (:func:`streams.audit.export.export`, every default topic), that archive is
audited with the keyring of ``work_dir/keys`` (:func:`streams.audit.run.audit`; the report's
``as_dict()`` in ``work_dir/audit.json``) and drawn (:mod:`streams.report`:
``work_dir/lineage.html`` with the audit's verdict block, ``work_dir/lineage.png``).

:func:`audit_run` returns the run report's ``audit`` section: the verdict per check, the files,
and the commands that redo it (:func:`redo_commands`).
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import time
from pathlib import Path
from typing import Any, Callable

from streams.kafka.settings import KafkaSettings

log = logging.getLogger("traintrace.demo")

#: ``say(phase, detail)``: what the audit trail is doing
Say = Callable[..., None]


def redo_commands(work: Path) -> list[str]:
    """The commands that redo the demo's audit, its lineage report and the offline analysis."""
    q = shlex.quote
    return [
        f"traintrace audit {q(str(work / 'log.avro'))} --trusted-keys {q(str(work / 'keys'))}",
        f"traintrace report {q(str(work / 'log.avro'))} --out {q(str(work / 'lineage.html'))} "
        f"--audit {q(str(work / 'audit.json'))}",
        f"traintrace analyze {q(str(work / 'events.jsonl'))}",
    ]


def audit_run(kafka: KafkaSettings | str, topics: Any, work: Path, key_id: str | None,
              status: Callable[[str, str], None] | None = None) -> dict[str, Any]:
    """Export the run's topics to ``work/log.avro``, audit the archive with the keyring of
    ``work/keys`` into ``work/audit.json``, draw ``work/lineage.html`` and ``work/lineage.png``.

    Returns the report's ``audit`` section. Never raises for what goes wrong on the way (an
    export, an audit or a drawing that fails): the section says so in ``error`` and the story
    checks fail. ``status(phase, detail)`` is told what is going on."""
    kafka = KafkaSettings.of(kafka)

    def say(phase: str, detail: str = "") -> None:
        if status is not None:
            status(phase, detail)

    paths = {"log": work / "log.avro", "audit": work / "audit.json", "html": work / "lineage.html",
             "png": work / "lineage.png", "keys": work / "keys"}
    out: dict[str, Any] = {
        "passed": False, "verdict": "ERROR", "error": None, "checks": [], "key_id": key_id,
        "signed_commitments": 0, "events": 0,
        "paths": {k: str(v) for k, v in paths.items()},
        "commands": redo_commands(work),
        "log": None, "files": {}, "timing": {},
    }
    stage = "export"
    t = time.monotonic()
    try:
        _export(kafka, topics, paths, out, say)
        out["timing"]["export_s"] = round(time.monotonic() - t, 3)
        stage, t = "audit", time.monotonic()
        log_, audit = _audit(paths, out, say)
        out["timing"]["audit_s"] = round(time.monotonic() - t, 3)
        stage, t = "report", time.monotonic()
        _draw(log_, audit, paths, work, out, say)
        out["timing"]["report_s"] = round(time.monotonic() - t, 3)
    except Exception as exc:  # the run is over: report what went wrong, do not lose the rest
        log.exception("the demo's %s failed", stage)
        out["error"] = f"{stage} failed: {type(exc).__name__}: {exc}"
        out["timing"][f"{stage}_s"] = round(time.monotonic() - t, 3)
        if stage != "report":
            out["passed"], out["verdict"] = False, "ERROR"
    return out


def _export(kafka: KafkaSettings, topics: Any, paths: dict[str, Path], out: dict[str, Any], say: Say) -> None:
    """The run's topics (every default one) into ``log.avro``."""
    from streams.audit.export import DEFAULT_TOPICS, export

    say("exporting the log", "")
    summary = export(kafka, topics, str(paths["log"]), topics=DEFAULT_TOPICS,
                     progress=lambda topic, n: say("exporting the log", f"{topic}: {n} records"))
    exp = summary.as_dict()
    out["log"] = {"records": exp["records"], "total": exp["total"], "bytes": exp["bytes"]}


def _audit(paths: dict[str, Path], out: dict[str, Any], say: Say) -> tuple[Any, dict[str, Any]]:
    """The archive audited with the run's keyring into ``audit.json``; returns the archive and
    the audit's ``as_dict()``."""
    from streams.audit.run import audit as run_audit, finding_line
    from streams.audit.log import load_archive
    from streams.signing import load_trusted_keys

    say("auditing the log", "")
    keyring = load_trusted_keys(paths["keys"])  # with roles: processor/ and operator/ (secure demo)
    log_ = load_archive(str(paths["log"]))
    rep = run_audit(log_, None, keyring,
                    progress=lambda st, done, total: say("auditing the log", f"{st} {done}/{total}"))
    d = rep.as_dict()
    paths["audit"].write_text(json.dumps(d, indent=2, sort_keys=True, default=str) + "\n")
    out.update({
        "passed": bool(d["passed"]), "verdict": d["verdict"], "events": d["events"],
        "signed_commitments": _signed_commitments(log_, keyring), "trusted_keys": sorted(keyring),
        "checks": [{"name": c["name"], "title": c["title"], "verdict": c["verdict"],
                    "checked": c["checked"], "failed": c["failed"], "warned": c["warned"],
                    "failures": [finding_line(f, lambda v: str(v)[:60]) for f in c["failures"][:5]],
                    "notes": list(c["notes"][:5]) + [f"{k}: {v}" for k, v in c.get("counts", {}).items()]}
                   for c in d["checks"]],
    })
    commands = next((c for c in d["checks"] if c["name"] == "commands"), {})
    out["command_signatures"] = {k: v for k, v in commands.get("counts", {}).items() if "signature" in k}
    return log_, d


def _signed_commitments(log_: Any, keyring: dict[str, Any]) -> int:
    """The archive's commitments signed by a key of ``keyring``."""
    from streams.codec import Codec, DecodeError

    codec, signed = Codec(), 0
    for rec in log_.topic("commitments"):
        try:
            _name, v = codec.decode_record(rec.value or b"")
        except DecodeError:
            continue
        if v.get("signature") and v.get("key_id") in keyring:
            signed += 1
    return signed


def _draw(log_: Any, audit: dict[str, Any], paths: dict[str, Path], work: Path, out: dict[str, Any],
          say: Say) -> None:
    """``lineage.html`` (every cohort, with the audit's verdict) and a PNG per cohort (the demo
    has one: ``lineage.png``)."""
    from streams.report import build, render_html, render_png, render_svg

    say("drawing the lineage report", "")
    model = build(log_)
    cohorts = model.order()
    svgs = {c: render_svg(model.cohorts[c], source=model.source, events=model.cohorts[c].events,
                          summary=False) for c in cohorts}
    page = render_html(model, cohorts=cohorts, audit=audit, audit_path=str(paths["audit"]),
                       audit_href="audit.json", svgs=svgs)
    paths["html"].write_text(page, encoding="utf-8")
    pngs: dict[str, str] = {}
    for i, c in enumerate(cohorts):
        path = paths["png"] if i == 0 else work / f"lineage-{re.sub(r'[^A-Za-z0-9._-]+', '_', c)}.png"
        cm = model.cohorts[c]
        path.write_bytes(render_png(cm, source=paths["log"].name, events=cm.events, audit=audit))
        pngs[c] = str(path)
    png = paths["png"].read_bytes() if paths["png"].exists() else b""
    out["files"] = {
        "html_bytes": len(page.encode("utf-8")), "html_has_svg": "<svg" in page,
        "png_bytes": len(png), "png_is_png": png.startswith(b"\x89PNG\r\n\x1a\n"),
        "png_by_cohort": pngs,
        "cohorts": {c: model.cohorts[c].counts() for c in cohorts},
        "dropped_labels": {c: svgs[c][1].dropped_labels for c in cohorts},
    }
