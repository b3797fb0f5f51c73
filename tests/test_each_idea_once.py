"""Each idea defined once (issue 34): where two places used to define the same thing apart,
the one definition they now share, held by a case on which the two used to disagree."""

from __future__ import annotations

import json

import pytest
from trace_builders import gloo_reduce, grad, span, step, write_trace

from ddpprof.analysis import AnalysisOptions, analyze_run
from ddpprof.metrics.middle import middle_index
from ddpprof.trace.discover import discover

STEP_US = 1000.0


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
