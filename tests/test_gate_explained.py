"""``ddpprof gate``'s rules relative to the baseline in %, metrics of one rank, checks against
the noise (``--significance``), and the explanation of a failure (``ddpprof diff``'s
contributors)."""

from __future__ import annotations

import json
import math

import pytest
from trace_builders import synchronized_steps

from ddpprof.core.errors import UsageError
from ddpprof.gate.rules import aggregate, evaluate, parse_rule, runs_of


def document(*runs: dict) -> dict:
    return {"schema": "ddpprof.analyze", "version": 3, "runs": list(runs), "errors": []}


def run(name: str, overlap: float | None, variant: str = "v", ranks: tuple = ()) -> dict:
    return {"run": name, "variant": variant, "status": "complete", "model": "m",
            "world_size": 2, "global_batch": 8, "grad_accum": 1, "bucket_cap_mb": 25.0,
            "overlap_pct": overlap, "per_rank": [{"rank": r, "overlap_pct": v}
                                                 for r, v in enumerate(ranks)]}


@pytest.mark.parametrize(("text", "arith", "operand"), [
    ("step_ms <= +5%", "*", 1.05), ("overlap_pct >= -10%", "*", 0.9),
    ("overlap_pct >= baseline - 10 %", "*", 0.9), ("step_ms<=baseline+2.5%", "*", 1.025),
    ("step_ms <= baseline + 5", "+", 5.0)])
def test_relative_rules(text, arith, operand):
    rule = parse_rule(text)
    assert (rule.arith, rule.operand) == (arith, pytest.approx(operand))


@pytest.mark.parametrize("text", ["step_ms <= baseline * 5%", "step_ms <= 5%%",
                                  "step_ms[rank] <= 3", "step_ms <= +%"])
def test_malformed_relative_rules(text):
    with pytest.raises(UsageError):
        rule = parse_rule(text)
        evaluate([rule], runs_of(document(run("a", 40.0)), "t"),
                 runs_of(document(run("a", 40.0)), "t"))


def test_a_rank_metric_is_gated():
    now = runs_of(document(run("a", 40.0, ranks=(45.0, 30.0))), "now")
    before = runs_of(document(run("a", 40.0, ranks=(45.0, 35.0))), "base")
    [verdict] = evaluate([parse_rule("overlap_pct[rank=1] >= baseline - 2")], now, before)
    assert (verdict.baseline, verdict.current, verdict.verdict) == (35.0, 30.0, "FAIL")
    with pytest.raises(UsageError, match="no rank 7 in the current results"):
        evaluate([parse_rule("overlap_pct[rank=7] >= 1")], now, before)
    with pytest.raises(UsageError, match="a selector is rank=N, group=NAME or NAME"):
        evaluate([parse_rule("overlap_pct[rank=1, rank=0] >= 1")], now, before)
    with pytest.raises(UsageError, match="no process group 'dp'"):
        evaluate([parse_rule("overlap_pct[group=dp] >= 1")], now, before)


def test_broken_within_the_noise_of_repeats_is_not_a_failure():
    # medians 40 and 37 against 40 - 2: broken by 1. Each side: s² = 4 over 3 repeats, pooled
    # 4 with 4 degrees of freedom; the medians' difference: π/2 · 4 · (1/3 + 1/3);
    # t(0.95, 4) = 2.1318: a margin of 2.1318 · √(4π/3) = 4.363
    now = aggregate(runs_of(document(*(run(f"n{k}", v) for k, v in enumerate((37, 39, 35)))),
                            "now"))
    before = aggregate(runs_of(document(*(run(f"b{k}", v) for k, v in
                                          enumerate((40, 42, 38)))), "base"))
    rule = parse_rule("overlap_pct >= baseline - 2")
    [plain] = evaluate([rule], now, before)
    [noisy] = evaluate([rule], now, before, significance=0.95)
    assert plain.verdict == "FAIL"
    assert noisy.verdict == "within noise"
    assert noisy.noise == "repeats (3 now, 3 in the baseline)"
    assert noisy.margin == pytest.approx(2.1318 * math.sqrt(4 * math.pi / 3), rel=1e-4)
    # far beyond the noise it fails all the same
    far = aggregate(runs_of(document(*(run(f"n{k}", v) for k, v in enumerate((27, 29, 25)))),
                            "now"))
    assert evaluate([rule], far, before, significance=0.95)[0].verdict == "FAIL"


def test_without_repeats_the_check_says_it_has_no_noise():
    [verdict] = evaluate([parse_rule("overlap_pct >= baseline - 2")],
                         runs_of(document(run("a", 30.0)), "now"),
                         runs_of(document(run("a", 40.0)), "base"), significance=0.95)
    assert (verdict.verdict, verdict.margin, verdict.noise) == ("FAIL", None,
                                                                 "none (no repeats)")


def test_one_side_with_repeats_gives_the_noise_to_both():
    # the baseline's three repeats (s² = 4, 2 degrees of freedom) against one current run:
    # π/2 · 4 · (1/3 + 1/1); t(0.95, 2) = 2.9200
    now = aggregate(runs_of(document(run("n", 37.0)), "now"))
    before = aggregate(runs_of(document(*(run(f"b{k}", v) for k, v in
                                          enumerate((40, 42, 38)))), "base"))
    [verdict] = evaluate([parse_rule("overlap_pct >= baseline - 2")], now, before,
                         significance=0.95)
    assert verdict.margin == pytest.approx(2.9200 * math.sqrt(math.pi / 2 * 4 * 4 / 3),
                                           rel=1e-4)


@pytest.fixture
def analyzed(tmp_path, ddpprof_cli):
    """Two analyze documents: GEMMs of 40 µs, then of 4000 µs (the step 89 → 4049 µs: far
    beyond the run-to-run noise of one recording a side)."""
    paths = {}
    for side, mm in (("base", 40), ("now", 4000)):
        synchronized_steps(tmp_path / side / "job", [mm, mm], [0, 0])
        paths[side] = tmp_path / f"{side}.json"
        result = ddpprof_cli("analyze", str(tmp_path / side / "job"), "--json",
                             str(paths[side]))
        assert result.returncode == 0, result.stderr
    return paths


def test_a_failure_explains_itself(analyzed, ddpprof_cli, tmp_path):
    result = ddpprof_cli("gate", str(analyzed["now"]), "--baseline", str(analyzed["base"]),
                         "--rule", "step_ms <= +5%", "--significance", "0.95",
                         "--json", str(tmp_path / "gate.json"))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    why = lines.index("Why job failed: step_ms 0.09 → 4.05 (rule step_ms <= +5%)")
    # the largest contributor, with the op that moved (beyond the noise or not: one recording
    # a side leaves a wide interval to each part)
    assert lines[why + 1].startswith("1. compute: gemm +3.96 ms per step")
    assert lines[why + 1].endswith(": aten::mm +3.96 ms")
    document = json.loads((tmp_path / "gate.json").read_text())
    [explanation] = document["explanations"]
    assert explanation["contributors"][0].startswith("compute: gemm +3.96 ms per step")
    [verdict] = document["verdicts"]
    # traces without run.json: not recorded like the CPU prior; their steps repeat exactly
    assert verdict["noise"] == "steps only, no run-to-run noise (one recording a side)"


def test_a_pass_explains_nothing(analyzed, ddpprof_cli):
    result = ddpprof_cli("gate", str(analyzed["now"]), "--baseline", str(analyzed["base"]),
                         "--rule", "step_ms <= +5000%")
    assert result.returncode == 0 and "Why" not in result.stdout
