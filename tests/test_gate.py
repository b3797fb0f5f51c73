"""``ddpprof gate``: regressions fail (exit 1), identical runs pass, bad input is exit 2."""

from __future__ import annotations

import copy
import csv
import io
import json

import pytest
from trace_builders import span, step, write_trace

from ddpprof.core.errors import UsageError
from ddpprof.gate.rules import aggregate, evaluate, parse_rule, runs_of


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


def test_identical_results_pass(files, ddpprof_cli, tmp_path):
    baseline = files("base.json", BASELINE)
    result = ddpprof_cli("gate", str(baseline), "--baseline", str(baseline),
                         "--json", str(tmp_path / "gate.json"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "all 3 checks passed"
    document = json.loads((tmp_path / "gate.json").read_text())
    assert (document["schema"], document["version"]) == ("ddpprof.gate", 2)
    assert (document["checks"], document["failed"]) == (3, 0)
    assert document["rules"] == ["overlap_pct >= baseline - 2"]
    # threshold = baseline - 2; single has no communication on either side: n/a, not a failure
    assert [(v["run"], v["baseline"], v["current"], v["threshold"], v["verdict"])
            for v in document["verdicts"]] == [
        ("bucket_ddp_async", 40.0, 40.0, 38.0, "pass"), ("pytorch_ddp", 55.0, 55.0, 53.0, "pass"),
        ("single", None, None, None, "n/a")]


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
                         "--baseline", str(files("base.json", BASELINE)), "--tolerance", "0.5",
                         "--csv", "-")
    # 52.9 + 0.5 >= 53: within the slack; the CSV keeps the values unrounded
    assert result.returncode == 0, result.stdout
    assert "overlap_pct >= baseline - 2,pytorch_ddp,55.0,52.9,53.0,pass" in result.stdout


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
                         "--rule", "overlap_pct >= baseline", "--rule", "compute_pct >= 60",
                         "--json", str(tmp_path / "gate.json"))
    # step 0 [0,100) analyzed (the last dropped): compute [10,60) = 50 %; the all-reduce
    # [40,90) has [40,60) beside compute: overlap 20/50 = 40 %, equal to itself; compute 50 of
    # 100 breaks the absolute rule
    assert result.returncode == 1
    verdicts = json.loads((tmp_path / "gate.json").read_text())["verdicts"]
    assert [(v["rule"], v["baseline"], v["current"], v["threshold"], v["verdict"])
            for v in verdicts] == [
        ("overlap_pct >= baseline", 40.0, 40.0, 40.0, "pass"),
        ("compute_pct >= 60", 50.0, 50.0, 60.0, "FAIL")]
    assert result.stdout.splitlines()[-1] == "1 of 2 checks failed"


# --- a gate that cannot be fooled -----------------------------------------------------------

def test_duplicate_run_names_are_refused_naming_both(files, ddpprof_cli):
    doubled = document(run("ok", 40.0, folder="a/ok"), run("ok", 10.0, folder="b/ok"))
    result = ddpprof_cli("gate", str(files("now.json", doubled)),
                         "--baseline", str(files("base.json", doubled)))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "two runs are named 'ok': runs[0] (a/ok) and runs[1] (b/ok)" in result.stderr


def test_a_gate_with_nothing_to_compare_is_bad_input(files, ddpprof_cli):
    empty = files("empty.json", document())
    result = ddpprof_cli("gate", str(empty), "--baseline", str(empty))
    assert result.returncode == 2 and "no run to compare" in result.stderr
    assert "passed" not in result.stdout


@pytest.mark.parametrize("number", ["1" * 400, "-" + "9" * 400])
def test_a_huge_integer_is_refused_in_one_line(number, files, ddpprof_cli, tmp_path):
    path = tmp_path / "base.json"
    text = json.dumps(BASELINE).replace('"overlap_pct": 55.0', f'"overlap_pct": {number}')
    path.write_text(text)
    result = ddpprof_cli("gate", str(files("now.json", BASELINE)), "--baseline", str(path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "run 'pytorch_ddp': overlap_pct (an integer of 400 digits)" in result.stderr


def test_a_large_integer_within_bounds_is_used_and_one_beyond_any_measurement_refused(
        files, ddpprof_cli):
    big = copy.deepcopy(BASELINE)
    big["runs"][0]["overlap_pct"] = 10**17 + 1
    result = ddpprof_cli("gate", str(files("now.json", big)),
                         "--baseline", str(files("base.json", big)), "--json", "-")
    assert result.returncode == 0, result.stderr
    verdicts = json.loads(result.stdout)["verdicts"]
    # reported as written on both sides; compared as floats: the threshold 10**17 + 1 - 2 is
    # the float 1e17, which 10**17 + 1 meets
    first = verdicts[0]
    assert (first["run"], first["baseline"], first["current"], first["verdict"]) == (
        "bucket_ddp_async", 10**17 + 1, 10**17 + 1, "pass")
    assert first["threshold"] == pytest.approx(1e17)
    # 10**300 is a float (1e300), but no metric's value: the noise would square it
    big["runs"][0]["overlap_pct"] = 10**300
    result = ddpprof_cli("gate", str(files("now.json", big)),
                         "--baseline", str(files("base.json", big)))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "overlap_pct (an integer of 301 digits) is beyond any measurement" in result.stderr


def test_markdown_and_csv_escape_what_a_run_name_holds(files, ddpprof_cli, tmp_path):
    names = ["evil<!-- hidden", "two\nlines|pipe", "=HYPERLINK(\"x\")", "+1", "-2", "@a",
             "\tt"]
    doc = document(*(run(name, 40.0, variant=f"v{i}") for i, name in enumerate(names)))
    path = files("d.json", doc)
    result = ddpprof_cli("gate", str(path), "--baseline", str(path),
                         "--markdown", str(tmp_path / "g.md"), "--csv", str(tmp_path / "g.csv"))
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "g.md").read_text()
    assert "<!--" not in markdown and "evil&lt;!-- hidden" in markdown
    assert "| two lines\\|pipe |" in markdown
    # every verdict is one table row: the name cannot end the row or the table
    assert sum(line.startswith("| overlap_pct") for line in markdown.splitlines()) == len(names)
    rows = list(csv.reader(io.StringIO((tmp_path / "g.csv").read_text())))[1:]
    assert [r[1] for r in rows] == ["evil<!-- hidden", "two\nlines|pipe",
                                    "'=HYPERLINK(\"x\")", "'+1", "'-2", "'@a", "'\tt"]
    # the terminal sees no control character either
    assert "two\\nlines|pipe" in result.stdout and "\t" not in result.stdout


def test_a_rule_on_the_findings_counts_them_by_severity():
    """``findings.high`` (or ``findings_high``) counts a run's findings of high severity in
    the document's ``findings``; overlap alone is a weak gate (higher overlap can come with a
    longer step), the findings are not."""
    def findings(*severities: str) -> list[dict]:
        return [{"run": "pytorch_ddp", "code": "c", "severity": s} for s in severities]

    before = runs_of({**document(run("pytorch_ddp")), "findings": findings("low")}, "base")
    now = runs_of({**document(run("pytorch_ddp", 60.0)), "findings": findings("high", "low",
                                                                             "medium")}, "now")
    rule = parse_rule("findings.high == 0")
    assert rule.metric == "findings_high" and rule.text == "findings.high == 0"
    [verdict] = evaluate([rule], now, before)
    assert (verdict.baseline, verdict.current, verdict.verdict) == (0, 1, "FAIL")
    [verdict] = evaluate([parse_rule("findings_medium <= baseline + 1")], now, before)
    assert verdict.verdict == "pass"
    [verdict] = evaluate([parse_rule("findings <= 3")], now, before)
    assert (verdict.current, verdict.verdict) == (3, "pass")
    with pytest.raises(UsageError, match=r"a dotted metric is findings\.high"):
        parse_rule("findings.severe == 0")
    # a document without findings has no such metric: an error, not zero
    with pytest.raises(UsageError, match="no metric 'findings_high' in the baseline"):
        evaluate([rule], now, runs_of(document(run("pytorch_ddp")), "old"))
