"""Tiny hand-made Chrome traces for metric tests: every number in them is chosen so the
expected answers can be worked out on paper (see each test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def span(name: str, ts: float, end: float, *, cat: str = "cpu_op", tid: int = 1,
         **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts,
            "dur": end - ts, "args": args}


def step(number: int, ts: float, end: float) -> dict[str, Any]:
    return span(f"ProfilerStep#{number}", ts, end, cat="user_annotation")


def kernel(name: str, ts: float, end: float, correlation: int, *, stream: int = 7,
           cat: str = "kernel", **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts,
            "dur": end - ts, "args": {"stream": stream, "correlation": correlation, **args}}


def launch(ts: float, correlation: int) -> dict[str, Any]:
    return span("cudaLaunchKernel", ts, ts + 2, cat="cuda_runtime", correlation=correlation)


def write_trace(path: Path, events: list[dict], rank: int = 0, world_size: int = 2,
                backend: str = "gloo") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {
        "rank": rank, "world_size": world_size, "backend": backend}}))
    return path


def analyze_one(trace, drop_last_step: bool = True, per_step: bool = False, **options: Any):
    """One rank analyzed as ``ddpprof analyze`` would in a one-rank run: the last step dropped
    when ``drop_last_step`` and the trace names two or more steps."""
    from ddpprof.analysis import AnalysisOptions, LastStep
    from ddpprof.analysis.rank import analyze_rank
    from ddpprof.trace.classify import step_names

    last_step = LastStep.decide(step_names(trace), keep_last_step=not drop_last_step)
    return analyze_rank(trace, trace.rank or 0, last_step,
                        AnalysisOptions(per_step=per_step, **options))


#: 100,000 bytes of float32 (the size of a gradient, or of an all-reduce, in ``two_buckets``).
GRADIENT_100KB = {"Input Dims": [[25000]], "Input type": ["float"]}


def two_buckets(folder: Path) -> list[Path]:
    """Two gloo ranks of a bucketed variant, the same on each: thread 1 runs mm 0-300,
    gradient 1 (AccumulateGrad) 300-310, its all-reduce's c10d op 310-320, mm 320-620,
    gradient 2 620-630, c10d 630-640, a wait 640-750 and the optimizer 760-860, in
    ProfilerStep#1 0-1000 (#2, dropped, 1000-1100); gloo's thread 9 runs the two all-reduces
    320-420 and 640-740 (100,000 bytes each, as each gradient)."""
    paths = []
    for rank in (0, 1):
        events = [step(1, 0, 1000), step(2, 1000, 1100),
                  span("aten::mm", 0, 300),
                  span("torch::autograd::AccumulateGrad", 300, 310, **GRADIENT_100KB),
                  span("c10d::allreduce_", 310, 320),
                  span("aten::mm", 320, 620),
                  span("torch::autograd::AccumulateGrad", 620, 630, **GRADIENT_100KB),
                  span("c10d::allreduce_", 630, 640),
                  span("ddpprof::wait", 640, 750, cat="user_annotation"),
                  span("Optimizer.step#AdamW.step", 760, 860, cat="user_annotation"),
                  span("gloo:all_reduce", 320, 420, tid=9, **GRADIENT_100KB),
                  span("gloo:all_reduce", 640, 740, tid=9, **GRADIENT_100KB)]
        paths.append(write_trace(folder / f"rank{rank}.json", events, rank=rank))
    return paths
