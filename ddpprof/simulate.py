"""``ddpprof simulate``: a what-if model of bucketed data parallelism, calibrated from a trace.

From one recorded run it takes (1) when each gradient became ready during backward and how big
it is (``AccumulateGrad`` spans and their shapes), (2) the time before backward and the
optimizer's time, and (3) the collectives' durations and sizes, to which it fits the cost
``t(S) = α + S/β`` on ring traffic ``S = 2(N−1)/N · bytes``. It then replays bucketing
(reverse order of readiness, closing a bucket at the cap, launching buckets in order on one
communication lane that runs beside backward) for any bucket size and world size.

Assumptions, stated because they bound the accuracy: compute per rank scales with the rank's
share of the global batch (N₀/N), the optimizer does not; backward is the only compute the
lane can hide behind; the profiler's overhead is divided out with the run's measured ratio.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .analysis import host_lanes
from .errors import UsageError
from .trace import classify
from .trace.discover import discover, read_manifest
from .trace.loader import GRAD_READY, RankTrace, load


@dataclass(frozen=True)
class StepModel:
    """One step of one rank, in µs (profiler overhead divided out)."""

    world_size: int
    pre_us: float                      # step start -> backward start (forward, data, loss)
    backward_us: float                 # backward start -> last gradient ready
    post_us: float                     # the optimizer
    grads: list[tuple[float, int]]     # (ready µs after backward start, bytes), ready order


@dataclass(frozen=True)
class CostModel:
    alpha_us: float                    # per-call latency
    beta_bytes_per_us: float           # bandwidth on ring traffic
    r2: float | None                   # fit quality; None when given, not fitted
    samples: int

    def time_us(self, size_bytes: float, world_size: int) -> float:
        if world_size <= 1:
            return 0.0
        return self.alpha_us + 2 * (world_size - 1) / world_size * size_bytes / \
            self.beta_bytes_per_us


def step_model(trace: RankTrace, world_size: int, overhead_ratio: float | None) -> StepModel:
    """The middle analyzed ProfilerStep's backward timeline (the last step is not used)."""
    steps, _ = classify.profiler_steps(trace)
    if steps.size == 0:
        raise UsageError(f"{trace.path}: no ProfilerStep to calibrate from")
    analyzed = steps[:-1] if steps.size >= 2 else steps
    step = analyzed[analyzed.size // 2]
    lo, hi = trace.start_us[step], trace.end_us[step]
    inside = (trace.start_us >= lo) & (trace.start_us < hi)
    grads = sorted((trace.end_us[i], size) for i, size in trace.grad_bytes.items() if inside[i])
    if not grads:
        raise UsageError(f"{trace.path}: no {GRAD_READY} spans with shapes in "
                         f"{trace.names[trace.name_id[step]]} (record with record_shapes)")
    backward = inside & classify.per_name(
        trace, lambda n: n.startswith("autograd::engine::evaluate_function")).astype(bool)
    backward_start = trace.start_us[backward].min() if backward.any() else grads[0][0]
    optimizer = inside & classify.per_name(trace, lambda n: n.startswith("Optimizer.")).astype(
        bool)
    post = float(np.sum(trace.end_us[optimizer] - trace.start_us[optimizer]))
    scale = 1 / overhead_ratio if overhead_ratio and overhead_ratio > 1 else 1.0
    return StepModel(
        world_size=world_size, pre_us=(backward_start - lo) * scale,
        backward_us=(grads[-1][0] - backward_start) * scale, post_us=post * scale,
        grads=[((t - backward_start) * scale, int(size)) for t, size in grads])


def collective_samples(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, µs) of every backend collective span with a known size."""
    _, _, comm = host_lanes(trace)
    device = classify.event_kinds(trace) == classify.Kind.COMMUNICATION
    chosen = np.flatnonzero(comm | (device & (trace.stream >= 0)))
    sizes, times = [], []
    for i in chosen:
        args = trace.comm_args.get(int(i))
        if args and args.bytes_per_call:
            sizes.append(args.bytes_per_call)
            times.append(trace.end_us[i] - trace.start_us[i])
    return np.array(sizes, dtype=float), np.array(times, dtype=float)


def fit_cost(sizes: np.ndarray, times_us: np.ndarray, world_size: int) -> CostModel:
    """Least squares of ``t = α + x/β`` with ``x = 2(N−1)/N · bytes``."""
    if world_size < 2:
        raise UsageError("a single-process run has no collectives to calibrate from")
    if sizes.size < 2 or np.unique(sizes).size < 2:
        raise UsageError("calibration needs collectives of at least two sizes (record "
                         "simple_ddp, or a smaller --bucket-cap-mb), or give --latency-us and "
                         "--bandwidth-gbps")
    traffic = 2 * (world_size - 1) / world_size * sizes
    design = np.stack([np.ones_like(traffic), traffic], axis=1)
    (alpha, inverse_beta), *_ = np.linalg.lstsq(design, times_us, rcond=None)
    predicted = design @ np.array([alpha, inverse_beta])
    spread = np.sum((times_us - times_us.mean()) ** 2)
    r2 = 1 - np.sum((times_us - predicted) ** 2) / spread if spread > 0 else None
    if inverse_beta <= 0:
        raise UsageError("the collectives do not get slower with size here (fitted bandwidth "
                         "is not positive); give --latency-us and --bandwidth-gbps")
    return CostModel(max(float(alpha), 0.0), 1 / float(inverse_beta), r2, int(sizes.size))


def buckets_by_cap(sizes: list[int], cap_bytes: float) -> list[list[int]]:
    """Consecutive groups (readiness order) closing once they reach the cap."""
    groups, current, total = [], [], 0
    for index, size in enumerate(sizes):
        current.append(index)
        total += size
        if total >= cap_bytes:
            groups.append(current)
            current, total = [], 0
    return groups + ([current] if current else [])


@dataclass(frozen=True)
class Prediction:
    world_size: int
    bucket_cap_mb: float
    buckets: int
    step_ms: float
    exposed_comm_ms: float
    overlap_pct: float | None
    efficiency: float


def predict(model: StepModel, cost: CostModel, cap_mb: float, world_size: int) -> Prediction:
    scale = model.world_size / world_size   # the rank's share of the global batch
    ready = [(t * scale, size) for t, size in model.grads]
    backward_end = model.backward_us * scale
    groups = buckets_by_cap([size for _, size in ready], cap_mb * 1024 * 1024)
    lane_end, comm_us, hidden_us = 0.0, 0.0, 0.0
    for group in groups:
        start = max(max(ready[i][0] for i in group), lane_end)
        duration = cost.time_us(sum(ready[i][1] for i in group), world_size)
        lane_end = start + duration
        comm_us += duration
        hidden_us += max(0.0, min(lane_end, backward_end) - start)
    step_us = model.pre_us * scale + max(backward_end, lane_end) + model.post_us
    single_us = (model.pre_us + model.backward_us) * model.world_size + model.post_us
    return Prediction(
        world_size=world_size, bucket_cap_mb=cap_mb, buckets=len(groups),
        step_ms=step_us / 1e3, exposed_comm_ms=(comm_us - hidden_us) / 1e3,
        overlap_pct=100 * hidden_us / comm_us if comm_us > 0 else None,
        efficiency=single_us / (world_size * step_us))


def best(predictions: list[Prediction]) -> dict[int, Prediction]:
    result: dict[int, Prediction] = {}
    for p in predictions:
        if p.world_size not in result or p.step_ms < result[p.world_size].step_ms:
            result[p.world_size] = p
    return result


def median_error_pct(pairs: list[tuple[float, float]]) -> float | None:
    """Median of |predicted − measured| / measured over (predicted, measured) pairs, in %."""
    errors = [abs(p - m) / m * 100 for p, m in pairs if m]
    return statistics.median(errors) if errors else None


@dataclass(frozen=True)
class Simulation:
    trace_name: str
    model: StepModel
    cost: CostModel
    predictions: list[Prediction]
    rows: list[dict]                   # predictions, with measured points where there are


def simulate_run(run_path: Path, sizes_mb: list[float], world_sizes: list[int] | None,
                 bandwidth_gbps: float | None, latency_us: float | None,
                 measured_file: Path | None) -> Simulation:
    """Calibrate on ``run_path``'s first rank trace, and predict every combination."""
    if bandwidth_gbps is not None and (bandwidth_gbps <= 0 or (latency_us or 0) < 0):
        raise UsageError("--bandwidth-gbps must be positive and --latency-us not negative")
    run = discover([run_path])[0]
    manifest = read_manifest(run.folder)
    accumulation = manifest.get("config", {}).get("grad_accum", 1)
    if accumulation != 1:
        raise UsageError(f"{run.folder}: recorded with --grad-accum {accumulation}; the replay "
                         "models one backward per step, so record with --grad-accum 1")
    trace = load(run.traces[0], workers=1)
    world = trace.world_size or manifest.get("config", {}).get("world_size") or 1
    overhead = (manifest.get("throughput") or {}).get("profiler_overhead_ratio")
    model = step_model(trace, world, overhead)
    if bandwidth_gbps is not None:
        cost = CostModel(latency_us or 0.0, bandwidth_gbps * 1e3, None, 0)
    else:
        cost = fit_cost(*collective_samples(trace), world)
    worlds = world_sizes or sorted({world, 2, 4, 8})
    predictions = [predict(model, cost, size, n) for n in worlds for size in sizes_mb]
    measured = measured_steps(measured_file, manifest) if measured_file else {}
    rows = []
    for p in predictions:
        observed = measured.get(p.bucket_cap_mb) if p.world_size == world else None
        rows.append({**p.__dict__, "measured_step_ms": observed,
                     "error_pct": 100 * (p.step_ms - observed) / observed if observed else None})
    return Simulation(run.traces[0].name, model, cost, predictions, rows)


def measured_steps(path: Path, manifest: dict) -> dict[float, float]:
    """Measured step ms by bucket size from a sweep file: its bucket_ddp_async rows (what the
    replay models), else the run's own variant's."""
    try:
        rows = json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{path}: not a `ddpprof sweep --json` file ({error})") from None
    variants = {r.get("variant") for r in rows}
    variant = ("bucket_ddp_async" if "bucket_ddp_async" in variants
               else manifest.get("config", {}).get("variant"))
    return {float(r["bucket_cap_mb"]): r["step_ms"] for r in rows
            if r.get("step_ms") and r.get("variant") == variant}
