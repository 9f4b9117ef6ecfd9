"""``analyze`` in several forked processes gives what one process gives: the same SPEC §11
output, events counted, lines skipped, and the same first bad line."""

from __future__ import annotations

import json
import random

import pytest

from streams.audit import analyze as analyze_mod
from streams.audit.analyze import analyze_file
from streams.files.jsonl import JsonlError
from streams.testing.cohort import generate_cohorts
from tests.unit.vectors import scenarios_dir, vector_names


@pytest.fixture(autouse=True)
def fork_small_files(monkeypatch):
    monkeypatch.setattr(analyze_mod, "PARALLEL_MIN_BYTES", 0)


def both(path, **kw):
    one = analyze_file(str(path), **kw)
    for n in (2, 3):
        many = analyze_file(str(path), processes=n, **kw)
        assert many.lineage is None  # it did fork
        assert json.dumps(many.result, sort_keys=True) == json.dumps(one.result, sort_keys=True)
        assert many.events == one.events
        assert [str(e) for e in many.skipped] == [str(e) for e in one.skipped]
    return one


@pytest.mark.parametrize("name", vector_names())
def test_every_vector(name):
    both(scenarios_dir() / f"{name}.jsonl")


def test_a_generated_cohort_log_with_divergences_and_exploits(tmp_path):
    path = tmp_path / "cohorts.jsonl"
    with path.open("w") as fh:
        for d in generate_cohorts(jobs=120, cohort_size=6, steps=300, seed=5, divergence_rate=0.2,
                                  exploit_every=30, exploit_prob=0.6, alias_prob=0.05):
            fh.write(json.dumps(d) + "\n")
    got = both(path)
    assert got.result["plans"] and got.result["incidents"]


def _messy(tmp_path, seed: int):
    """A generated log with bad lines of every kind put in: not JSON, not an object, no job,
    an invalid event, an invalid JobStarted, events before their job's JobStarted, a second
    JobStarted naming another cohort, blank lines."""
    lines = [json.dumps(d) for d in generate_cohorts(jobs=40, cohort_size=5, steps=200, seed=seed,
                                                     divergence_rate=0.3, exploit_every=25, exploit_prob=0.5)]
    r = random.Random(seed)
    started = [json.loads(line) for line in lines if '"JobStarted"' in line]
    bad = ['{"type": "Progress", "job_id": "x"', "[1, 2]", '{"type": "Progress"}', "",
           json.dumps(dict(started[0], type="JobStarted", job_id="late", cohort_id=7)),
           json.dumps({"type": "Progress", "job_id": "orphan", "seq": 0, "incarnation": 0, "ts": 1, "step": 1}),
           json.dumps(dict(started[1], seq=99, cohort_id="elsewhere")),
           json.dumps({"type": "Progress", "job_id": started[2]["job_id"], "seq": "one"})]
    for b in bad:
        lines.insert(r.randrange(len(lines)), b)
    path = tmp_path / f"messy{seed}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_skipped_lines_are_the_same_lines(tmp_path, seed):
    got = both(_messy(tmp_path, seed), skip_invalid=True)
    assert len(got.skipped) >= 5


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_first_bad_line_is_the_one_raised(tmp_path, seed):
    path = _messy(tmp_path, seed)
    with pytest.raises(JsonlError) as one:
        analyze_file(str(path))
    for n in (2, 3):
        with pytest.raises(JsonlError) as many:
            analyze_file(str(path), processes=n)
        assert str(many.value) == str(one.value)


def test_a_small_file_or_stdin_is_folded_in_one_process(tmp_path, monkeypatch):
    monkeypatch.setattr(analyze_mod, "PARALLEL_MIN_BYTES", 1 << 30)
    got = analyze_file(str(scenarios_dir() / "01_seed_example.jsonl"), processes=2)
    assert got.lineage is not None


def test_lines_that_name_a_second_job_are_folded_by_their_own_jobs_share(tmp_path):
    """A share skips another share's line without parsing it only when the job it names is
    sure (streams.audit.analyze._known_job). Valid events written to name a decoy job of
    another cohort as well, in every way JSON allows: a nested object, a key that is
    ``job_id`` by an escape, a key ending in ``"job_id``, the real key without a space, a
    duplicate key (the last wins), a job id with an escape; each is still folded, once, by the
    share of its real job (the same answer as one process), and a plan depends on them."""
    events = list(generate_cohorts(jobs=60, cohort_size=6, steps=300, seed=11, divergence_rate=0.3,
                                   exploit_every=30, exploit_prob=0.6))
    decoys = {}
    for d in events:
        if d["type"] == "JobStarted":
            decoys.setdefault(d["cohort_id"], d["job_id"])
    cohort_of = {d["job_id"]: d["cohort_id"] for d in events if d["type"] == "JobStarted"}
    r = random.Random(11)
    forms = 0
    with (tmp_path / "decoys.jsonl").open("w") as fh:
        for d in events:
            line = json.dumps(d)
            if d["type"] != "JobStarted" and r.random() < 0.3:
                decoy = next(j for c, j in decoys.items() if c != cohort_of[d["job_id"]])
                real = json.dumps(d["job_id"])
                rest = {k: v for k, v in d.items() if k != "job_id"}
                body = json.dumps(rest)[1:-1]
                form = forms % 6
                forms += 1
                if form == 0:
                    line = '{"meta": {"job_id": "%s"}, ' % decoy + body + ', "job_id":' + real + "}"
                elif form == 1:
                    line = '{"job_id": "%s", ' % decoy + body + ', "job\\u005fid": ' + real + "}"
                elif form == 2:
                    line = '{"x\\"job_id": "%s", ' % decoy + body + ', "job_id":' + real + "}"
                elif form == 3:
                    line = '{"job_id": "%s", ' % decoy + body + ', "job_id": ' + real + "}"
                elif form == 4:
                    line = "{" + body + ', "job_id": "' + d["job_id"].replace("-", "\\u002d") + '"}'
                else:
                    line = '{"note": "{\\"job_id\\": \\"%s\\"}", ' % decoy + body + ', "job_id": ' + real + "}"
                assert json.loads(line)["job_id"] == d["job_id"], line
            fh.write(line + "\n")
    got = both(tmp_path / "decoys.jsonl")
    assert got.events == len(events) and got.result["plans"]
