"""The work of ``ddpprof simulate`` (see the package's docstring): a run analyzed, its steps
replayed with each edit, the figures gathered."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..analysis import AnalysisOptions, analyze_run
from ..analysis.options import REPLAYED_STEPS
from ..analysis.results import RunResult
from ..core.errors import UsageError
from ..graph.build import join_steps
from ..graph.contended import Tax
from ..graph.edit import WorldSize
from ..graph.model import CycleError, StepGraph
from ..graph.whatif import Edit, check_rank_edits, overlap_pct
from ..metrics.cost import CostModel
from ..metrics.middle import middle_index
from ..run.discover import discover
from ..run.manifest import INCOMPLETE, RunManifest, effective_status, status_detail
from ..trace.loader import _collector_paused
from ..variants import VariantInfo, variant_info
from . import output, sources
from .results import Measured, Prediction, Simulation
from .sources import Costs
from .steps import CapEdit, Step


def simulate_run(run_path: Path, sizes_mib: list[float], world_sizes: list[int] | None,
                 bandwidth_gbps: float | None = None, latency_us: float | None = None,
                 measured_file: Path | None = None, calibration_file: Path | None = None,
                 ready_order: bool = False, keep_last_step: bool = False,
                 on_note: Callable[[str], None] | None = None,
                 edits: Sequence[Edit] = (),
                 jobs: int | None = None, shared_cores: int | None = None) -> Simulation:
    """``ddpprof simulate``: analyze ``run_path`` over ``analyze``'s window (the last
    ProfilerStep dropped unless ``keep_last_step``) with its steps' graphs
    (:func:`replay_inputs`), and predict its own configuration and every (world size, cap)
    combination (:func:`simulate`). ``shared_cores``: every rank shares that many cores (one
    CPU host; 0: none; None: as the run says, :func:`cores_shared`)."""
    found = replay_inputs(run_path, bandwidth_gbps, latency_us, measured_file,
                          calibration_file, keep_last_step, on_note, edits, jobs)
    return simulate(run_path, found.run, sizes_mib, world_sizes, found.costs, ready_order,
                    found.sweep_points, tuple(edits), shared_cores=shared_cores)


@dataclass(frozen=True)
class ReplayInputs:
    """What a replay of a recorded run starts from: the run analyzed with its steps' graphs
    (with ``options``), the cost model's sources, and a sweep's measured step per cap (ms)."""

    run: RunResult
    options: AnalysisOptions
    costs: Costs
    sweep_points: dict[float, float]


def replay_inputs(run_path: Path, bandwidth_gbps: float | None = None,
                  latency_us: float | None = None, measured_file: Path | None = None,
                  calibration_file: Path | None = None, keep_last_step: bool = False,
                  on_note: Callable[[str], None] | None = None, edits: Sequence[Edit] = (),
                  jobs: int | None = None) -> ReplayInputs:
    """The one complete run at ``run_path``, checked replayable and analyzed with its steps'
    graphs, and the cost model and measured points ``simulate``'s options name; every
    problem is a ``UsageError`` naming the path or the option."""
    if bandwidth_gbps is not None and (bandwidth_gbps <= 0 or (latency_us or 0) < 0):
        raise UsageError("--bandwidth-gbps must be positive and --latency-us not negative")
    calibration = sources.given_calibration(calibration_file)
    found = discover([run_path])
    if len(found) > 1:
        names = ", ".join(r.name for r in found[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageError(f"{run_path}: holds {len(found)} runs ({names}); simulate replays "
                         "one: give its folder")
    run = found[0]
    if run.error:
        raise UsageError(run.error)
    if on_note is not None:
        for text in run.notes:    # files skipped, say
            on_note(text)
    if (status := effective_status(run.manifest)) in INCOMPLETE:
        raise UsageError(f"{run.folder}: the run is {status} ({status_detail(run.manifest)}); "
                         "simulate calibrates only from a complete run")
    check_replayable(run.manifest, run.folder)
    options = AnalysisOptions(keep_last_step=keep_last_step, step_graphs=True, jobs=jobs,
                              max_graph_steps=REPLAYED_STEPS)
    analyzed = analyze_run(run, options)
    if len(analyzed) != 1:
        raise UsageError(f"{run.folder}: its {len(analyzed)} traces carry no rank, so they are "
                         "not one run's ranks; give one trace, or a run folder")
    check_rank_edits(edits, (r.rank for r in analyzed[0].ranks), f"run {run.folder}")
    sweep_points = output.measured_steps(measured_file, run.manifest) if measured_file else {}
    return ReplayInputs(analyzed[0], options, Costs(bandwidth_gbps, latency_us, calibration),
                        sweep_points)


def check_replayable(manifest: RunManifest, where: object) -> None:
    """Refuse a run of a tensor-parallel variant (``VariantInfo.tensor_parallel``): its
    collectives go over several process groups, and the replay re-times one."""
    variant = manifest.config.variant if manifest.config else None
    info = variant_info(variant)
    if info is not None and info.tensor_parallel:
        raise UsageError(f"{where}: simulate replays the collectives of one process group; "
                         f"{variant} communicates over several (its mesh's dimensions)")


@_collector_paused()     # (see ``graph.build.rank_steps``)
def simulate(run_path: Path, run: RunResult, sizes_mib: list[float],
             world_sizes: list[int] | None, costs: Costs, ready_order: bool = False,
             sweep_points: dict[float, float] | None = None, edits: tuple[Edit, ...] = (),
             median_step_only: bool = False, shared_cores: int | None = None) -> Simulation:
    """Predict the run's own configuration and every (world size, cap) combination from
    ``run``, analyzed with its steps' graphs (``AnalysisOptions.step_graphs``).
    ``world_sizes``: by default the run's own, 2, 4 and 8; ``[]`` the run's own only.
    ``median_step_only``: replay the step of median recorded length alone (the findings'
    advice), not every step. ``shared_cores``: every rank, at any world size, shares that many
    cores (one CPU host: ``graph.edit.WorldSize.crowding``; 0: none; None: as the run says,
    :func:`cores_shared`)."""
    manifest, config = run.manifest, run.manifest.config
    check_replayable(manifest, run_path)
    joined, notes = join_steps({r.rank: r.graph_steps or [] for r in run.ranks})
    graphs = [g for g in joined if _acyclic(g, notes)]
    if not graphs:
        raise UsageError(f"{run.folder}: nothing to replay (no analyzed step that every rank "
                         "has" + (", whose collectives match across ranks)" if joined else ")"))
    first = run.ranks[0]
    world = first.world_size or (config.world_size if config else None) or len(run.ranks)
    backend = first.backend or (config.backend if config else None)
    variant = config.variant if config else None
    info = variant_info(variant)
    run_tax = Tax.measured(run.overlap_tax, notes)
    steps = [Step.of(g, run_tax) for g in graphs]
    model, calibration, missing = None, None, "the run has no collectives"
    if any(g.collectives for g in graphs):
        try:
            model, calibration = sources.cost_model(
                run_path, lambda: [t for s in steps for t in s.transfers], world, backend,
                costs, notes)
        except UsageError as error:
            missing = str(error)
    if model is None:   # what needs one is not predicted; the rest is answered
        notes.append("other world sizes and bucket caps: not predicted: " + missing)
        world_sizes, sizes_mib = [], []
        model = CostModel(0.0, math.inf, None, 0, f"none: {missing}")
    tax, tax_source = run_tax, "measured on the run"
    if calibration is not None and calibration.overlap_tax is not None:
        tax = Tax.measured(calibration.overlap_tax.tax, [])
        tax_source = f"from the calibration (measured on {calibration.overlap_tax.run})"
        steps = [Step.of(g, tax) for g in graphs]
    run_level = _level(steps, model, world, backend)
    grad_accum = (config.grad_accum if config else None) or 1
    steps = [s.ready(model, world, backend, run_level, manifest.buckets, grad_accum, notes)
             for s in steps]
    if median_step_only:
        steps = [sorted(steps, key=lambda s: s.recorded_us)[middle_index(len(steps))]]
    ratio = _overhead(manifest, notes)
    notes.append(_scope(info, variant, bool(sizes_mib)))
    sharded = info is not None and info.sharded
    threads = (manifest.measured.threads_per_rank if manifest.measured else None) or 1
    shared_cores = cores_shared(manifest, shared_cores, threads, notes)

    def resized(n: int) -> WorldSize | None:
        return None if n == world else WorldSize(n, world, sharded, shared_cores, threads)

    # at the run's own world size the one-rank replay is the recorded one (remembered)
    single = [o.step_us for s in steps if (o := s.replay(edits, None, resized(1), model,
                                                         backend))]
    predictions = []
    for n, cap, recorded in _configurations(info, config.bucket_cap_mib if config else None,
                                            sizes_mib, world_sizes, world):
        capped = None
        if not recorded and info is not None and cap is not None:
            capped = CapEdit(cap, info.gradient_collective,
                             info.gradient_sync == "sharded_buckets", ready_order)
        outcomes = [o for s in steps
                    if (o := s.replay(edits, capped, resized(n), model, backend))]
        if not outcomes:
            notes.append(f"world size {n}, cap {cap}: not predicted: the edited steps' "
                         "dependencies make a cycle")
            continue
        step_us = statistics.median(o.step_us for o in outcomes) / ratio
        buckets = [o.buckets for o in outcomes if o.buckets is not None]
        predictions.append(Prediction(
            variant=variant or "as recorded", world_size=n, bucket_cap_mib=cap,
            buckets=int(statistics.median(buckets)) if buckets else 0,
            step_ms=step_us / 1e3,
            # exposed communication and overlap over the replayed steps as ``analyze``
            # measures them over its window (``_measured``): per step on average, and per
            # rank over all the steps, then the ranks' mean
            exposed_comm_ms_per_step=statistics.fmean(o.exposed_us for o in outcomes) / ratio
            / 1e3,
            overlap_pct=overlap_pct(outcomes),
            efficiency=statistics.median(single) / ratio / (n * step_us)
            if step_us and single else 0.0,
            recorded=recorded))
    predictions.sort(key=lambda p: (p.world_size, p.bucket_cap_mib is None,
                                    p.bucket_cap_mib or 0))
    measured = _measured(run, manifest)
    if info is None and sizes_mib:
        notes.append("--bucket-cap-mib: not applied: no bucket cap is known to re-bucket (no "
                     "run.json naming a bucketed variant beside the trace)")
    if edits:   # the run's own row is then a prediction of something else
        measured = Measured(None, measured.overlap_pct, measured.exposed_comm_ms_per_step,
                            measured.step_source)
    simulation = Simulation(str(run_path), variant, first.path, world, [g.step for g in graphs],
                            model, tax, tax_source, run_level, ratio, predictions, measured,
                            edits=[e.label for e in edits], notes=list(dict.fromkeys(notes)))
    simulation.rows = output.rows(simulation, sweep_points or {})
    return simulation


def cores_shared(manifest: RunManifest, asked: int | None, threads: int,
                 notes: list[str]) -> int | None:
    """The cores every rank (of ``threads`` threads) shares at any world size
    (``graph.edit.WorldSize.crowding``): ``asked`` (0: none, each rank brings its own device
    or cores); by default, for a run whose ranks were CPU processes on one host, the cores
    they could run on there (run.json's ``host_cores``), else none. A note says which."""
    measured, config = manifest.measured, manifest.config
    recorded = None
    if measured and measured.devices and config and config.nnodes == 1 and all(
            d.startswith("cpu") for d in measured.devices):
        recorded = measured.host_cores
    cores = recorded if asked is None else asked or None
    why = ("its ranks ran as CPU processes on one host (run.json), so at any world size "
           if asked is None and cores else "")
    if cores:
        notes.append(f"world sizes: {why}every rank shares {cores} cores with the others "
                     f"({threads} thread(s) a rank): where they outnumber them, all work slows "
                     "in proportion" + (" (--shared-cores 0: each rank brings its own)"
                                        if why else ""))
    else:
        notes.append("world sizes: each rank brings its own device or cores" + (
            "" if asked == 0 else " (--shared-cores C for ranks sharing C cores of one host)"))
    return cores


def _acyclic(graph: StepGraph, notes: list[str]) -> bool:
    try:
        graph.columns()
    except CycleError as error:
        notes.append(f"{graph.step}: not replayed: {error} (collectives matched inconsistently "
                     "across ranks?)")
        return False
    return True


def _level(steps: list[Step], model: CostModel, world: int, backend: str | None) -> float:
    """The run's cost level: all its steps' recorded transfers over the model's time."""
    transfers = [t for s in steps for t in s.transfers]
    modelled = sum(model.time_us(t.size_bytes, world, t.kind, backend) for t in transfers)
    measured = sum(t.time_us for t in transfers)
    return measured / modelled if modelled > 0 and measured > 0 else 1.0


def _overhead(manifest: RunManifest, notes: list[str]) -> float:
    """The run's median profiled step over its median unprofiled one (1 when unknown)."""
    overhead = manifest.throughput.profiler_overhead_ratio if manifest.throughput else None
    if overhead is not None and overhead < 1:
        notes.append(f"profiler overhead: measured {overhead:.3f}x: the profiled steps ran "
                     "faster than the unprofiled ones after them (the machine's load changed); "
                     "divided out as measured")
    return overhead if overhead and overhead > 0 else 1.0


def _measured(run: RunResult, manifest: RunManifest) -> Measured:
    """The run's median unprofiled step (run.json) and, as ``analyze`` measures them over its
    ranks, overlap % and exposed communication per step."""
    ranks = run.ranks
    overlaps = [r.breakdown.overlap_pct for r in ranks if r.breakdown.overlap_pct is not None]
    exposed = statistics.fmean(r.breakdown.exposed_comm_us / 1e3 / max(r.steps, 1)
                               for r in ranks)
    if manifest.throughput and manifest.throughput.median_step_s:
        return Measured(manifest.throughput.median_step_s * 1e3,
                        statistics.fmean(overlaps) if overlaps else None, exposed)
    return Measured(statistics.fmean(r.breakdown.window_us / 1e3 / max(r.steps, 1)
                                     for r in ranks),
                    statistics.fmean(overlaps) if overlaps else None, exposed,
                    "the trace's analyzed steps")


def _configurations(info: VariantInfo | None, own_cap: float | None, caps: list[float],
                    world_sizes: list[int] | None, world: int,
                    ) -> Iterator[tuple[int, float | None, bool]]:
    """(world size, cap, is the run's own) of every row: the run's own configuration at each
    world size (a variant that is not distributed: at its own only, whichever were asked),
    then for a bucketed variant the other caps."""
    worlds = sorted({world, 2, 4, 8}) if world_sizes is None else world_sizes or [world]
    if info is not None and not info.distributed:   # whatever world sizes were asked
        worlds = [world]
    capped = info is not None and info.gradient_sync in ("buckets", "sharded_buckets")
    for n in worlds:
        yield n, own_cap if capped else None, True
        if capped and n > 1:
            for cap in caps:
                if cap != own_cap:
                    yield n, cap, False


def _scope(info: VariantInfo | None, recorded: str | None, caps_asked: bool) -> str:
    """What is and is not modelled for the run's variant, in one line."""
    if info is None:
        return (f"variant {recorded or 'unknown'}: its steps are replayed as recorded; world "
                "sizes only (no bucket cap is known to re-bucket)")
    if not info.distributed:
        return f"{info.name}: no collectives; its own configuration only"
    if info.gradient_sync in ("buckets", "sharded_buckets"):
        gathers = ("; and one all-gather per bucket after the optimizer"
                   if info.gradient_sync == "sharded_buckets" else "")
        collective = info.gradient_collective.replace("_", "-")
        return (f"{info.name}: at another cap its {collective}s are re-bucketed (launched as "
                f"their last gradient is ready, waited where it waited){gathers}")
    return (f"{info.name}: its gradients are not bucketed, so "
            f"{'no cap applies; ' if caps_asked else ''}world sizes only")
