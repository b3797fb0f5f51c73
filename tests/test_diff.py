"""``ddpprof diff``: pairs of synthetic runs whose true change is known (one kernel twice as
slow, one bucket launched later, one rank delayed) come out with that change named first and
the parts adding up to the step's change; inputs and outputs (the noise:
``test_diff_noise``)."""

from __future__ import annotations

import json
import math
import re

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_builders import gloo_reduce, grad, span, step, synchronized_steps, write_trace

from ddpprof.analysis import analyze_paths
from ddpprof.analysis.parts import PartKey
from ddpprof.analysis.profile import STEP, RunProfile, run_profile
from ddpprof.diff.compare import diff_pair
from ddpprof.diff.explain import contributors
from ddpprof.diff.noise import RunNoise, t_cdf, t_quantile

#: No run-to-run noise beyond the steps: the synthetic runs repeat exactly.
QUIET = RunNoise(relative=0.0, of_step=0.0, waiting_of_step=0.0, prior_runs=10,
                 measured="none (tests)")


def profiles(folder) -> list[RunProfile]:
    return [run_profile(run) for run in analyze_paths([folder]).runs]


def test_one_kernel_twice_as_slow(tmp_path):
    # mm 40 -> 80 µs on both ranks: the step grows by 40 µs, all of it GEMM
    before, length_a = synchronized_steps(tmp_path / "a", [40, 40], [0, 0])
    after, length_b = synchronized_steps(tmp_path / "b", [80, 80], [0, 0])
    diff = diff_pair(profiles(before), profiles(after), noise=QUIET)
    assert (length_b - length_a) / 1e3 == pytest.approx(diff.step.delta_ms) == 0.04
    first = diff.parts[0]
    assert first.part == PartKey("compute", "gemm") and first.delta_ms == pytest.approx(0.04)
    assert all(p.delta_ms == pytest.approx(0) for p in diff.parts[1:])
    assert sum(p.delta_ms for p in diff.parts) == pytest.approx(diff.step.delta_ms)
    assert diff.items[0].name == "aten::mm" and diff.items[0].delta_ms == pytest.approx(0.04)
    assert diff.verdict == "significant change" and first.significant


def test_one_rank_delayed(tmp_path):
    # rank 2 starts each step 30 µs late: ranks 0 and 1 wait 30 µs more for it, rank 2 idles
    before, _ = synchronized_steps(tmp_path / "a", [40, 40, 40], [0, 0, 0])
    after, _ = synchronized_steps(tmp_path / "b", [40, 40, 40], [0, 0, 30])
    diff = diff_pair(profiles(before), profiles(after), noise=QUIET)
    assert diff.step.delta_ms == pytest.approx(0.03)
    first, second = diff.parts[:2]
    # mean over the three ranks: 2 × 30 / 3 waiting, 30 / 3 idle
    assert first.label == "waiting for rank 2" and first.delta_ms == pytest.approx(0.02)
    assert second.label == "idle: nothing traced" and second.delta_ms == pytest.approx(0.01)
    assert (second.rank, second.rank_delta_ms) == (2, pytest.approx(0.03))
    assert sum(p.delta_ms for p in diff.parts) == pytest.approx(diff.step.delta_ms)


def _bucketed(folder, launch: float) -> None:
    """One rank, steps of ``end + 110`` µs: forward and backward GEMMs [20,190) and [200,290),
    gradients ready at 200 and 300, bucket 0's all-reduce [205,260) hidden under the second
    GEMM, bucket 1's launched at ``launch`` for 55 µs while the thread waits, then the
    optimizer for 100 µs and 9 µs of nothing."""
    end = launch + 55
    length = end + 110
    events = []
    for s in range(3):
        o = s * length
        events += [step(s, o, o + length), span("aten::mm", o + 20, o + 190),
                   grad(o + 190, o + 200, 1000), span("aten::mm", o + 200, o + 290),
                   grad(o + 290, o + 300, 1000), gloo_reduce(o + 205, o + 260),
                   gloo_reduce(o + launch + o * 0, o + end),
                   span("ddpprof::wait", o + 300, o + end + 1, cat="user_annotation"),
                   span("Optimizer.step#AdamW.step", o + end + 1, o + end + 101,
                        cat="user_annotation")]
    write_trace(folder / "rank0.json", events, world_size=1)


def test_one_bucket_launched_later(tmp_path):
    _bucketed(tmp_path / "a", launch=305)
    _bucketed(tmp_path / "b", launch=320)
    diff = diff_pair(profiles(tmp_path / "a"), profiles(tmp_path / "b"), noise=QUIET)
    # the thread waits 15 µs longer with no collective running; the all-reduce is as long
    assert diff.step.delta_ms == pytest.approx(0.015)
    assert diff.parts[0].label == "host: communication calls"
    assert diff.parts[0].delta_ms == pytest.approx(0.015)
    [b0, b1] = diff.buckets
    assert b0.launch_delta_ms == pytest.approx(0) and b1.launch_delta_ms == pytest.approx(0.015)
    assert b1.before_launch_ms == pytest.approx(0.105)   # 305 - the first gradient's 200
    told = contributors(diff)
    assert told[0] == ("host: communication calls +0.015 ms per step: bucket 1 launched "
                       "0.015 ms later in backward")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(0, 50), min_size=3, max_size=3), min_size=2, max_size=4))
def test_parts_sum_to_the_change_of_random_profiles(tables):
    """Any two sets of recordings whose parts add up to their steps: the parts' changes add up
    to the step's change, and each interval holds its change."""
    keys = [PartKey("compute", "gemm"), PartKey("communication", "all_reduce"),
            PartKey("idle", "nothing traced")]

    def made(name: str, values: list[float]) -> RunProfile:
        series = [[v, v * 1.1] for v in values]
        return RunProfile(run=name, kind="cpu", ranks=[0], step_ms=sum(v * 1.05 for v in values),
                          parts=keys, part_ms=[v * 1.05 for v in values], steps=["a", "b"],
                          step_series_ms=[sum(s[0] for s in series), sum(s[1] for s in series)],
                          part_series_ms=series)

    half = len(tables) // 2
    before = [made(f"a{k}", t) for k, t in enumerate(tables[:max(half, 1)])]
    after = [made(f"b{k}", t) for k, t in enumerate(tables[max(half, 1):] or tables[:1])]
    diff = diff_pair(before, after)
    assert math.isclose(sum(p.delta_ms for p in diff.parts), diff.step.delta_ms,
                        abs_tol=1e-9)
    for delta in (diff.step, *diff.parts):
        assert delta.low_ms <= delta.delta_ms <= delta.high_ms


@pytest.mark.parametrize(("p", "df", "expected"), [
    (0.975, 1, 12.7062), (0.975, 4, 2.7764), (0.975, 10, 2.2281), (0.995, 30, 2.7500),
    (0.95, 2, 2.9200), (0.95, 3, 2.3534), (0.975, math.inf, 1.9600)])
def test_t_quantile_matches_the_tables(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=2e-4)
    assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)


def test_cli_diff_of_traces_and_of_analyze_documents_agree(tmp_path, ddpprof_cli):
    synchronized_steps(tmp_path / "a", [40, 40], [0, 0])
    synchronized_steps(tmp_path / "b", [80, 80], [0, 0])
    for side in ("a", "b"):
        result = ddpprof_cli("analyze", str(tmp_path / side), "--json",
                             str(tmp_path / f"{side}.json"))
        assert result.returncode == 0, result.stderr
        document = json.loads((tmp_path / f"{side}.json").read_text())
        assert document["version"] == 6 and document["runs"][0]["profile"]["step_ms"] == \
            pytest.approx(document["runs"][0]["step_ms"])
    from_traces = ddpprof_cli("diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json", "-")
    from_json = ddpprof_cli("diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                            "--json", "-")
    assert from_traces.returncode == from_json.returncode == 0, from_traces.stderr
    one, two = json.loads(from_traces.stdout), json.loads(from_json.stdout)
    assert (one["schema"], one["version"]) == ("ddpprof.diff", 2)
    for document in (one, two):     # the sides are named after the paths given
        del document["before"], document["after"]
        for found in document["pairs"]:
            del found["before"], found["after"]
    assert one == two
    # the table went to stderr, its first row the step's change
    assert re.search(r"step\s+0\.09\s+0\.13\s+0\.04", from_traces.stderr)


def test_cli_refuses_an_analysis_without_profiles(tmp_path, ddpprof_cli):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": "ddpprof.analyze", "version": 2, "runs": [
        {"run": "r", "status": "complete"}], "errors": []}))
    result = ddpprof_cli("diff", str(old), str(old))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "has no profile section (analyze schema version 2" in result.stderr


@pytest.mark.parametrize("bad", [["--significance", "1"], ["--significance", "nan"]])
def test_cli_bad_options_are_one_line(tmp_path, ddpprof_cli, bad):
    synchronized_steps(tmp_path / "a", [40, 40], [0, 0])
    result = ddpprof_cli("diff", str(tmp_path / "a"), str(tmp_path / "a"), *bad)
    assert result.returncode == 2 and result.stderr.count("\n") == 1


def test_configuration_changes_come_first(tmp_path, ddpprof_cli):
    for side, cap in (("a", 25.0), ("b", 5.0)):
        folder, _ = synchronized_steps(tmp_path / side, [40, 40], [0, 0])
        (folder / "run.json").write_text(json.dumps({
            "schema_version": 2, "status": "complete", "run": side,
            "config": {"variant": "bucket_ddp_async", "model": "mlp-small", "world_size": 2,
                       "bucket_cap_mb": cap, "torch_version": "2.13.0"}}))
    result = ddpprof_cli("diff", str(tmp_path / "a"), str(tmp_path / "b"), "--markdown", "-")
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    # the runs, then what differs in their configuration, then the step
    assert lines[2] == f"{tmp_path / 'a'} (1 recording: a) → {tmp_path / 'b'} (1 recording: b)"
    assert lines[3] == "configuration: bucket_cap_mib 25.0 → 5.0"
    assert lines[4].startswith("step 0.09 → 0.09 ms")
    assert "no significant change" in result.stdout


def test_html_page_is_offline_and_renders(tmp_path, ddpprof_cli):
    synchronized_steps(tmp_path / "a", [40, 40], [0, 0])
    synchronized_steps(tmp_path / "b", [80, 80], [0, 0])
    page = tmp_path / "diff.html"
    result = ddpprof_cli("diff", str(tmp_path / "a"), str(tmp_path / "b"), "--html-out",
                         str(page))
    assert result.returncode == 0, result.stderr
    html = page.read_text()
    assert len(re.findall(r"plotly\.js \(basic - minified\) v\d", html)) == 1
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\"?https?:", html)
    assert 'data-figures="2"' in html and "What moved inside the parts" in html
    # drawn in a browser, every chart checked: tests/test_charts.py


def test_step_is_the_first_row_and_named(tmp_path):
    before, _ = synchronized_steps(tmp_path / "a", [40, 40], [0, 0])
    diff = diff_pair(profiles(before), profiles(before), noise=QUIET)
    assert diff.step.part == STEP and diff.step.delta_ms == 0
    assert msgspec.to_builtins(diff)["verdict"] == "no significant change"


@pytest.mark.slow
def test_an_injected_straggler_is_recorded_and_found(tmp_path, ddpprof_cli):
    """Two real recordings, one with rank 1 sleeping 30 ms every step: the diff lists the
    configuration's change, and finds the injected span on rank 1 and the wait for it on
    rank 0."""
    from conftest import SCHEDULE

    common = ["--variant", "bucket_ddp_async", "--model", "mlp-tiny", "--nproc", "2",
              "--global-batch", "64", *SCHEDULE, "--out", str(tmp_path), "--quiet"]
    for name, extra in (("plain", []), ("late", ["--inject-delay", "1:30"])):
        result = ddpprof_cli("record", *common, "--name", name, *extra, timeout=600)
        assert result.returncode == 0, result.stderr
    late = json.loads((tmp_path / "late" / "run.json").read_text())
    assert late["config"]["inject_delay"] == "1:30"
    result = ddpprof_cli("diff", str(tmp_path / "plain"), str(tmp_path / "late"),
                         "--json", "-")
    assert result.returncode == 0, result.stderr
    [found] = json.loads(result.stdout)["pairs"]
    assert {"field": "inject_delay", "before": "-", "after": "1:30"} in found["config_changes"]
    parts = {p["label"]: p for p in found["parts"]}
    [span] = [i for i in found["items"] if i["name"] == "ddpprof::injected_delay"]
    # 30 ms on rank 1 each step: 15 ms in the mean over the two ranks (the sleep lasts at
    # least that long)
    assert span["after_ms"] >= 15 and parts[span["part"]]["rank"] == 1
    assert parts["waiting for rank 1"]["delta_ms"] > 5
    assert parts["waiting for rank 1"]["rank"] == 0
