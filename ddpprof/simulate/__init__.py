"""``ddpprof simulate``: what-if replay of a recorded run under other bucket caps and world
sizes, with a cost model it calibrates itself.

From rank 0's trace it takes each profiled step as a program (``program``: the compute, where
each gradient becomes ready, the collectives as they ran), a cost model for collectives
(``cost``, found by ``sources``), and how communication and compute slowed each other down in
the run; then it replays the steps under the recorded variant's gradient sync and under
bucketing at each cap (``replay``), and takes the median over the steps (``results``).
``output`` writes it out; ``advice`` answers ``ddpprof.findings``.

**The cost model**, first found of: ``--latency-us``/``--bandwidth-gbps``; ``--calibration
FILE``; a complete ``calibration.json`` (``ddpprof calibrate``) of the run's backend in the run
folder or its parent; a fit over the run's own collectives (two sizes at least); else, for the
command, an all-reduce sweep on this machine with the run's backend and world size, written to
``<run>/calibration.json`` (and said so). Then, from the run's collectives against that model:
ρₐ and ρₒ, how much slower they ran alone and beside compute (``cost.comm_slowdowns``).

**Profiler overhead**, the same on both sides: everything taken from the trace (compute, and
the collectives' slowdowns) is as the profiler saw it, so the replay predicts a profiled step;
the prediction is divided by the run's measured ``profiler_overhead_ratio`` (median profiled
step over median unprofiled step) as a whole, compute and communication alike, and compared
with the run's median unprofiled step.

**Scaling**: compute before and during backward scales with the rank's share of the global
batch (N₀/N); the optimizer does not, except under ZeRO, where each rank steps 1/N of it.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from ..errors import UsageError
from ..manifest import INCOMPLETE, BucketRecord, effective_status, status_detail
from ..trace.classify import GRAD_READY
from ..trace.discover import discover
from ..trace.loader import load
from ..variants import VARIANTS
from . import output, sources
from .advice import ADVICE_CAPS_MB, cap_advice, cap_advice_for_runs
from .cost import CostModel, fit_cost
from .output import summary_lines, to_json_document, verdict_lines
from .program import read_trace
from .replay import POLICIES, Outcome, Policy, buckets_by_cap, replay
from .results import Measured, Prediction, Simulation, best, median_error_pct

__all__ = ["ADVICE_CAPS_MB", "CostModel", "Prediction", "Simulation", "best", "buckets_by_cap",
           "cap_advice", "cap_advice_for_runs", "fit_cost", "median_error_pct",
           "simulate_run", "summary_lines", "to_json_document", "verdict_lines"]

#: What the what-if rows replay for a variant without a bucket cap of its own.
WHAT_IF_VARIANT = "bucket_ddp_async"


def registration_positions(grads: list[int], recorded: list[BucketRecord] | None
                           ) -> tuple[list[int], str | None]:
    """Each gradient's (ready order) position in the model's registration order, from
    run.json's ``buckets``: gradients of one size are matched in ready order to that size's
    parameters in reverse registration order. Without them (or when the sizes disagree), the
    registration order is taken as the reverse of the ready order, and a note says so."""
    fallback = list(range(len(grads)))[::-1]
    if not recorded:
        return fallback, ("registration order: run.json names no buckets, so it is taken as "
                          "the reverse of the order gradients became ready")
    params = sorted(((index, size) for b in recorded
                     for index, size in zip(b.param_index, b.param_bytes, strict=True)),
                    reverse=True)
    if sorted(size for _, size in params) != sorted(grads):
        return fallback, ("registration order: the trace's gradients do not match run.json's "
                          "parameters by size, so it is taken as the reverse of the ready "
                          "order")
    by_size: dict[int, list[int]] = {}
    for index, size in params:
        by_size.setdefault(size, []).append(index)
    return [by_size[size].pop(0) for size in grads], None


def simulate_run(run_path: Path, sizes_mb: list[float], world_sizes: list[int] | None,
                 bandwidth_gbps: float | None = None, latency_us: float | None = None,
                 measured_file: Path | None = None, calibration_file: Path | None = None,
                 ready_order: bool = False, allow_sweep: bool = True,
                 fallback_cost: CostModel | None = None, on_note=None) -> Simulation:
    """Calibrate on ``run_path``'s rank 0 trace and predict its own configuration and every
    (world size, cap) combination. ``allow_sweep``: measure all-reduce on this machine when no
    cost model can be had otherwise; ``fallback_cost`` stands in before that (``analyze``
    fits one over the collectives of all the runs it read)."""
    if bandwidth_gbps is not None and (bandwidth_gbps <= 0 or (latency_us or 0) < 0):
        raise UsageError("--bandwidth-gbps must be positive and --latency-us not negative")
    calibration = sources.given_calibration(calibration_file)
    run = discover([run_path])[0]
    if run.error:
        raise UsageError(run.error)
    manifest = run.manifest
    if (status := effective_status(manifest)) in INCOMPLETE:
        raise UsageError(f"{run.folder}: the run is {status} ({status_detail(manifest)}); "
                         "simulate calibrates only from a complete run")
    config = manifest.config
    info = VARIANTS.get(config.variant or "")
    if info is not None and info.tensor_parallel:
        raise UsageError(f"{run.folder}: simulate replays the collectives of one process group; "
                         f"{config.variant} communicates over two (its mesh's dp and tp groups)")
    trace = load(run.traces[0], workers=1)
    model = read_trace(trace, config.grad_accum or 1)
    if not model.programs:
        missing = "ProfilerStep" if model.notes else \
            f"{GRAD_READY} spans with shapes: record with record_shapes"
        raise UsageError(f"{run.traces[0]}: nothing to replay (no {missing})")
    world = trace.world_size or config.world_size or 1
    backend = config.backend or trace.backend
    notes = list(model.notes)
    variant = config.variant if config.variant in POLICIES or config.variant == "single" \
        else None
    recorded_here = config.variant is not None and (config.nnodes or 1) == 1
    cost = sources.cost_model(run_path, model, world, backend, bandwidth_gbps, latency_us,
                       calibration, allow_sweep, fallback_cost, notes, on_note, recorded_here)
    contention, per_step = sources.contention_factors(model, cost, world, backend, notes)
    grads = [size for _, size in model.programs[0].grads]
    registration, note = registration_positions(grads, manifest.buckets)
    if note:
        notes.append(note)
    overhead = manifest.throughput.profiler_overhead_ratio if manifest.throughput else None
    ratio = max(overhead or 1.0, 1.0)
    if overhead is not None and overhead < 1:
        notes.append(f"profiler overhead: measured {overhead:.3f}x (profiled steps faster than "
                     "unprofiled ones: noise); taken as 1")
    notes.append(_scope(variant, config.variant))
    sharded = variant in ("zero1", "zero2", "pytorch_zero1", "fsdp")
    single_us = statistics.median(
        (p.pre_us + p.backward_us + p.sync_us) * world + p.post_us * (world if sharded else 1)
        for p in model.programs) / ratio
    predictions = []
    for label, n, policy, cap, recorded in _configurations(
            variant, config.bucket_cap_mb, sizes_mb, world_sizes or sorted({world, 2, 4, 8}),
            world, ready_order):
        scale = world / n
        outcomes = [replay(p, policy, cost, step_contention, n, backend, registration, scale,
                           scale if sharded else 1.0)
                    for p, step_contention in zip(model.programs, per_step, strict=True)]
        predictions.append(_median_prediction(label, n, cap, outcomes, ratio, single_us,
                                              recorded))
    predictions.sort(key=lambda p: (p.world_size, p.bucket_cap_mb is None,
                                    p.bucket_cap_mb or 0))
    measured = Measured(
        step_ms=manifest.throughput.median_step_s * 1e3 if manifest.throughput
        and manifest.throughput.median_step_s else None,
        overlap_pct=_median([p.overlap_pct for p in model.programs]),
        exposed_comm_ms=statistics.median(p.exposed_comm_us for p in model.programs) / 1e3)
    simulation = Simulation(str(run.folder), config.variant, str(run.traces[0]), world,
                            model.programs, cost, contention, ratio, predictions, measured,
                            notes=notes)
    sweep_points = output.measured_steps(measured_file, manifest) if measured_file else {}
    simulation.rows = output.rows(simulation, sweep_points)
    return simulation


def _configurations(variant: str | None, own_cap: float | None, caps: list[float],
                    worlds: list[int], world: int, ready_order: bool):
    """(label, world size, policy, cap, is the run's own) of every row: the run's own
    configuration at each world size (``single``: at its own only), then the what-if caps,
    replayed as the variant itself where it has a cap, else as ``bucket_ddp_async``."""
    policy_name = POLICIES.get(variant or "")
    capped = policy_name in ("bucketed", "sharded")
    what_if = variant if capped else WHAT_IF_VARIANT
    for n in worlds:
        if variant is None:            # a trace of no known variant: its own collectives
            yield "as recorded", n, Policy("recorded"), None, True
        elif variant == "single":
            if n == world:
                yield "single", n, Policy("recorded"), None, True
        else:
            kind = "reduce_scatter" if variant == "fsdp" else None
            yield (variant, n, Policy(policy_name, own_cap, ready_order, kind),
                   own_cap if capped else None, True)
        if variant == "fsdp" or n == 1:
            continue
        for cap in caps:
            if not (capped and cap == own_cap):
                yield what_if, n, Policy(POLICIES[what_if], cap, ready_order), cap, False


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _median_prediction(label: str, world: int, cap: float | None, outcomes: list[Outcome],
                       ratio: float, single_us: float, recorded: bool) -> Prediction:
    step_us = statistics.median(o.step_us for o in outcomes) / ratio
    return Prediction(
        variant=label, world_size=world, bucket_cap_mb=cap,
        buckets=int(statistics.median(o.gradient_collectives for o in outcomes)),
        step_ms=step_us / 1e3,
        exposed_comm_ms=statistics.median(o.exposed_us for o in outcomes) / ratio / 1e3,
        overlap_pct=_median([o.overlap_pct for o in outcomes]),
        efficiency=single_us / (world * step_us), recorded=recorded)


def _scope(variant: str | None, recorded: str | None) -> str:
    """What is and is not modelled for the run's variant, in one line."""
    if variant is None:
        return (f"variant {recorded or 'unknown'}: its own collectives are replayed where they "
                f"were launched; what-if rows are {WHAT_IF_VARIANT}")
    if variant == "single":
        return (f"single: no collectives; what-if rows are {WHAT_IF_VARIANT} on N ranks "
                "(each rank's compute at 1/N of the batch; the cores a rank gets are not "
                "modelled)")
    policy = POLICIES[variant]
    if policy == "recorded":
        return ("fsdp: its all-gathers and reduce-scatters are replayed where they were issued "
                "(sizes as recorded, costs from the model); it has no bucket cap, so only "
                "world sizes are predicted")
    if policy == "sharded":
        return (f"{variant}: one reduce-scatter per bucket during backward, then one "
                "all-gather per bucket after the optimizer step (on gloo a reduce-scatter "
                "costs an all-reduce)")
    if policy == "bucketed":
        extra = "; ZeroRedundancyOptimizer's broadcasts replayed as recorded" \
            if variant == "pytorch_zero1" else ""
        return f"{variant}: bucketed all-reduce as recorded{extra}"
    return (f"{variant}: {policy} per-parameter all-reduces as recorded; what-if rows are "
            f"{WHAT_IF_VARIANT}")


