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

from ..analysis.options import LastStep
from ..errors import UsageError
from ..manifest import INCOMPLETE, BucketRecord, RunManifest, effective_status, status_detail
from ..trace.classify import GRAD_READY, step_names
from ..trace.discover import discover
from ..trace.loader import load
from ..variants import VARIANTS, VariantInfo, variant_info
from . import output, sources
from .advice import ADVICE_CAPS_MB, cap_advice, cap_advice_for_runs
from .cost import CostModel, fit_cost
from .output import summary_lines, to_json_document, verdict_lines
from .program import TraceModel, read_trace
from .replay import Outcome, Policy, replay
from .results import WHAT_IF_VARIANT, Measured, Prediction, Simulation, best, median_error_pct
from .sources import Costs

__all__ = ["ADVICE_CAPS_MB", "CostModel", "Costs", "Prediction", "Simulation", "best",
           "cap_advice", "cap_advice_for_runs", "fit_cost", "median_error_pct",
           "simulate", "simulate_run", "summary_lines", "to_json_document", "verdict_lines"]


def registration_positions(grads: list[int], recorded: list[BucketRecord] | None
                           ) -> tuple[list[int], list[str | None] | None, str | None]:
    """Each gradient's (ready order) position in the model's registration order, and its
    dtype, from run.json's ``buckets``: gradients of one size are matched in ready order to
    that size's parameters in reverse registration order. Without them (or when the sizes
    disagree), the registration order is taken as the reverse of the ready order and the
    dtypes as unknown (one), and a note says so."""
    fallback = list(range(len(grads)))[::-1]
    if not recorded:
        return fallback, None, ("registration order: run.json names no buckets, so it is "
                                "taken as the reverse of the order gradients became ready")
    params = sorted(((index, size, dtype) for b in recorded for index, size, dtype in zip(
        b.param_index, b.param_bytes, b.param_dtypes or [None] * len(b.param_index),
        strict=True)), reverse=True, key=lambda p: p[0])
    if sorted(size for _, size, _ in params) != sorted(grads):
        return fallback, None, ("registration order: the trace's gradients do not match "
                                "run.json's parameters by size, so it is taken as the reverse "
                                "of the ready order")
    by_size: dict[int, list[tuple[int, str | None]]] = {}
    for index, size, dtype in params:
        by_size.setdefault(size, []).append((index, dtype))
    matched = [by_size[size].pop(0) for size in grads]
    dtypes = [dtype for _, dtype in matched]
    return [index for index, _ in matched], dtypes if any(dtypes) else None, None


def simulate_run(run_path: Path, sizes_mb: list[float], world_sizes: list[int] | None,
                 bandwidth_gbps: float | None = None, latency_us: float | None = None,
                 measured_file: Path | None = None, calibration_file: Path | None = None,
                 ready_order: bool = False, keep_last_step: bool = False,
                 allow_sweep: bool = True, on_note=None) -> Simulation:
    """``ddpprof simulate``: calibrate on ``run_path``'s rank 0 trace, over ``analyze``'s
    window (the last ProfilerStep dropped unless ``keep_last_step``), and predict its own
    configuration and every (world size, cap) combination (:func:`simulate`). ``allow_sweep``:
    measure all-reduce on this machine when no cost model can be had otherwise."""
    if bandwidth_gbps is not None and (bandwidth_gbps <= 0 or (latency_us or 0) < 0):
        raise UsageError("--bandwidth-gbps must be positive and --latency-us not negative")
    calibration = sources.given_calibration(calibration_file)
    run = discover([run_path])[0]
    if run.error:
        raise UsageError(run.error)
    for text in run.notes if on_note is not None else ():    # files skipped, say
        on_note(text)
    manifest = run.manifest
    if (status := effective_status(manifest)) in INCOMPLETE:
        raise UsageError(f"{run.folder}: the run is {status} ({status_detail(manifest)}); "
                         "simulate calibrates only from a complete run")
    check_replayable(manifest, run.folder)
    trace = load(run.traces[0], workers=1)
    last_step = LastStep.decide(step_names(trace), keep_last_step)
    config = manifest.config
    model = read_trace(trace, (config.grad_accum if config else None) or 1, last_step)
    sweep_points = output.measured_steps(measured_file, manifest) if measured_file else {}
    return simulate(run_path, manifest, model, str(run.traces[0]), sizes_mb, world_sizes,
                    Costs(bandwidth_gbps, latency_us, calibration, allow_sweep, on_note=on_note),
                    ready_order, sweep_points)


def check_replayable(manifest: RunManifest, where: object) -> None:
    """Refuse a run whose variant the registry says the replay has no model of
    (``VariantInfo.replay`` ``none``: its collectives go over several process groups)."""
    variant = manifest.config.variant if manifest.config else None
    info = variant_info(variant)
    if info is not None and info.replay == "none":
        raise UsageError(f"{where}: simulate replays the collectives of one process group; "
                         f"{variant} communicates over several (its mesh's dimensions)")


def simulate(run_path: Path, manifest: RunManifest, model: TraceModel, trace_name: str,
             sizes_mb: list[float], world_sizes: list[int] | None, costs: Costs,
             ready_order: bool = False, sweep_points: dict[float, float] | None = None
             ) -> Simulation:
    """Predict the run's own configuration and every (world size, cap) combination from
    ``model``, the simulator's reading of its rank 0 trace (``program.read_trace``), and its
    manifest. ``world_sizes``: by default the run's own, 2, 4 and 8; ``[]`` the run's own
    only. ``sweep_points``: measured steps by cap (``--measured``)."""
    config = manifest.config   # None: not a run ddpprof recorded
    check_replayable(manifest, run_path)
    if not model.programs:
        missing = "ProfilerStep" if model.notes else \
            f"{GRAD_READY} spans with shapes: record with record_shapes"
        raise UsageError(f"{trace_name}: nothing to replay (no {missing})")
    world = model.world_size or (config.world_size if config else 1)
    # what the trace says the run used, as analyze reports it (a hand-written run.json may
    # leave the configured backend at "auto")
    backend = model.backend or (config.backend if config else None)
    notes = list(model.notes)
    variant = config.variant if config else None
    info = variant_info(variant)
    recorded_here = config is not None and config.nnodes == 1
    cost = sources.cost_model(run_path, model, world, backend, costs, notes, recorded_here)
    contention, per_step = sources.contention_factors(model, cost, world, backend, notes)
    grads = [size for _, size in model.programs[0].grads]
    registration, dtypes, note = registration_positions(grads, manifest.buckets)
    if note:
        notes.append(note)
    overhead = manifest.throughput.profiler_overhead_ratio if manifest.throughput else None
    ratio = max(overhead or 1.0, 1.0)
    if overhead is not None and overhead < 1:
        notes.append(f"profiler overhead: measured {overhead:.3f}x (profiled steps faster than "
                     "unprofiled ones: noise); taken as 1")
    notes.append(_scope(info, variant))
    sharded = info is not None and info.sharded
    single_us = statistics.median(
        (p.pre_us + p.backward_us + p.sync_us) * world + p.post_us * (world if sharded else 1)
        for p in model.programs) / ratio
    predictions = []
    for label, n, policy, cap, recorded in _configurations(
            info, config.bucket_cap_mb if config else None, sizes_mb,
            sorted({world, 2, 4, 8}) if world_sizes is None else world_sizes or [world],
            world, ready_order):
        scale = world / n
        outcomes = [replay(p, policy, cost, step_contention, n, backend, registration, scale,
                           scale if sharded else 1.0, dtypes)
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
    simulation = Simulation(str(run_path), variant, trace_name, world, model.programs,
                            cost, contention, ratio, predictions, measured, notes=notes)
    simulation.rows = output.rows(simulation, sweep_points or {})
    return simulation


def _configurations(info: VariantInfo | None, own_cap: float | None, caps: list[float],
                    worlds: list[int], world: int, ready_order: bool):
    """(label, world size, policy, cap, is the run's own) of every row: the run's own
    configuration at each world size (a variant that is not distributed: at its own only),
    then the what-if caps, replayed as the variant itself where it has buckets, else as
    ``bucket_ddp_async`` (not for a sharded variant without buckets: nothing compares)."""
    capped = info is not None and info.bucketed
    what_if = info if info is not None and capped else VARIANTS[WHAT_IF_VARIANT]
    for n in worlds:
        if info is None:               # a trace of no known variant: its own collectives
            yield "as recorded", n, Policy("recorded"), None, True
        elif not info.distributed:
            if n == world:
                yield info.name, n, Policy("recorded"), None, True
        else:
            yield (info.name, n, Policy.of(info, own_cap, ready_order),
                   own_cap if capped else None, True)
        if (info is not None and info.sharded and not capped) or n == 1:
            continue
        for cap in caps:
            if not (capped and cap == own_cap):
                yield what_if.name, n, Policy.of(what_if, cap, ready_order), cap, False


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


def _scope(info: VariantInfo | None, recorded: str | None) -> str:
    """What is and is not modelled for the run's variant, in one line."""
    if info is None:
        return (f"variant {recorded or 'unknown'}: its own collectives are replayed where they "
                f"were launched; what-if rows are {WHAT_IF_VARIANT}")
    if not info.distributed:
        return (f"{info.name}: no collectives; what-if rows are {WHAT_IF_VARIANT} on N ranks "
                "(each rank's compute at 1/N of the batch; the cores a rank gets are not "
                "modelled)")
    collective = info.gradient_collective.replace("_", "-")
    if info.replay == "recorded":
        no_cap = "; it has no bucket cap, so only world sizes are predicted" \
            if info.sharded and not info.bucketed else ""
        return (f"{info.name}: its collectives are replayed where they were issued (sizes as "
                f"recorded, costs from the model){no_cap}")
    if info.replay == "sharded":
        return (f"{info.name}: one {collective} per bucket during backward, then one "
                "all-gather per bucket after the optimizer step (on gloo a reduce-scatter "
                "costs an all-reduce)")
    if info.replay == "bucketed":
        others = "; its collectives after the optimizer step are replayed as recorded" \
            if info.sharded else ""
        return f"{info.name}: bucketed {collective} as recorded{others}"
    return (f"{info.name}: {info.replay} per-parameter {collective}s as recorded; what-if rows "
            f"are {WHAT_IF_VARIANT}")
