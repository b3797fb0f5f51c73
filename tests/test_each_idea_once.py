"""Each idea defined once (issue 34): where two places used to define the same thing apart,
the one definition they now share, held by a case on which the two used to disagree."""

from __future__ import annotations

import dataclasses
import json
import tokenize
from pathlib import Path

import pytest
import trace_builders as tb
from trace_builders import analyze_one, gloo_reduce, grad, kernel, launch, span, step, write_trace

from ddpprof.analysis import AnalysisOptions, analyze_paths, analyze_run, run_row
from ddpprof.graph.build import join_steps
from ddpprof.graph.contended import Tax
from ddpprof.graph.edit import WorldSize
from ddpprof.metrics.cost import CostModel
from ddpprof.metrics.middle import middle_index
from ddpprof.metrics.registry import label_of
from ddpprof.report.html import breakdown_figure, overlap_figure, spread_figure, step_figure
from ddpprof.run.discover import discover
from ddpprof.simulate.steps import Step
from ddpprof.trace.loader import load

STEP_US = 1000.0
PACKAGE = Path(__file__).resolve().parent.parent / "ddpprof"


def _numbered_steps(folder, steps: int):
    """A recorded two-rank bucket_ddp_async run of ``steps`` ProfilerSteps (the last one
    dropped by the analysis): step k (from 0) reduces one gradient of 1000·(k+1) floats in
    one all-reduce of that size, so a bucket's bytes say which step it is from."""
    for rank in (0, 1):
        events = []
        for k in range(steps):
            o, numel = k * STEP_US, 1000 * (k + 1)
            events += [step(k, o, o + STEP_US), span("aten::mm", o, o + 300),
                       grad(o + 300, o + 310, numel), span("c10d::allreduce_", o + 310, o + 320),
                       gloo_reduce(o + 320, o + 420, numel),
                       span("ddpprof::wait", o + 320, o + 430, cat="user_annotation")]
        write_trace(folder / f"rank{rank}.json", events, rank=rank)
    (folder / "run.json").write_text(json.dumps({"status": "complete", "config": {
        "variant": "bucket_ddp_async", "world_size": 2, "nproc": 2, "backend": "gloo",
        "bucket_cap_mb": 25}}))
    return folder


@pytest.mark.parametrize("steps", [5, 4])
def test_the_bucket_table_and_the_cap_advice_look_at_the_same_step(tmp_path, steps):
    """Of 4 analyzed steps (5 recorded, the last dropped) the middle one is the third
    (``ProfilerStep#2``): the bucket table shows its bucket (12,000 bytes), and the step graph
    the bucket-cap advice replays is that step's; of 3, the second. (They once took the third
    and the second of 4: ``n // 2`` against ``(n - 1) // 2``.)"""
    run = discover([_numbered_steps(tmp_path / "run", steps)])[0]
    rank = analyze_run(run, AnalysisOptions(replay_graphs=True, jobs=1))[0].ranks[0]
    middle = middle_index(steps - 1)
    assert rank.buckets is not None and rank.graph_steps is not None
    assert rank.buckets.step == f"ProfilerStep#{middle}"
    assert [b.size_bytes for b in rank.buckets.buckets] == [4000 * (middle + 1)]
    assert [s.name for s in rank.graph_steps] == [f"ProfilerStep#{middle}"]


def test_the_middle_of_a_count():
    assert [middle_index(n) for n in (1, 2, 3, 4, 5)] == [0, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        middle_index(0)


def test_a_step_is_never_changed_and_its_replays_are_remembered_by_their_model(tmp_path):
    """``tb.two_buckets`` (two 100,000-byte all-reduces on 2 ranks, 100 µs each) replayed at
    4 ranks under two cost models: bandwidth-bound (α = 0: a call's time grows with its
    traffic, 1.5x from 2 ranks to 4) and latency-bound (α = 1 ms: 1100 µs to 1150 µs), so
    the two replays differ. The replay used to be remembered by its edits and world size
    alone: the second model got the first's answer."""
    tb.two_buckets(tmp_path / "run")
    run = analyze_run(discover([tmp_path / "run"])[0],
                      AnalysisOptions(step_graphs=True, jobs=1))[0]
    graph = join_steps({r.rank: r.graph_steps or [] for r in run.ranks})[0][0]
    notes: list[str] = []
    bandwidth, latency = CostModel(0.0, 1000.0, None, 0), CostModel(1000.0, 1000.0, None, 0)
    step = Step.of(graph, Tax.none()).ready(bandwidth, 2, "gloo", 1.0, None, 1, notes)
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.level = 2.0  # type: ignore[misc]
    four = WorldSize(4, 2, False)
    by_bandwidth = step.replay((), None, four, bandwidth, "gloo")
    by_latency = step.replay((), None, four, latency, "gloo")
    assert by_bandwidth is not None and by_latency is not None
    assert by_bandwidth.step_us != by_latency.step_us
    assert step.replay((), None, four, bandwidth, "gloo") is by_bandwidth     # remembered


#: The code that still names the bucket cap ``bucket_cap_mb`` (names, not strings): older
#: documents' keys read back (the analyze JSON's rows before version 5, ``simulate``'s version
#: 1, run.json version 2's ``config``) and PyTorch DDP's own parameter (``pytorch_ddp``).
#: Every other name of it is ``bucket_cap_mib``, run.json's ``config`` field included (the
#: old key read through ``run.config.OLD_FIELD_NAMES``).
STILL_MB = {"analysis/document.py": 1, "gate/rules.py": 1, "run/manifest.py": 2,
            "simulate/output.py": 2, "variants/pytorch_ddp.py": 1}


def test_the_bucket_cap_is_named_in_mib_in_the_code():
    """Once ``bucket_cap_mb`` in 59 places and ``bucket_cap_mib`` in 18: a new name in MB
    (a parameter, a field, a variable) fails here."""
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        with path.open("rb") as source:
            count = sum(t.type == tokenize.NAME and t.string == "bucket_cap_mb"
                        for t in tokenize.tokenize(source.readline))
        if count:
            found[path.relative_to(PACKAGE).as_posix()] = count
    assert found == STILL_MB


def test_the_report_s_charts_call_each_metric_by_its_registered_label(tmp_path):
    """The charts' legends once wrote their own labels ("compute", "non-compute", "overlap
    %"), apart from the registry's that the report's table shows ("Compute", ...)."""
    tb.two_buckets(tmp_path / "run")
    analysis = analyze_paths([tmp_path / "run"], AnalysisOptions(jobs=1))
    rows = [run_row(run) for run in analysis.runs]
    names = {figure: [trace.name for trace in make(rows).data] for figure, make in (
        ("step", step_figure), ("breakdown", breakdown_figure), ("overlap", overlap_figure))}
    names["spread"] = [trace.name for trace in spread_figure(analysis.runs).data]
    assert names == {
        "step": [label_of("compute_pct"), label_of("exposed_comm_pct"), "Other non-compute",
                 label_of("idle_pct")],
        "breakdown": [label_of(k) for k in ("compute_pct", "non_compute_pct", "idle_pct")],
        "overlap": [label_of("overlap_pct")],
        "spread": [label_of("compute_pct"), label_of("overlap_pct")]}


def test_gpu_and_cpu_traces_analyze_the_same_steps_up_to_the_last_one(tmp_path):
    """Three ProfilerSteps (0-100, 100-200, 200-300 µs), the last dropped: both kinds of trace
    analyze steps 0 and 1 (``LastStep.analyzed``, the one selection), and work that starts
    exactly where the last step starts is not analyzed. GPU: kernels launched at 10, 100 and
    200 µs (20 µs, 30 µs and 40 µs long): 50 µs of compute, the third kernel's launch being
    the last step's first instant. CPU: the same ops on the host (10-30, 100-130, 200-240):
    50 µs too."""
    steps = [step(0, 0, 100), step(1, 100, 200), step(2, 200, 300)]
    gpu = [*steps, launch(10, 1), launch(100, 2), launch(200, 3), kernel("sgemm", 15, 35, 1),
           kernel("sgemm", 105, 135, 2), kernel("sgemm", 205, 245, 3)]
    cpu = [*steps, span("aten::mm", 10, 30), span("aten::mm", 100, 130),
           span("aten::mm", 200, 240)]
    results = {kind: analyze_one(load(write_trace(tmp_path / f"{kind}.json", events,
                                                  backend=backend)), per_step=True)
               for kind, events, backend in (("gpu", gpu, "nccl"), ("cpu", cpu, "gloo"))}
    for kind, result in results.items():
        assert result.kind == kind
        assert [row.step for row in result.per_step] == ["ProfilerStep#0", "ProfilerStep#1"]
        assert result.breakdown.compute_us == 50
