"""``ddpprof analyze``: from trace files to per-rank and per-run metrics.

This module does the I/O (loading ranks, in parallel) and hands arrays to ``ddpprof.metrics``;
the definitions themselves live there and in ``ddpprof.trace.classify``.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .errors import UsageError
from .metrics import intervals as iv
from .metrics.breakdown import Breakdown, device_breakdown, host_breakdown
from .metrics.comm import CollectiveStats, collective_stats
from .trace import classify
from .trace.classify import Kind
from .trace.discover import RunInput, discover, read_manifest
from .trace.loader import RankTrace, TraceError, load

SCHEMA_VERSION = 1

if TYPE_CHECKING:
    import pandas


@dataclass
class RankResult:
    path: str
    rank: int
    world_size: int | None
    backend: str | None
    kind: str                       # "gpu" or "cpu"
    steps: int                      # ProfilerSteps analyzed
    total_steps: int                # ProfilerSteps in the trace
    breakdown: Breakdown
    collectives: dict[str, CollectiveStats]
    per_step: list[dict[str, Any]] = field(default_factory=list)
    timeline: dict[str, Any] | None = None  # one representative step's lanes (for reports)


@dataclass
class RunResult:
    name: str
    folder: str
    manifest: dict[str, Any]
    ranks: list[RankResult]
    last_step: str                  # "dropped", "kept", or "only one step"
    missing_ranks: list[int]


@dataclass
class Analysis:
    runs: list[RunResult]
    errors: list[dict[str, str]]    # {"run", "error"} for runs that could not be analyzed


class _Metrics(NamedTuple):
    breakdown: Breakdown
    collectives: dict[str, CollectiveStats]
    per_step: list[dict[str, Any]]
    kind: str
    timeline: dict[str, Any] | None


def step_names_in(trace: RankTrace) -> set[str]:
    index, _ = classify.profiler_steps(trace)
    return {trace.names[i] for i in trace.name_id[index]}


def analyze_trace(trace: RankTrace, drop_last_step: bool, per_step: bool = False,
                  timeline: bool = False) -> RankResult:
    """All metrics of one rank (pure: no I/O); with ``timeline``, also the compute and comm
    lanes of its middle analyzed step."""
    step_index, _ = classify.profiler_steps(trace)
    if step_index.size == 0:
        raise TraceError(trace.path, "no ProfilerStep#N spans (record with a profiler schedule "
                                     "and call profiler.step())")
    analyzed = step_index[:-1] if drop_last_step else step_index
    if classify.has_device_events(trace):
        metrics = _device_metrics(trace, drop_last_step, analyzed, per_step, timeline)
    else:
        metrics = _host_metrics(trace, analyzed, per_step, timeline)
    if metrics.breakdown.window_us <= 0:
        raise TraceError(trace.path, "nothing in the analyzed window (no events between the "
                                     "first and the last analyzed ProfilerStep)")
    return RankResult(path=str(trace.path), rank=trace.rank, world_size=trace.world_size,
                      backend=trace.backend, kind=metrics.kind, steps=int(analyzed.size),
                      total_steps=int(step_index.size), breakdown=metrics.breakdown,
                      collectives=metrics.collectives, per_step=metrics.per_step,
                      timeline=metrics.timeline)


def _collectives(trace: RankTrace, chosen: np.ndarray) -> dict[str, CollectiveStats]:
    names, sizes, groups = [], [], []
    for i in np.flatnonzero(chosen):
        args = trace.comm_args.get(int(i))
        names.append(classify.collective_of(trace.names[trace.name_id[i]],
                                            args.collective if args else None))
        sizes.append(args.bytes_per_call if args else None)
        groups.append(args.group_size if args else None)
    group_size = next((g for g in groups if g), None) or trace.world_size
    durations = (trace.end_us - trace.start_us)[chosen]
    return collective_stats(names, durations, sizes, group_size)


def _device_metrics(trace: RankTrace, drop_last_step: bool, steps: np.ndarray, per_step: bool,
                    timeline: bool):
    selected = classify.hta_device_events(trace, drop_last_step)
    kinds = classify.event_kinds(trace)
    start, end = trace.start_us[selected], trace.end_us[selected]
    is_compute, is_comm = kinds[selected] == Kind.COMPUTE, kinds[selected] == Kind.COMMUNICATION
    breakdown = device_breakdown(start, end, is_compute, is_comm)
    collectives = _collectives(trace, selected & (kinds == Kind.COMMUNICATION))
    rows, lanes = [], None
    if per_step or timeline:
        launched_in = _launch_step(trace, steps)[selected]
        for position, step in enumerate(steps):
            mine = launched_in == position
            if per_step:
                rows.append(_step_row(trace, step, device_breakdown(
                    start[mine], end[mine], is_compute[mine], is_comm[mine])))
            if timeline and position == steps.size // 2 and mine.any():
                origin, finish = start[mine].min(), end[mine].max()
                comm_index = np.flatnonzero(selected)[mine & is_comm]
                lanes = _lanes(trace, step, origin, finish,
                               iv.union(start[mine & is_compute], end[mine & is_compute]),
                               comm_index)
    return _Metrics(breakdown, collectives, rows, "gpu", lanes)


def _launch_step(trace: RankTrace, steps: np.ndarray) -> np.ndarray:
    """For every event, the position in ``steps`` of the step its launching host event started
    in (device events are matched to host events by correlation id), else -1."""
    if steps.size == 0:
        return np.full(trace.n_events, -1)
    host = (trace.stream == -1) & (trace.correlation >= 0)
    host_corr = trace.correlation[host]
    order = np.argsort(host_corr, kind="stable")
    host_corr, host_start = host_corr[order], trace.start_us[host][order]
    where = np.clip(np.searchsorted(host_corr, trace.correlation), 0, max(host_corr.size - 1, 0))
    found = host_corr.size > 0
    matched = found & (host_corr[where] == trace.correlation) if found else np.zeros(
        trace.n_events, dtype=bool)
    launch = np.where(matched, host_start[where] if found else 0.0, np.nan)
    step_start, step_end = trace.start_us[steps], trace.end_us[steps]
    position = np.searchsorted(step_start, launch, side="right") - 1
    inside = (position >= 0) & (launch < step_end[np.clip(position, 0, None)])
    return np.where(inside & ~np.isnan(launch), position, -1)


def host_lanes(trace: RankTrace):
    """The compute lane's spans, the wait spans, and the comm lane, as masks."""
    categories = np.array([c in ("cpu_op", "user_annotation") for c in trace.category] or [0])
    host_span = categories[trace.category_id].astype(bool) & (trace.stream == -1)
    is_cpu_op = np.array([c == "cpu_op" for c in trace.category] or [0])[trace.category_id]
    training_threads = np.unique(trace.thread_id[is_cpu_op.astype(bool)])
    on_training = np.isin(trace.thread_id, training_threads)
    is_step = classify.per_name(trace, lambda n: bool(classify.PROFILER_STEP.match(n)))
    is_comm_name = classify.per_name(trace, lambda n: bool(classify.HOST_COMM.search(n)))
    is_collective = classify.per_name(
        trace, lambda n: bool(classify.BACKEND_COLLECTIVE.match(n)))
    waits = host_span & on_training & is_comm_name.astype(bool)
    work = host_span & on_training & ~is_step.astype(bool) & ~waits
    comm = host_span & ~on_training & is_collective.astype(bool)
    return work, waits, comm


def _host_metrics(trace: RankTrace, steps: np.ndarray, per_step: bool, timeline: bool):
    work, waits, comm = host_lanes(trace)
    s, e = trace.start_us, trace.end_us
    wait_set = iv.union(s[waits], e[waits])
    compute_set = iv.subtract(iv.union(s[work], e[work]), wait_set)
    comm_set = iv.union(s[comm], e[comm])
    window = iv.union(s[steps], e[steps])
    activity = iv.merge(iv.merge(compute_set, wait_set), comm_set)
    if window[0].size == 0 or iv.length(iv.intersect(activity, window)) == 0:
        raise TraceError(trace.path, "nothing in the analyzed window (no events inside the "
                                     "analyzed ProfilerSteps)")
    breakdown = host_breakdown(window, compute_set, comm_set, wait_set)
    in_window = comm & (s >= window[0][0]) & (s < window[1][-1])
    collectives = _collectives(trace, in_window)
    rows = [_step_row(trace, step, host_breakdown(
                iv.union(s[[step]], e[[step]]), compute_set, comm_set, wait_set))
            for step in steps] if per_step else []
    lanes = None
    if timeline and steps.size:
        step = steps[steps.size // 2]
        lo, hi = s[step], e[step]
        inside = np.flatnonzero(comm & (s < hi) & (e > lo))
        step_compute = iv.intersect(compute_set, iv.union(s[[step]], e[[step]]))
        lanes = _lanes(trace, step, lo, hi, step_compute, inside)
    return _Metrics(breakdown, collectives, rows, "cpu", lanes)


def _lanes(trace: RankTrace, step: int, origin: float, finish: float, compute: iv.Intervals,
           comm_index: np.ndarray) -> dict[str, Any]:
    """One step as a picture: compute intervals and one bar per collective, in µs from the
    step's start."""
    bars = []
    for i in comm_index:
        args = trace.comm_args.get(int(i))
        bars.append({"start": float(max(trace.start_us[i], origin) - origin),
                     "end": float(min(trace.end_us[i], finish) - origin),
                     "name": classify.collective_of(trace.names[trace.name_id[i]],
                                                    args.collective if args else None),
                     "bytes": args.bytes_per_call if args else None})
    return {"step": trace.names[trace.name_id[step]], "window_us": float(finish - origin),
            "compute": np.stack([compute[0] - origin, compute[1] - origin], axis=1).tolist(),
            "comm": bars}


def _step_row(trace: RankTrace, step: int, breakdown: Breakdown) -> dict[str, Any]:
    return {"step": trace.names[trace.name_id[step]], **breakdown_fields(breakdown)}


def breakdown_fields(b: Breakdown) -> dict[str, Any]:
    return {"window_us": b.window_us, "compute_us": b.compute_us,
            "non_compute_us": b.non_compute_us, "idle_us": b.idle_us, "comm_us": b.comm_us,
            "exposed_comm_us": b.exposed_comm_us, "compute_pct": b.compute_pct,
            "non_compute_pct": b.non_compute_pct, "idle_pct": b.idle_pct,
            "overlap_pct": b.overlap_pct, "comm_overhead_pct": b.comm_overhead_pct}


def _load_and_analyze(path: Path, drop_last_step: bool | None, per_step: bool,
                      timeline: bool = False, decode_workers: int = 1
                      ) -> tuple[RankResult | None, set[str], TraceError | None]:
    """Load and analyze one rank; ``drop_last_step=None`` decides from this rank's own steps."""
    try:
        trace = load(path, workers=decode_workers)
        names = step_names_in(trace)
        drop = len(names) >= 2 if drop_last_step is None else drop_last_step
        return analyze_trace(trace, drop, per_step, timeline), names, None
    except TraceError as error:
        return None, set(), error


def analyze_run(run: RunInput, keep_last_step: bool = False, per_step: bool = False,
                jobs: int | None = None, engine: str = "native",
                timeline: bool = False) -> RunResult:
    """Load every rank (in parallel, at most ``jobs`` processes, so memory stays bounded by
    ``jobs`` traces) and analyze it."""
    manifest = read_manifest(run.folder)
    outcomes = _map_ranks(run.traces, False if keep_last_step else None, per_step, timeline, jobs)
    # HTA drops the last step when the run's traces name at least two distinct ProfilerSteps
    # between them; a rank that decided otherwise from its own steps alone is redone.
    names = set().union(*(step_names for _, step_names, _ in outcomes))
    drop = not keep_last_step and len(names) >= 2
    results = []
    for path, (result, step_names, _) in zip(run.traces, outcomes, strict=True):
        if result is not None and not keep_last_step and (len(step_names) >= 2) != drop:
            result = _raise_error(_load_and_analyze(path, drop, per_step, timeline))
        results.append(result)
    seen: dict[int, str] = {}
    for result in results:
        if result.rank in seen:
            raise TraceError(result.path, f"duplicate rank {result.rank} "
                                          f"(also in {seen[result.rank]})")
        seen[result.rank] = result.path
    sized = [r for r in results if r.world_size is not None]
    for other in sized[1:]:
        if other.world_size != sized[0].world_size:
            raise TraceError(other.path, f"world size {other.world_size}, but "
                                         f"{sized[0].path} says {sized[0].world_size} "
                                         "(mixed world sizes in one run)")
    world = sized[0].world_size if sized else None
    missing = sorted(set(range(world)) - set(seen)) if world else []
    last_step = "dropped" if drop else ("kept" if keep_last_step else "only one step")
    if engine == "hta":
        results = _with_hta(run, results, keep_last_step)
    return RunResult(run.name, str(run.folder), manifest,
                     sorted(results, key=lambda r: r.rank), last_step, missing)


def _raise_error(outcome: tuple[RankResult | None, set[str], TraceError | None]) -> RankResult:
    result, _, error = outcome
    if error:
        raise error
    assert result is not None
    return result


def _with_hta(run: RunInput, results: list[RankResult], keep_last_step: bool
              ) -> list[RankResult]:
    from dataclasses import replace

    from .hta_engine import hta_breakdowns, with_native_comm

    if any(r.kind != "gpu" for r in results):
        raise TraceError(run.folder, "--engine hta needs GPU traces (HTA cannot analyze "
                                     "CPU-only ones); use --engine native")
    by_rank = hta_breakdowns(run.traces, keep_last_step)
    return [replace(r, breakdown=with_native_comm(by_rank[r.rank], r.breakdown))
            for r in results]


def _map_ranks(paths: list[Path], drop: bool | None, per_step: bool, timeline: bool,
               jobs: int | None) -> list[tuple[RankResult | None, set[str], TraceError | None]]:
    cores = jobs or os.cpu_count() or 1
    workers = min(len(paths), cores)
    if workers <= 1:
        # one rank at a time: its own decoding may use the cores instead
        outcomes = [_load_and_analyze(p, drop, per_step, timeline, cores) for p in paths]
    else:
        n = len(paths)
        with ProcessPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(_load_and_analyze, paths, [drop] * n, [per_step] * n,
                                     [timeline] * n))
    for outcome in outcomes:
        _raise_error(outcome)
    return outcomes


def analyze_paths(paths: list[Path], keep_last_step: bool = False, per_step: bool = False,
                  jobs: int | None = None, engine: str = "native",
                  on_run: Callable[[int, int, RunInput], None] | None = None,
                  timeline: bool = False) -> Analysis:
    """Every run found under ``paths``; a run that cannot be analyzed is listed in ``errors``
    and the others are still reported. ``on_run(index, total, run)`` is told of each run."""
    runs, errors = [], []
    found = discover(paths)
    for index, run in enumerate(found):
        if on_run:
            on_run(index, len(found), run)
        try:
            runs.append(analyze_run(run, keep_last_step, per_step, jobs, engine, timeline))
        except UsageError as error:
            errors.append({"run": run.name, "error": str(error)})
    return Analysis(runs, errors)


# ---- run-level summary -------------------------------------------------------------------

RANK_METRICS = ("compute_pct", "non_compute_pct", "idle_pct", "overlap_pct",
                "comm_overhead_pct")


def rank_row(rank: RankResult) -> dict[str, Any]:
    """One rank's flat metrics (times in ms, per optimizer step where named so)."""
    b = rank.breakdown
    all_reduce = rank.collectives.get("all_reduce")
    others = {k: v for k, v in rank.collectives.items() if k != "all_reduce"}
    steps = max(rank.steps, 1)
    return {
        "rank": rank.rank, "kind": rank.kind, "steps": rank.steps,
        "window_ms": b.window_us / 1e3, "compute_ms": b.compute_us / 1e3,
        **{m: getattr(b, m) for m in RANK_METRICS},
        "exposed_comm_ms_per_step": b.exposed_comm_us / 1e3 / steps,
        "all_reduce_calls": all_reduce.calls if all_reduce else 0,
        "all_reduce_calls_per_step": (all_reduce.calls if all_reduce else 0) / steps,
        "all_reduce_ms": all_reduce.total_us / 1e3 if all_reduce else 0.0,
        "all_reduce_ms_per_step": (all_reduce.total_us / 1e3 if all_reduce else 0.0) / steps,
        "all_reduce_bytes_per_call": all_reduce.bytes_per_call if all_reduce else None,
        "all_reduce_algbw_gbps": all_reduce.algbw_gbps if all_reduce else None,
        "all_reduce_busbw_gbps": all_reduce.busbw_gbps if all_reduce else None,
        "other_collective_calls": sum(s.calls for s in others.values()),
        "other_collective_calls_per_step": sum(s.calls for s in others.values()) / steps,
    }


def _mean(values: list[Any]) -> float | None:
    numbers = [v for v in values if v is not None]
    return statistics.fmean(numbers) if numbers else None


def run_row(run: RunResult) -> dict[str, Any]:
    """One run: every rank metric as the mean over ranks, the breakdown shares also as min and
    max, and the straggler: the rank with the most compute time, which the others wait for."""
    config = run.manifest.get("config", {})
    rows = [rank_row(r) for r in run.ranks]
    first = run.ranks[0]
    summary: dict[str, Any] = {
        "run": run.name, "variant": config.get("variant"), "model": config.get("model"),
        "world_size": first.world_size or config.get("world_size"),
        "backend": first.backend or config.get("backend"), "kind": first.kind,
        "ranks": len(run.ranks), "missing_ranks": run.missing_ranks, "steps": first.steps,
        "last_step": run.last_step,
    }
    for key in rows[0]:
        if key in ("rank", "kind", "steps"):
            continue
        summary[key] = _mean([row[key] for row in rows])
        if key in RANK_METRICS:
            values = [row[key] for row in rows if row[key] is not None]
            summary[f"{key}_min"] = min(values) if values else None
            summary[f"{key}_max"] = max(values) if values else None
    summary["straggler_rank"] = max(rows, key=lambda r: r["compute_ms"])["rank"]
    summary["samples_per_s"] = (run.manifest.get("throughput") or {}).get("samples_per_s")
    summary["expected_allreduces_per_step"] = config.get("allreduces_per_sync")
    return summary


def to_json_document(analysis: Analysis) -> dict[str, Any]:
    """The stable ``--json`` schema (the gate's input)."""
    runs = []
    for run in analysis.runs:
        runs.append({
            **run_row(run), "folder": run.folder,
            "per_rank": [{**rank_row(r), "path": r.path,
                          "collectives": {k: {**asdict(v), "mean_us": v.mean_us}
                                          for k, v in r.collectives.items()},
                          **({"per_step": r.per_step} if r.per_step else {})}
                         for r in run.ranks],
        })
    return {"schema": "ddpprof.analyze", "version": SCHEMA_VERSION, "runs": runs,
            "errors": analysis.errors}


def analyze(path: str | Path, keep_last_step: bool = False) -> pandas.DataFrame:
    """One row per run (the ``ddpprof analyze`` table) for a run folder, a folder of runs or a
    trace file. Raises :class:`ddpprof.errors.UsageError` if any run cannot be analyzed."""
    import pandas

    analysis = analyze_paths([Path(path)], keep_last_step=keep_last_step)
    if analysis.errors:
        raise UsageError("; ".join(e["error"] for e in analysis.errors))
    return pandas.DataFrame([run_row(run) for run in analysis.runs])
