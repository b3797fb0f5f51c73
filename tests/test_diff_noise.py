"""Where ``ddpprof diff``'s noise comes from (``ddpprof.diff.noise``): the CPU prior only for
runs recorded like its own, else the repeats, else the steps' scatter, else no verdict; on
real GPU traces and synthetic CPU recordings, the statistics worked out by hand here."""

from __future__ import annotations

import functools
import json
import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_builders import synchronized_steps

from ddpprof.analysis import AnalysisOptions, analyze_paths
from ddpprof.analysis.parts import PartKey
from ddpprof.analysis.profile import RunProfile, profile_json, run_profile
from ddpprof.diff.compare import NO_VERDICT, diff_pair
from ddpprof.diff.noise import DEFAULT_NOISE, Setup, t_quantile
from ddpprof.gate.rules import evaluate, parse_rule, runs_of
from ddpprof.report import diff as report

FIXTURES = Path(__file__).parent / "fixtures"
#: PyTorch DDP on one H100 (ddpprof's recording: ProfilerSteps 3-5, nccl, no host cores in
#: its run.json) and rank 0 of an 8-GPU eager job on B200 (no ProfilerStep: one window).
H100 = FIXTURES / "ddpprof-h100" / "pytorch_ddp"
B200 = FIXTURES / "real-traces" / "tracelens-b200-eager-ws8"
BERT = FIXTURES / "real-traces" / "tracelens-h100-bert-small"      # one ProfilerStep
TWO_RANK = FIXTURES / "hta-gpu" / "two-rank"                        # two ProfilerSteps each
ALPHA = 0.05


def t1(p: float) -> float:
    """Student's t quantile, 1 degree of freedom (the Cauchy): tan(π (p − ½))."""
    return math.tan(math.pi * (p - 0.5))


def t2(p: float) -> float:
    """Student's t quantile, 2 degrees of freedom: (2p − 1) / √(2p(1 − p))."""
    return (2 * p - 1) / math.sqrt(2 * p * (1 - p))


@functools.cache
def profile_of(path: Path, keep_last_step: bool = False) -> RunProfile:
    [run] = analyze_paths([path], AnalysisOptions(keep_last_step=keep_last_step)).runs
    found = run_profile(run)
    assert found is not None
    return found


def quantities(*profiles: RunProfile) -> int:
    """The step and every part some side has: the intervals made simultaneous."""
    return 1 + len({part for p in profiles for part in p.parts})


def test_an_h100_run_against_a_b200_step_twelve_times_longer_is_a_significant_change():
    a, b = profile_of(H100, True), profile_of(B200)
    # the H100's three ProfilerSteps kept (--keep-last-step), the B200's one window (no
    # ProfilerStep: the whole trace, with or without --keep-last-step)
    assert len(a.step_series_ms) == 3 and len(b.step_series_ms) == 1
    assert 12 <= b.step_ms / a.step_ms < 12.5
    diff = diff_pair([a], [b])
    assert diff.noise_source == "steps"
    assert "no run-to-run prior" in diff.noise and "run-to-run noise NOT included" in diff.noise
    # the B200's one step taken to scatter as the H100's three do: s² (1/3 + 1), 2 degrees of
    # freedom. By hand: steps 6.49, 8.73, 5.49 ms, s² = 2.76; 16 quantities, t = 17.85: the
    # change 77.6 ms is known to ± 34.2 ms
    s2 = statistics.variance(a.step_series_ms)
    half = t2(1 - ALPHA / (2 * quantities(a, b))) * math.sqrt(s2 * (1 / 3 + 1))
    delta = b.step_ms - a.step_ms
    assert (diff.step.low_ms, diff.step.high_ms) == (pytest.approx(delta - half),
                                                     pytest.approx(delta + half))
    assert diff.step.low_ms > 0 and diff.step.verdict == "changed"
    assert diff.verdict == "significant change"
    # the prior would have called it noise: 26% of 6.9 and of 84.5 ms
    prior = diff_pair([a], [b], noise=DEFAULT_NOISE.scaled(26.2))
    assert prior.noise_source == "prior" and not prior.step.significant


def test_a_self_diff_is_no_change():
    a = profile_of(H100)
    diff = diff_pair([a], [a])
    assert diff.noise_source == "steps" and diff.verdict == "no significant change"
    # Welch on 2 and 2 steps: variance s²/2 + s²/2, 2 degrees of freedom, 9 quantities
    s2 = statistics.variance(a.step_series_ms)
    half = t2(1 - ALPHA / (2 * quantities(a))) * math.sqrt(s2)
    assert diff.step.delta_ms == 0 and diff.step.high_ms == pytest.approx(half)
    assert not any(p.significant for p in diff.parts)


def test_two_ranks_of_one_job_are_compared_on_their_steps_without_the_cpu_prior():
    r0 = profile_of(TWO_RANK / "rank-0.json.gz", True)
    r1 = profile_of(TWO_RANK / "rank-1.json.gz", True)
    assert Setup.of(r0) == Setup("nccl", "gpu", None) != DEFAULT_NOISE.recorded
    diff = diff_pair([r0], [r1])
    assert diff.noise_source == "steps"
    assert "no run-to-run prior" in diff.noise and "nccl on gpu, host not recorded" in diff.noise
    # Welch: each side s²/2 with 1 degree of freedom
    va, vb = (statistics.variance(r.step_series_ms) / 2 for r in (r0, r1))
    df = (va + vb) ** 2 / (va ** 2 + vb ** 2)
    half = t_quantile(1 - ALPHA / (2 * quantities(r0, r1)), df) * math.sqrt(va + vb)
    assert diff.step.high_ms - diff.step.delta_ms == pytest.approx(half)
    assert not diff.step.significant      # 611 → 616 ms


def test_one_step_a_side_has_no_verdict():
    a, b = profile_of(BERT), profile_of(B200)
    assert len(a.step_series_ms) == len(b.step_series_ms) == 1
    diff = diff_pair([a], [b])
    assert diff.noise_source == "none" and diff.verdict == NO_VERDICT
    assert diff.step.delta_ms == pytest.approx(b.step_ms - a.step_ms)   # reported all the same
    assert (diff.step.low_ms, diff.step.high_ms, diff.step.verdict) == (None, None, "no verdict")
    assert {p.verdict for p in diff.parts} == {"no verdict"}
    lines = report.summary_lines(diff, 0.95)
    assert lines[1].endswith(f"{b.step_ms - a.step_ms:+.2f} ms: {NO_VERDICT}")
    assert "noise: none: one step a side and no repeats, so no noise estimate exists" in \
        "\n".join(lines)
    assert "within noise" not in "\n".join(lines)
    # two ranks of one job, their last steps dropped: one step each
    [r0, r1] = (profile_of(TWO_RANK / f"rank-{r}.json.gz") for r in (0, 1))
    assert diff_pair([r0], [r1]).verdict == NO_VERDICT
    page = report.render_page([diff], "t", 0.95, [])
    assert "noise: none: one step a side and no repeats" in page


def test_cli_says_no_verdict_in_every_output(tmp_path, ddpprof_cli):
    result = ddpprof_cli("diff", str(BERT), str(B200), "--json", str(tmp_path / "d.json"),
                         "--markdown", "-")
    assert result.returncode == 0, result.stderr
    assert f"ms: {NO_VERDICT}" in result.stdout and "within noise" not in result.stdout
    document = json.loads((tmp_path / "d.json").read_text())
    [found] = document["pairs"]
    assert document["version"] == 2 and document["noise"]["recorded"] == {
        "backend": "gloo", "device": "cpu", "host_cores": 2}
    assert (found["noise_source"], found["verdict"]) == ("none", NO_VERDICT)
    assert found["step"]["low_ms"] is None and found["step"]["high_ms"] is None


def recorded(folder: Path, host_cores: int | None = 2, backend: str = "gloo") -> Path:
    """A ddpprof run.json beside the traces: ``backend``, the host's cores."""
    (folder / "run.json").write_text(json.dumps({
        "schema_version": 3, "status": "complete", "run": folder.name,
        "config": {"variant": "bucket_ddp_async", "model": "mlp-small", "backend": backend},
        "measured": {"host_cores": host_cores}}))
    return folder


def profiles(folder: Path) -> list[RunProfile]:
    return [p for p in map(run_profile, analyze_paths([folder]).runs) if p is not None]


def test_gloo_cpu_recordings_like_the_prior_use_it_and_say_so(tmp_path):
    # the same configuration twice; rank 0 waits for rank 1, then rank 1 for rank 0
    before = recorded(synchronized_steps(tmp_path / "a", [40, 41], [0, 0])[0])
    after = recorded(synchronized_steps(tmp_path / "b", [41, 40], [0, 0])[0])
    a, b = profiles(before)[0], profiles(after)[0]
    assert Setup.of(a) == DEFAULT_NOISE.recorded == Setup("gloo", "cpu", 2)
    diff = diff_pair([a], [b])
    assert diff.noise_source == "prior" and diff.verdict == "no significant change"
    assert "the run-to-run prior of runs recorded like these, gloo on cpu, 2 host cores" in \
        diff.noise
    # the step: each side (0.262 step)² + (0.0015 step)² (its steps repeat exactly), 9 degrees
    # of freedom each, 18 together (the two steps are as long)
    assert a.step_ms == b.step_ms
    variance = 2 * (0.262 ** 2 + 0.0015 ** 2) * a.step_ms ** 2
    half = t_quantile(1 - ALPHA / (2 * quantities(a, b)), 18) * math.sqrt(variance)
    assert diff.step.high_ms - diff.step.delta_ms == pytest.approx(half)
    # the same recordings on a 4-core host are not like the prior's: their steps' scatter
    # (none: they repeat exactly) makes the changed wait exact
    for folder in (before, after):
        recorded(folder, host_cores=4)
    unlike = diff_pair(profiles(before), profiles(after))
    assert unlike.noise_source == "steps" and unlike.verdict == "significant change"
    assert "no run-to-run prior: run a is gloo on cpu, 4 host cores" in unlike.noise
    # a trace without run.json (host unknown) on one side: no prior either
    (after / "run.json").unlink()
    recorded(before)
    assert diff_pair(profiles(before), profiles(after)).noise_source == "steps"


def made(name: str, series: list[float], host_cores: int | None = None) -> RunProfile:
    """A one-part CPU run with these steps (``host_cores``: recorded by ddpprof, gloo)."""
    from ddpprof.run.config import RunConfig
    from ddpprof.run.manifest import RunMeasurements

    config = RunConfig(backend="gloo") if host_cores else None
    measured = RunMeasurements(host_cores=host_cores) if host_cores else None
    return RunProfile(run=name, kind="cpu", backend="gloo", ranks=[0],
                      step_ms=statistics.fmean(series), parts=[PartKey("compute", "gemm")],
                      part_ms=[statistics.fmean(series)], steps=[str(k) for k in
                                                                 range(len(series))],
                      step_series_ms=series, part_series_ms=[series], config=config,
                      measured=measured)


def test_repeats_give_the_noise_where_the_prior_does_not_hold():
    # means 10, 12 | 20, 21, 25: variances 2 (1 df) and 7 (2 df), pooled 16/3; 3 degrees
    # of freedom; (1/2 + 1/3) of it
    before = [made("a1", [10.0, 10.0]), made("a2", [12.0, 12.0])]
    after = [made(f"b{k}", [v, v]) for k, v in enumerate((20.0, 21.0, 25.0))]
    diff = diff_pair(before, after)
    assert diff.noise_source == "repeats" and "spread of the repeats' means" in diff.noise
    pooled = (2 * 1 + 7 * 2) / 3
    half = t_quantile(1 - ALPHA / 4, 3) * math.sqrt(pooled * (1 / 2 + 1 / 3))
    assert diff.step.high_ms - diff.step.delta_ms == pytest.approx(half)


def gate_document(*profiles: RunProfile) -> dict:
    runs = [{"run": "job", "variant": "v", "status": "complete", "model": "m", "world_size": 2,
             "global_batch": 8, "grad_accum": 1, "bucket_cap_mb": 25.0, "step_ms": p.step_ms,
             "profile": profile_json(p)} for p in profiles]
    return {"schema": "ddpprof.analyze", "version": 4, "runs": runs, "errors": []}


def test_the_gate_takes_its_noise_by_the_same_rule():
    rule = parse_rule("step_ms <= baseline + 1")

    def verdict(before: RunProfile, now: RunProfile):
        [found] = evaluate([rule], runs_of(gate_document(now), "now"),
                           runs_of(gate_document(before), "base"), significance=0.95)
        return found

    # steps 10, 12 against 11, 13 (s² = 2 each): Welch, variance 1 + 1, 2 degrees of freedom
    steps = verdict(made("a", [10.0, 12.0]), made("b", [11.0, 13.0]))
    assert steps.noise == "steps only, no run-to-run noise (one recording a side)"
    assert steps.margin == pytest.approx(t2(0.95) * math.sqrt(2))
    # the same steps, recorded like the prior: (0.262 × 11)² + (0.0015 × 11)² + 1 and the
    # same at 12 ms, each with 9 degrees of freedom (Welch–Satterthwaite)
    prior = verdict(made("a", [10.0, 12.0], host_cores=2), made("b", [11.0, 13.0], 2))
    assert prior.noise == "steps + prior (one recording a side)"
    va, vb = ((0.262 ** 2 + 0.0015 ** 2) * m ** 2 + 1 for m in (11.0, 12.0))
    df = (va + vb) ** 2 / (va ** 2 / 9 + vb ** 2 / 9)
    assert prior.margin == pytest.approx(t_quantile(0.95, df) * math.sqrt(va + vb))
    # one step a side: no noise, the plain comparison
    none = verdict(made("a", [10.0]), made("b", [13.0]))
    assert (none.margin, none.noise, none.verdict) == (
        None, "none (one step a side and no repeats)", "FAIL")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(0.5, 100), min_size=1, max_size=4), min_size=1, max_size=3),
       st.lists(st.lists(st.floats(0.5, 100), min_size=1, max_size=4), min_size=1, max_size=3),
       st.sampled_from([None, 2, 4]))
def test_the_source_follows_the_rule_and_a_self_diff_never_changes(a, b, host_cores):
    before = [made(f"a{k}", s, host_cores) for k, s in enumerate(a)]
    after = [made(f"b{k}", s, host_cores) for k, s in enumerate(b)]
    diff = diff_pair(before, after)
    expected = "prior" if host_cores == 2 else "repeats" if max(len(a), len(b)) >= 2 else \
        "steps" if max(len(s) for s in a + b) >= 2 else "none"
    assert diff.noise_source == expected
    assert (diff.verdict == NO_VERDICT) == (expected == "none")
    for delta in (diff.step, *diff.parts):
        if expected == "none":
            assert delta.low_ms is None and delta.high_ms is None and not delta.significant
        else:
            assert delta.low_ms is not None and delta.high_ms is not None
            assert delta.low_ms <= delta.delta_ms <= delta.high_ms
    assert diff_pair(before, before).verdict != "significant change"
