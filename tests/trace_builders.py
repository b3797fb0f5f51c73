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
    from ddpprof.analysis import AnalysisOptions
    from ddpprof.analysis.rank import analyze_rank
    from ddpprof.trace.classify import step_names
    from ddpprof.trace.last_step import LastStep

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


BUCKET_TO_GRAD = "torch.distributed.ddp.reducer::copy_bucket_to_grad"


def reducer_buckets(folder: Path, untraced_wake_up_us: float | None = None) -> list[Path]:
    """``two_buckets`` as PyTorch DDP records it: each gradient's ``AccumulateGrad`` sits in
    the autograd engine's span with the hook the Reducer fires, which first copies the
    gradient into its bucket (``aten::mul``, 20 µs) and then launches the bucket; after
    backward the Reducer copies each reduced bucket back into its gradient, bucket by bucket,
    each after waiting for its all-reduce. Thread 1: mm 0-300, [evaluate 300-340: gradient 1
    300-310, mul 310-330, c10d 330-340], mm 340-640, [evaluate 640-680: gradient 2 640-650,
    mul 650-670, c10d 670-680], copy out of bucket 1 680-690, a wait 690-790, copy out of
    bucket 2 790-800, the optimizer 800-900, in ProfilerStep#1 0-1000; gloo's thread 9:
    340-440 and 680-780. With ``untraced_wake_up_us`` w, the wait leaves no span: the thread is
    idle from 690 until it copies bucket 2 w µs after its all-reduce ended (780 + w, for 10 µs),
    then runs the optimizer (100 µs); the step ends 110 µs after that."""
    evaluate = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    paths = []
    for rank in (0, 1):
        events = [step(1, 0, 1000), step(2, 1000, 1100), span("aten::mm", 0, 300)]
        for at in (300, 640):
            events += [span(evaluate, at, at + 40),
                       span("torch::autograd::AccumulateGrad", at, at + 10, **GRADIENT_100KB),
                       span("aten::mul", at + 10, at + 30),
                       span("c10d::allreduce_", at + 30, at + 40),
                       span("gloo:all_reduce", at + 40, at + 140, tid=9, **GRADIENT_100KB)]
        second = 790 if untraced_wake_up_us is None else 780 + untraced_wake_up_us
        end = 1000 if untraced_wake_up_us is None else second + 220
        events[:2] = [step(1, 0, end), step(2, end, end + 100)]
        for at in (680, second):
            events += [span(BUCKET_TO_GRAD, at, at + 10, cat="user_annotation"),
                       span("aten::copy_", at, at + 10)]
        events += [span("aten::mm", 340, 640),
                   span("Optimizer.step#AdamW.step", second + 10, second + 110,
                        cat="user_annotation")]
        if untraced_wake_up_us is None:
            events.append(span("ddpprof::wait", 690, 790, cat="user_annotation"))
        paths.append(write_trace(folder / f"rank{rank}.json", events, rank=rank))
    return paths


FLOAT = {"Input type": ["float"]}


def grad(start: float, end: float, numel: int) -> dict[str, Any]:
    """The op that finishes a gradient of ``numel`` floats (its post-accumulate hook's span)."""
    return span("torch::autograd::AccumulateGrad", start, end,
                **{"Input Dims": [[numel]], **FLOAT})


def gloo_reduce(start: float, end: float, numel: int = 1000, tid: int = 9) -> dict[str, Any]:
    """A gloo all-reduce of ``numel`` floats on its worker thread."""
    return span("gloo:all_reduce", start, end, cat="user_annotation", tid=tid,
                **{"Input Dims": [[numel]], **FLOAT})


def synchronized_steps(folder: Path, mm_us: list[float], delay_us: list[float],
                       steps: int = 3) -> tuple[Path, float]:
    """A CPU run of ``len(mm_us)`` ranks whose steps end together. Each step of rank r: idle
    ``delay_us[r]`` (untraced), ``aten::mm`` for ``mm_us[r]``, ``c10d::allreduce_`` for 2 µs,
    then ``ddpprof::wait`` until 1 µs after the all-reduce; gloo's all-reduce starts 3 µs after
    the mm on each rank and ends 30 µs after the last rank's start; then ``aten::add_`` for
    10 µs and 5 µs of nothing. Returns the folder and the step's length."""
    ranks = len(mm_us)
    last_arrival = max(d + m for d, m in zip(delay_us, mm_us, strict=True)) + 3
    length = last_arrival + 30 + 1 + 10 + 5
    for rank in range(ranks):
        events = [step(s, s * length, (s + 1) * length) for s in range(steps)]
        for s in range(steps):
            o, mm_end = s * length, s * length + delay_us[rank] + mm_us[rank]
            done = o + last_arrival + 30
            events += [span("aten::mm", o + delay_us[rank], mm_end),
                       span("c10d::allreduce_", mm_end, mm_end + 2),
                       span("ddpprof::wait", mm_end + 2, done + 1, cat="user_annotation"),
                       gloo_reduce(mm_end + 3, done),
                       span("aten::add_", done + 1, done + 11)]
        write_trace(folder / f"rank{rank}.json", events, rank=rank, world_size=ranks)
    return folder, length


def late_rank_steps(folder: Path, delay_us: list[list[float]], mm_calls: list[int],
                    mm_us: list[float]) -> tuple[Path, list[float]]:
    """A CPU run of ``len(mm_calls)`` ranks whose steps end together, one step per row of
    ``delay_us`` (and one more, the last, which the analysis drops: a copy of the first row).
    Each step of rank r: idle ``delay_us[step][r]`` (untraced), then ``mm_calls[r]`` calls of
    ``aten::mm`` of ``mm_us[r]`` each (back to back, the same shape), ``c10d::allreduce_`` for
    2 µs, then ``ddpprof::wait`` until 1 µs after gloo's all-reduce ends; the all-reduce
    starts 3 µs after the rank's last mm and ends 30 µs after the last rank's start; then
    ``aten::add_`` for 10 µs and 5 µs of nothing. Returns the folder and each step's length."""
    ranks = len(mm_calls)
    rows = [*delay_us, delay_us[0]]
    arrivals = [max(d[r] + mm_calls[r] * mm_us[r] for r in range(ranks)) + 3 for d in rows]
    lengths = [a + 30 + 1 + 10 + 5 for a in arrivals]
    starts = [sum(lengths[:s]) for s in range(len(rows))]
    shape = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}
    for rank in range(ranks):
        events = []
        for s, (o, delays) in enumerate(zip(starts, rows, strict=True)):
            events.append(step(s, o, o + lengths[s]))
            at = o + delays[rank]
            for _ in range(mm_calls[rank]):
                events.append(span("aten::mm", at, at + mm_us[rank], **shape))
                at += mm_us[rank]
            done = o + arrivals[s] + 30
            events += [span("c10d::allreduce_", at, at + 2),
                       span("ddpprof::wait", at + 2, done + 1, cat="user_annotation"),
                       gloo_reduce(at + 3, done),
                       span("aten::add_", done + 1, done + 11)]
        write_trace(folder / f"rank{rank}.json", events, rank=rank, world_size=ranks)
    return folder, lengths[:-1]
