"""``ddpprof gate``: regressions fail (exit 1), identical runs pass, bad input is exit 2."""

from __future__ import annotations

import copy
import json

import pytest
from trace_builders import span, step, write_trace

from ddpprof.errors import UsageError
from ddpprof.gate import aggregate, evaluate, parse_rule, runs_of


def document(*runs: dict) -> dict:
    return {"schema": "ddpprof.analyze", "version": 2, "runs": list(runs), "errors": []}


def run(name: str, overlap: float | None = 40.0, compute: float = 70.0,
        variant: str | None = None, **fields) -> dict:
    return {"run": name, "variant": variant or name, "status": "complete",
            "model": "mlp-small", "world_size": 2, "global_batch": 256, "grad_accum": 1,
            "bucket_cap_mb": 25.0, "overlap_pct": overlap, "compute_pct": compute, **fields}


def runs(*rows: dict):
    return runs_of(document(*rows), "test")


@pytest.fixture
def files(tmp_path):
    def write(name: str, doc: dict):
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        return path
    return write


BASELINE = document(run("bucket_ddp_async", 40.0), run("pytorch_ddp", 55.0), run("single", None))


def test_identical_results_pass(files, ddpprof_cli):
    baseline = files("base.json", BASELINE)
    result = ddpprof_cli("gate", str(baseline), "--baseline", str(baseline))
    assert result.returncode == 0, result.stderr
    assert "all 3 checks passed" in result.stdout
    assert "n/a" in result.stdout  # single: no communication on either side, not a failure


def test_lowered_overlap_fails_and_writes_markdown(files, ddpprof_cli, tmp_path):
    lowered = copy.deepcopy(BASELINE)
    lowered["runs"][1]["overlap_pct"] = 52.9  # 55 - 2.1: past the default 2-point allowance
    result = ddpprof_cli("gate", str(files("now.json", lowered)),
                         "--baseline", str(files("base.json", BASELINE)),
                         "--markdown", str(tmp_path / "gate.md"))
    assert result.returncode == 1
    fail_lines = [line for line in result.stdout.splitlines() if "FAIL" in line]
    assert len(fail_lines) == 1 and "pytorch_ddp" in fail_lines[0]
    assert "1 of 3 checks failed" in result.stdout
    markdown = (tmp_path / "gate.md").read_text()
    assert "| overlap_pct >= baseline - 2 | pytorch_ddp | 55.00 | 52.90 | 53.00 | FAIL |" \
        in markdown


def test_tolerance_absorbs_noise(files, ddpprof_cli):
    lowered = copy.deepcopy(BASELINE)
    lowered["runs"][1]["overlap_pct"] = 52.9
    result = ddpprof_cli("gate", str(files("now.json", lowered)),
                         "--baseline", str(files("base.json", BASELINE)), "--tolerance", "0.5")
    assert result.returncode == 0, result.stdout


def test_absolute_and_relative_rules():
    rules = [parse_rule("compute_pct >= 60"), parse_rule("overlap_pct > baseline * 0.9"),
             parse_rule("compute_pct == baseline")]
    verdicts = evaluate(rules, runs(run("a", 37.0, 59.0)), runs(run("a", 40.0, 59.0)))
    assert [(v.threshold, v.verdict) for v in verdicts] == [
        (60.0, "FAIL"), (pytest.approx(36.0), "pass"), (59.0, "pass")]


def test_runs_match_by_variant_when_names_differ():
    [verdict] = evaluate([parse_rule("overlap_pct >= baseline")],
                         runs(run("2026-11-22-ci", 41.0, variant="bucket_ddp_async")),
                         runs(run("bucket_ddp_async", 40.0)))
    assert verdict.verdict == "pass" and verdict.baseline == 40.0


def test_median_of_repeats():
    repeats = runs(run("r1", 10.0, variant="v"), run("r2", 50.0, variant="v"),
                   run("r3", 30.0, variant="v"))
    [merged] = aggregate(repeats)
    assert merged.name == "v" and merged.row["overlap_pct"] == 30.0
    assert merged.repeats == 3 and merged.repeats_used("overlap_pct") == "3/3"


@pytest.mark.parametrize("text", ["overlap_pct >>= 3", "overlap_pct >= baseline -", "", "60 <= x",
                                  "overlap_pct >= baseline / 2", "overlap_pct >= base"])
def test_malformed_rules(text):
    with pytest.raises(UsageError, match="malformed rule"):
        parse_rule(text)


@pytest.mark.parametrize(("case", "message"), [
    ("missing run", "run 'pytorch_ddp' is not in the baseline"),
    ("missing baseline run", "baseline run 'single' is missing"),
    ("missing metric", "no metric 'overlap_pct' in the current results"),
    ("malformed rule", "malformed rule 'overlap_pct =< 3'"),
    ("baseline not JSON", "base.json: not JSON"),
    ("baseline not an analysis", "base.json: not a `ddpprof analyze --json` file"),
    ("baseline from the future", "analyze schema version 99"),
])
def test_bad_input_is_exit_2(case, message, files, ddpprof_cli, tmp_path):
    baseline, current, extra = BASELINE, copy.deepcopy(BASELINE), []
    if case == "missing run":
        baseline = document(*BASELINE["runs"][::2])
    elif case == "missing baseline run":
        current["runs"] = current["runs"][:2]
    elif case == "missing metric":
        del current["runs"][0]["overlap_pct"]
    elif case == "malformed rule":
        extra = ["--rule", "overlap_pct =< 3"]
    base_path = files("base.json", baseline)
    if case == "baseline not JSON":
        base_path.write_text("{not json")
    elif case == "baseline not an analysis":
        base_path.write_text(json.dumps({"runs": []}))
    elif case == "baseline from the future":
        base_path.write_text(json.dumps({**baseline, "version": 99}))
    result = ddpprof_cli("gate", str(files("now.json", current)), "--baseline", str(base_path),
                         *extra)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_current_can_be_a_trace_folder(tmp_path, ddpprof_cli):
    events = [step(0, 0, 100), step(1, 100, 200), span("aten::mm", 10, 60),
              span("gloo:all_reduce", 40, 90, cat="user_annotation", tid=2)]
    write_trace(tmp_path / "traces" / "myrun" / "rank0.json", events, world_size=1)
    baseline = tmp_path / "base.json"
    made = ddpprof_cli("analyze", str(tmp_path / "traces"), "--json", str(baseline))
    assert made.returncode == 0, made.stderr
    result = ddpprof_cli("gate", str(tmp_path / "traces"), "--baseline", str(baseline),
                         "--rule", "overlap_pct >= baseline", "--rule", "compute_pct >= 60")
    # overlap |[40,60)| / 50 = 40 % equals itself; compute 50 of 100 breaks the absolute rule
    assert result.returncode == 1
    assert "40.00" in result.stdout and "FAIL" in result.stdout
