"""From the paths a user gives to analyzed runs: find the runs, load their ranks in parallel,
decide each trace's rank and each run's step filter, and match collectives across ranks.

This module does the I/O; the metrics are computed by ``ddpprof.analysis.rank`` and
``ddpprof.metrics``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import storage
from ..core.errors import NotATrace, TraceError, UsageError
from ..core.processes import out_of_memory
from ..core.storage import Location
from ..metrics.tax import overlap_tax
from ..metrics.waits import wait_split
from ..run.discover import RunInput, discover
from ..run.manifest import INCOMPLETE, RunManifest, effective_status, status_detail
from ..trace import classify
from ..trace.events import RankTrace
from ..trace.last_step import LastStep
from ..trace.loader import load
from ..variants import VARIANT_NAMES
from .buckets import BucketTimeline
from .executors import Executor, Progress, executor_for
from .groups import run_groups
from .hta_engine import hta_breakdowns, with_native_comm
from .options import ADVISED_STEPS, AnalysisOptions
from .rank import analyze_rank
from .results import Analysis, RankResult, RunProblem, RunResult
from .rows import run_row

if TYPE_CHECKING:
    import pandas

DEFAULT_OPTIONS = AnalysisOptions()
_TRACE_SUFFIX = re.compile(r"(\.pt\.trace)?\.json(\.gz)?$")


@dataclass
class _Outcome:
    """One trace, loaded and analyzed in a worker (the result's rank is provisional)."""

    path: Location
    rank: int | None
    rank_source: str | None
    step_names: set[str]
    result: RankResult | None
    error: TraceError | None
    #: The analysis over the steps the run decides on when its other ranks name two steps or
    #: more and this one fewer (made with the rest, so that the trace is read once).
    if_filtered: RankResult | TraceError | None = None


def _load_and_analyze(path: Location, options: AnalysisOptions, several: bool,
                      decode_workers: int = 1) -> _Outcome:
    """Load and analyze one trace, its window decided from its own steps; ``several``: the
    run has other traces, which may decide otherwise. Everything taken from the trace is
    taken here: it is read once."""
    try:
        trace = load(path, workers=decode_workers)
        names = classify.step_names(trace)
        own = LastStep.decide(names, options.keep_last_step)
        outcome = _Outcome(path, trace.rank, trace.rank_source, names,
                           _analyze(trace, own, options), None)
        if several and trace.rank is not None and not own.filters:
            # (the analysis, not the decoding, is what is done twice: a few % of a trace's time)
            filtered = LastStep.KEPT if options.keep_last_step else LastStep.DROPPED
            try:
                outcome.if_filtered = _analyze(trace, filtered, options) if names \
                    else TraceError(path, "no ProfilerStep, while the run's other traces name "
                                          "two or more: its ranks have no steps in common")
            except TraceError as error:
                outcome.if_filtered = error
        return outcome
    except TraceError as error:
        return _Outcome(path, None, None, set(), None, error)
    except MemoryError:     # one line through the parent, never a traceback
        return _Outcome(path, None, None, set(), None, TraceError(path, out_of_memory()))


def _analyze(trace: RankTrace, last_step: LastStep, options: AnalysisOptions) -> RankResult:
    result = analyze_rank(trace, trace.rank or 0, last_step, options)
    bucketed = result.buckets is not None and bool(result.buckets.buckets)
    if options.step_graphs or (options.replay_graphs and bucketed):
        # the replay machinery: off analyze's start (tests/test_no_torch.py)
        from ..graph.build import rank_steps

        result.graph_steps = rank_steps(
            trace, trace.rank or 0, options.keep_last_step,
            at_most=options.max_graph_steps if options.step_graphs else ADVISED_STEPS)
    return result


def _lost(path: Location, reason: str) -> _Outcome:
    return _Outcome(path, None, None, set(), None, TraceError(path, reason))


def _map(executor: Executor, run: RunInput, options: AnalysisOptions,
         on_rank: Progress | None = None) -> list[_Outcome]:
    """Every trace of ``run``, loaded and analyzed by ``executor`` (see ``executors``)."""
    if run.manifest.config is None:
        # a trace ddpprof did not record: no finding names a cap for it (``simulate.advice``)
        options = replace(options, replay_graphs=False)
    return executor.map(_load_and_analyze, run.traces, options, len(run.traces) > 1,
                        on_done=on_rank, on_lost=_lost)


def _raise_first_error(outcomes: list[_Outcome]) -> None:
    for outcome in outcomes:
        if outcome.error is not None:
            raise outcome.error


def _stem(path: Location) -> str:
    name = storage.name(path)
    return _TRACE_SUFFIX.sub("", name) or name


def _assign_ranks(run: RunInput, outcomes: list[_Outcome]
                  ) -> list[tuple[str, list[_Outcome], list[str]]]:
    """The runs these traces make, with their notes. Traces that carry a rank keep it. A lone
    trace without one is rank 0. Several traces of which none carries a rank are unrelated
    traces (one per model, say): each becomes a one-rank run named after its file."""
    unranked = [o for o in outcomes if o.rank is None]
    if not unranked:
        return [(run.name, outcomes, [])]
    if len(unranked) < len(outcomes):
        ranked = next(o for o in outcomes if o.rank is not None)
        raise TraceError(unranked[0].path, "no rank (no distributedInfo.rank, none in the file "
                                           f"name), but {storage.name(ranked.path)} in the same "
                                           "run has one: name it rank<N>")
    note = "no rank in the trace (no distributedInfo.rank, none in the file name): read as rank 0"
    if len(outcomes) == 1:
        outcomes[0].rank = 0
        return [(run.name, outcomes, [note])]
    split = []
    for outcome in outcomes:
        outcome.rank = 0
        split.append((f"{run.name}/{_stem(outcome.path)}", [outcome],
                      [f"{note}; the {len(outcomes)} traces of {run.name} carry no rank, so "
                       "each is its own one-rank run"]))
    return split


def _check_ranks(outcomes: list[_Outcome]) -> None:
    seen: dict[int, Location] = {}
    for outcome in outcomes:
        assert outcome.rank is not None
        if outcome.rank in seen:
            raise TraceError(storage.parent(outcome.path),
                             f"duplicate rank {outcome.rank} ({storage.name(seen[outcome.rank])} "
                             f"and {storage.name(outcome.path)})")
        seen[outcome.rank] = outcome.path


def _world_size(results: list[RankResult]) -> int | None:
    sized = [r for r in results if r.world_size is not None]
    for other in sized[1:]:
        if other.world_size != sized[0].world_size:
            raise TraceError(other.path, f"world size {other.world_size}, but {sized[0].path} "
                                         f"says {sized[0].world_size} (mixed world sizes in "
                                         "one run)")
    return sized[0].world_size if sized else None


def missing_ranks(present: list[int], world_size: int | None) -> list[tuple[int, int]]:
    """Inclusive ranges of ranks in ``[0, world_size)`` without a trace, computed from the
    ranks present (never by listing the world: a trace may claim a billion ranks)."""
    if not world_size:
        return []
    ranges, expected = [], 0
    for rank in sorted(r for r in set(present) if r < world_size):
        if rank > expected:
            ranges.append((expected, rank - 1))
        expected = rank + 1
    if expected < world_size:
        ranges.append((expected, world_size - 1))
    return ranges


def _step_note(last_step: LastStep, kind: str) -> str | None:
    if last_step == LastStep.NO_STEPS:
        window = ("every device event, as HTA does" if kind == "gpu"
                  else "first to last host op or collective")
        return f"no ProfilerStep: the whole trace is analyzed as one step (window: {window})"
    if last_step == LastStep.ONE_STEP and kind == "gpu":
        return "one ProfilerStep: the whole trace is analyzed, as HTA does"
    return None


def _finish_run(name: str, run: RunInput, outcomes: list[_Outcome], notes: list[str],
                options: AnalysisOptions) -> RunResult:
    _check_ranks(outcomes)
    # HTA drops the last step when the run's traces name at least two distinct ProfilerSteps
    # between them; a rank that decided otherwise from its own steps alone takes the analysis
    # it made for that case.
    last_step = LastStep.decide(set().union(*(o.step_names for o in outcomes)),
                                options.keep_last_step)
    results = []
    for outcome in outcomes:
        result = outcome.result
        assert result is not None and outcome.rank is not None
        if result.last_step != last_step and not last_step.filters:
            # one step named elsewhere in the run, none here: the same window, named so
            result = replace(result, last_step=last_step)
        elif result.last_step != last_step:
            if isinstance(outcome.if_filtered, TraceError):
                raise outcome.if_filtered
            result = outcome.if_filtered
            assert result is not None and result.last_step == last_step
        results.append(replace(result, rank=outcome.rank,
                               buckets=_with_recorded_params(result.buckets, run.manifest)))
    results.sort(key=lambda r: r.rank)
    world = _world_size(results)
    missing = missing_ranks([r.rank for r in results], world)
    slowest = None
    transfer_start = {r.rank: r.calls.start_us for r in results}
    if len(results) >= 2:
        waits = wait_split({r.rank: r.calls for r in results})
        for result in results:
            result.wait = waits.by_rank[result.rank]
        slowest = waits.slowest_rank
        notes = notes + [f"waiting vs transferring: {reason}" for reason in waits.unmatched]
        transfer_start = waits.transfer_start_us
    for result in results:
        result.transfer_start_us = transfer_start[result.rank]
    groups, group_notes = run_groups(results, run.manifest)
    notes = notes + group_notes
    step_note = _step_note(last_step, results[0].kind)
    rank_notes = merged_notes([n for r in results for n in r.notes])
    if options.engine == "hta":
        results = _with_hta(run, results, options.keep_last_step)
    tax = overlap_tax([(r.tax_samples, r.calls, transfer_start[r.rank])
                       for r in results if r.tax_samples is not None], results[0].backend)
    return RunResult(name=name, folder=str(run.folder), manifest=run.manifest, ranks=results,
                     last_step=last_step, missing_ranks=missing,
                     notes=[*([step_note] if step_note else []), *notes, *rank_notes],
                     slowest_rank=slowest, status=effective_status(run.manifest),
                     overlap_tax=tax, process_groups=groups)


def _with_recorded_params(timeline: BucketTimeline | None, manifest: RunManifest
                          ) -> BucketTimeline | None:
    """The bucket rows with the parameter names ``record`` wrote to run.json (``buckets``),
    when it wrote as many buckets as the step's all-reduces."""
    recorded = manifest.buckets
    if timeline is None or not recorded or len(recorded) != len(timeline.buckets):
        return timeline
    rows = [replace(row, params=list(bucket.params), gradients=len(bucket.params))
            for row, bucket in zip(timeline.buckets, recorded, strict=True)]
    return replace(timeline, buckets=rows)


def analyze_run(run: RunInput, options: AnalysisOptions = DEFAULT_OPTIONS,
                executor: Executor | None = None, on_rank: Progress | None = None
                ) -> list[RunResult]:
    """Every rank of ``run`` analyzed; a folder of rankless traces makes several runs."""
    if executor is None:
        with executor_for(options.scheduler, options.jobs) as own:
            return analyze_run(run, options, own, on_rank)
    outcomes = _map(executor, run, options, on_rank)
    outcomes, skipped = _without_other_json(outcomes)
    _raise_first_error(outcomes)
    return [_finish_run(name, run, members, [*run.notes, *skipped, *notes], options)
            for name, members, notes in _assign_ranks(run, outcomes)]


def _without_other_json(outcomes: list[_Outcome]) -> tuple[list[_Outcome], list[str]]:
    """The outcomes without JSON files that are not traces, and a note naming those, when
    the run has at least one trace. Folders of traces often hold other JSON: HTA's own test
    data puts an execution trace (``*_et.json.gz``) beside its Kineto trace, and Chakra's
    workflow writes both per rank. Where every file is such, the first is the run's error."""
    others = [o for o in outcomes if isinstance(o.error, NotATrace)]
    if not others or len(others) == len(outcomes):
        return outcomes, []
    names = ", ".join(storage.name(o.path) for o in others[:3])
    more = f" and {len(others) - 3} more" if len(others) > 3 else ""
    return ([o for o in outcomes if not isinstance(o.error, NotATrace)],
            [f"skipped {len(others)} JSON file(s) that are not traces (no traceEvents): "
             f"{names}{more}"])


def _with_hta(run: RunInput, results: list[RankResult], keep_last_step: bool
              ) -> list[RankResult]:
    local = [p for p in run.traces if isinstance(p, Path)]
    if len(local) < len(run.traces):
        raise TraceError(run.folder, "--engine hta reads local files only; use --engine native "
                                     "for URLs")
    if any(r.kind != "gpu" for r in results):
        raise TraceError(run.folder, "--engine hta needs GPU traces (HTA cannot analyze "
                                     "CPU-only ones); use --engine native")
    by_rank = hta_breakdowns(local, keep_last_step)
    return [replace(r, breakdown=with_native_comm(by_rank[r.rank], r.breakdown))
            for r in results]


def analyze_paths(paths: list[Location], options: AnalysisOptions = DEFAULT_OPTIONS,
                  on_run: Callable[[int, int, RunInput], None] | None = None,
                  on_rank: Progress | None = None) -> Analysis:
    """Every run found under ``paths``. A run that cannot be analyzed is listed in ``errors``,
    and a recording that failed or was interrupted in ``unfinished``; the others are still
    reported. ``on_run(index, total, run)`` is told of each run, ``on_rank(done, total)`` of
    each rank analyzed."""
    found = discover(paths)
    with executor_for(options.scheduler, options.jobs) as executor:
        return _analyze_found(found, options, executor, on_run, on_rank)


def _analyze_found(found: list[RunInput], options: AnalysisOptions, executor: Executor,
                   on_run: Callable[[int, int, RunInput], None] | None,
                   on_rank: Progress | None) -> Analysis:
    analysis = Analysis(runs=[], errors=[], unfinished=[])
    no_traces: list[tuple[RunInput, RunProblem]] = []
    for index, run in enumerate(found):
        if on_run:
            on_run(index, len(found), run)
        if run.error:
            analysis.errors.append(RunProblem(run.name, run.error))
            continue
        status = effective_status(run.manifest)
        if status in INCOMPLETE:
            analysis.unfinished.append(RunProblem(
                run.name, status_detail(run.manifest) or f"the recording is {status}", status,
                str(run.folder)))
            continue
        try:
            analysis.runs += analyze_run(run, options, executor, on_rank)
        except NotATrace as error:
            # Only JSON that is not a trace: another tool's output kept beside the runs
            # (TraceLens writes its plot data in a subfolder), or ddpprof's own analysis.
            no_traces.append((run, RunProblem(run.name, str(error))))
        except UsageError as error:
            analysis.errors.append(RunProblem(run.name, str(error)))
    if analysis.runs or analysis.errors or analysis.unfinished:
        # Left out, with a note, beside runs that hold traces; files kept beside run folders
        # leave no note.
        analysis.skipped = [problem for run, problem in no_traces if not run.beside_runs]
    else:
        analysis.errors = [problem for _, problem in no_traces]
    analysis.runs.sort(key=_natural_order)   # stable: runs of no known variant keep theirs
    _unique_names(analysis.runs)
    return analysis


def _unique_names(runs: list[RunResult]) -> None:
    """Runs that share a name (``analyze a/ok b/ok``) get as much of their folder's path in
    front of it as tells them apart (``a/ok``, ``b/ok``), else a number: the gate matches runs
    by name, so two must never share one."""
    groups: dict[str, list[RunResult]] = {}
    for run in runs:
        groups.setdefault(run.name, []).append(run)
    for name, same in groups.items():
        if len(same) < 2:
            continue
        parents = [Path(os.path.abspath(run.folder)).parent.parts for run in same]
        names = [f"{name} ({index})" for index in range(1, len(same) + 1)]
        for depth in range(1, max(map(len, parents)) + 1):
            candidates = ["/".join([*p[-depth:], name]).lstrip("/") for p in parents]
            if len(set(candidates)) == len(candidates):
                names = candidates
                break
        for run, unique in zip(same, names, strict=True):
            run.name = unique


def _natural_order(run: RunResult) -> int:
    """The variants' own order: single, the simple ones, bucketed, PyTorch's, sharded."""
    config = run.manifest.config
    variant = config.variant if config else None
    return VARIANT_NAMES.index(variant) if variant in VARIANT_NAMES else len(VARIANT_NAMES)


def analyze(path: str | Path, keep_last_step: bool = False) -> pandas.DataFrame:
    """One row per run (the ``ddpprof analyze`` table) as a pandas DataFrame, for a run
    folder, a folder of runs or a trace file. Raises :class:`ddpprof.core.errors.UsageError` if any
    run cannot be analyzed."""
    import pandas  # pandas: optional, for DataFrames

    analysis = analyze_paths([Path(path)], AnalysisOptions(keep_last_step=keep_last_step))
    if analysis.errors:
        raise UsageError("; ".join(e.error for e in analysis.errors))
    return pandas.DataFrame([run_row(run).to_dict() for run in analysis.runs])


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def merged_notes(notes: list[str]) -> list[str]:
    """The ranks' notes, each once: notes that differ only in their numbers (the same
    finding on several ranks) become one, each number a range over the ranks
    (``354 to 1041 device records ...``), in the order first seen."""
    groups: dict[str, list[list[str]]] = {}
    for note in dict.fromkeys(notes):
        groups.setdefault(_NUMBER.sub("#", note), []).append(_NUMBER.findall(note))
    merged = []
    for template, numbers in groups.items():
        parts = template.split("#")
        text = parts[0]
        for k, rest in enumerate(parts[1:]):
            values = [row[k] for row in numbers]
            low, high = min(values, key=float), max(values, key=float)
            text += (low if low == high else f"{low} to {high}") + rest
        merged.append(text)
    return merged
