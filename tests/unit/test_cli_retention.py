"""``traintrace retention``: SPEC §13 on a log, as a table or JSON."""

from __future__ import annotations

import json

from click.testing import CliRunner

from streams.cli.main import cli

from .vectors import scenarios_dir

PBT = str(scenarios_dir() / "14_pbt_cohort.jsonl")


def run(*args):
    return CliRunner().invoke(cli, ["retention", *args], catch_exceptions=False)


def test_without_a_horizon_every_checkpoint_is_kept():
    r = run(PBT, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["settle_horizon_ms"] is None and out["deletable"] == 0 and out["checkpoints"] > 0
    assert {row["reason"] for rows in out["jobs"].values() for row in rows} == {"not-settled"}


def test_with_a_horizon_it_says_what_may_go_and_why_the_rest_stays():
    out = json.loads(run(PBT, "--settle-horizon", "60", "--json").output)
    rows = [row for rows in out["jobs"].values() for row in rows]
    assert out["deletable"] == sum(r["deletable"] for r in rows) > 0
    assert {r["reason"] for r in rows if r["deletable"]} <= {"tainted", "superseded"}
    latest = {job: max(rows, key=lambda r: r["checkpoint_id"]) for job, rows in out["jobs"].items()}
    assert all(not r["deletable"] for r in rows if r["reason"] == "latest") and latest
    for r in rows:
        if r["reason"] == "superseded":
            assert r["by"] and r["settled"] and not r["tainted"]


def test_one_job_and_only_the_deletable():
    full = json.loads(run(PBT, "--settle-horizon", "60", "--json").output)
    job = next(iter(full["jobs"]))
    out = json.loads(run(PBT, "--settle-horizon", "60", "--job", job, "--deletable", "--json").output)
    assert list(out["jobs"]) == [job] and all(r["deletable"] for r in out["jobs"][job])


def test_an_unknown_job_is_one_line():
    r = CliRunner().invoke(cli, ["retention", PBT, "--job", "nobody"])
    assert r.exit_code == 2 and "no checkpoint of nobody" in r.output and "Traceback" not in r.output


def test_the_table():
    r = run(PBT, "--settle-horizon", "60")
    assert r.exit_code == 0 and "may be deleted" in r.output
