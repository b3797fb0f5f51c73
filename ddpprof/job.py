"""One way into an analysis from Python: :class:`Job`, one run's ranks analyzed once, with
named analyzers that each compute on first call, cache, and return a frozen result of their
own (``ddpprof.job_results``); :class:`JobSet`, the runs found under some paths analyzed
together, as ``ddpprof analyze`` sees them.

The analyzers read what the analysis computed (``ddpprof.analysis.analyze_paths``); none
computes a metric of its own, and none changes another's result or the analysis's."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .advice import findings
from .advice.bucket_cap import cap_advice_for_runs, cap_advice_within
from .analysis import AnalysisOptions, analyze_paths, to_json_document
from .analysis.executors import Progress
from .analysis.group_rows import group_rows, rank_group_rows
from .analysis.profile import RunProfile, run_profile
from .analysis.results import Analysis, RunResult
from .analysis.rows import RunRow, run_row
from .core.errors import UsageError
from .core.storage import Location, location_of
from .gate.rules import GateRun, runs_of
from .job_results import (
    BreakdownResult,
    BucketsResult,
    CollectiveKind,
    CollectivesResult,
    CriticalPathResult,
    DiffResult,
    FindingsResult,
    GateResult,
    MemoryResult,
    OverlapResult,
    OverlapTaxResult,
    ProcessGroupsResult,
    RankBreakdown,
    RankOverlap,
    RankWait,
    SimulationResult,
    WaitsResult,
)
from .run.discover import RunInput
from .run.manifest import MANIFEST_NAME

if TYPE_CHECKING:   # the graphs' machinery is imported where a replay is made, not by analyze
    from .graph.whatif import Edit
    from .simulate.sources import Costs

__all__ = ["Job", "JobSet", "analysis_options"]

#: On each run found: (index, total, the run).
OnRun = Callable[[int, int, RunInput], None]


def analysis_options(keep_last_step: bool, per_step: bool, hta_compat: bool,
                     comm_kernels: Sequence[str], structural_comm: bool, engine: str,
                     jobs: int | None, scheduler: str | None, step_graphs: bool,
                     max_graph_steps: int | None) -> AnalysisOptions:
    """``ddpprof analyze``'s options, the comm-kernel expressions checked (and the graphs its
    bucket-cap advice replays: ``replay_graphs``)."""
    # the facade: an analyzer's machinery, loaded when first called
    from .trace.classify import validate_comm_patterns

    return AnalysisOptions(
        keep_last_step=keep_last_step, per_step=per_step, hta_compat=hta_compat,
        comm_kernels=tuple(validate_comm_patterns(comm_kernels)),
        structural_comm=structural_comm, engine=engine, jobs=jobs, scheduler=scheduler,
        replay_graphs=True, step_graphs=step_graphs, max_graph_steps=max_graph_steps)


class JobSet:
    """Every run found under some paths, analyzed together (:meth:`Job.load_all`, or
    :meth:`analyze` with the options ``ddpprof analyze`` builds). ``analysis`` is the typed
    analysis every output of ``analyze`` is made from; ``jobs`` one :class:`Job` per run
    analyzed, in the table's order. Runs that could not be analyzed are in
    ``analysis.errors``, recordings that did not finish in ``analysis.unfinished``."""

    def __init__(self, analysis: Analysis, options: AnalysisOptions,
                 sources: tuple[Location, ...]) -> None:
        self.analysis = analysis
        self.options = options
        runs = tuple(analysis.runs)
        self.jobs = tuple(Job(run, options, sources, runs) for run in runs)

    @classmethod
    def analyze(cls, locations: Sequence[Location], options: AnalysisOptions,
                on_run: OnRun | None = None, on_rank: Progress | None = None) -> JobSet:
        """The runs under ``locations`` analyzed with ``options`` (``analyze_paths``)."""
        sources = tuple(locations)
        return cls(analyze_paths(list(sources), options, on_run=on_run, on_rank=on_rank),
                   options, sources)

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)

    def __getitem__(self, name: str) -> Job:
        """The job of the run named ``name``."""
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)

    def findings(self) -> FindingsResult:
        """Every run's findings, ranked together as ``analyze`` ranks them (the bucket-cap
        advice's cost model pooled over the runs: ``simulate.advice.cap_advice_for_runs``)."""
        return self._ranked

    def gate_runs(self, source: str, with_findings: bool = False) -> list[GateRun]:
        """The runs as ``ddpprof gate`` checks them (``gate.runs_of``: each run's figures in
        the analyze document), with the findings of :meth:`findings` when
        ``with_findings``; ``source`` names them in its errors."""
        found = list(self.findings().findings) if with_findings else None
        return runs_of(to_json_document(self.analysis, found), source)

    @cached_property
    def _ranked(self) -> FindingsResult:
        runs = list(self.analysis.runs)
        return FindingsResult("", tuple(findings(runs, cap_advice_for_runs(runs))))


class Job:
    """One run (its ranks' traces) analyzed once. :meth:`load` analyzes a run folder or
    trace; each analyzer (``breakdown()``, ``collectives()``, ...) computes on its first call
    and caches. ``run`` is the typed analysis (``analysis.results.RunResult``) they read."""

    def __init__(self, run: RunResult, options: AnalysisOptions,
                 sources: tuple[Location, ...], peers: tuple[RunResult, ...] = (),
                 path: Path | None = None) -> None:
        """``sources``: the paths analyzed, read again only for the step graphs when
        ``options`` did not ask for them; ``peers``: the runs analyzed with this one, whose
        collectives the bucket-cap advice may pool a cost model over (``analyze`` does);
        ``path``: the one path that holds just this run, as given (what :meth:`simulate`
        names the run by and finds a calibration beside; else its folder)."""
        self.run = run
        self.options = options
        self.path = path
        self._sources = sources
        self._peers = peers or (run,)

    @classmethod
    def load(cls, path: str | Path, *, keep_last_step: bool = False, per_step: bool = False,
             hta_compat: bool = False, comm_kernels: Sequence[str] = (),
             structural_comm: bool = True, engine: Literal["native", "hta"] = "native",
             jobs: int | None = None, scheduler: str | None = None,
             step_graphs: bool = False, max_graph_steps: int | None = None) -> Job:
        """The run at ``path`` (a run folder, a trace, or a URL), analyzed once with the
        options of ``ddpprof analyze`` (``analysis.AnalysisOptions``; ``step_graphs``: also
        the steps' graphs, which :meth:`critical_path` and :meth:`simulate` replay, else
        they read the traces again on first use). Raises :class:`ddpprof.core.errors.UsageError`
        when the run cannot be analyzed, did not finish recording, or ``path`` holds
        several runs (naming them: :meth:`load_all` analyzes them all)."""
        found = cls.load_all(path, keep_last_step=keep_last_step, per_step=per_step,
                             hta_compat=hta_compat, comm_kernels=comm_kernels,
                             structural_comm=structural_comm, engine=engine, jobs=jobs,
                             scheduler=scheduler, step_graphs=step_graphs,
                             max_graph_steps=max_graph_steps)
        problems = found.analysis.errors + found.analysis.unfinished
        if problems:
            raise UsageError(f"{problems[0].run}: {problems[0].error}")
        if len(found) != 1:
            names = ", ".join(job.name for job in found.jobs[:5])
            more = ", ..." if len(found) > 5 else ""
            raise UsageError(f"{path}: holds {len(found)} runs ({names}{more}); give one "
                             "run's folder, or use Job.load_all" if found.jobs else
                             f"{path}: no run found")
        return found.jobs[0]

    @classmethod
    def load_all(cls, path: str | Path | Sequence[str | Path], *, keep_last_step: bool = False,
                 per_step: bool = False, hta_compat: bool = False,
                 comm_kernels: Sequence[str] = (), structural_comm: bool = True,
                 engine: Literal["native", "hta"] = "native", jobs: int | None = None,
                 scheduler: str | None = None, step_graphs: bool = False,
                 max_graph_steps: int | None = None) -> JobSet:
        """Every run under ``path`` (one path or several), analyzed together as ``ddpprof
        analyze`` does; the options are :meth:`load`'s. Runs that cannot be analyzed are
        listed in ``analysis.errors``, not raised."""
        paths = [path] if isinstance(path, str | Path) else list(path)
        locations = [location_of(str(p)) for p in paths]
        return JobSet.analyze(locations, analysis_options(
            keep_last_step, per_step, hta_compat, comm_kernels, structural_comm, engine,
            jobs, scheduler, step_graphs, max_graph_steps))

    @property
    def name(self) -> str:
        return self.run.name

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(self.run.notes)

    # --- the analyzers: each computed on first call, then cached ----------------------------

    def summary(self) -> RunRow:
        """The run's row of the ``analyze`` table: every metric, the mean over ranks."""
        return self._summary

    @cached_property
    def _summary(self) -> RunRow:
        return run_row(self.run)

    def breakdown(self) -> BreakdownResult:
        """Each rank's window split into compute, non-compute and idle time, and its
        communication's overlap with compute (``metrics.breakdown``)."""
        return self._breakdown

    @cached_property
    def _breakdown(self) -> BreakdownResult:
        return BreakdownResult(self.name, self.run.last_step.value,
                               tuple(RankBreakdown.of(r) for r in self.run.ranks))

    def overlap(self) -> OverlapResult:
        """Each rank's overlap of communication with compute, overall and by collective."""
        return self._overlap

    @cached_property
    def _overlap(self) -> OverlapResult:
        return OverlapResult(self.name, tuple(
            RankOverlap(r.rank, r.breakdown.comm_us, r.breakdown.overlap_us,
                        r.breakdown.exposed_comm_us, r.breakdown.overlap_pct,
                        tuple(sorted(r.overlap_by_kind.items())))
            for r in self.run.ranks))

    def collectives(self) -> CollectivesResult:
        """Each rank's calls per collective kind: calls, time, bytes, bandwidth, overlap
        (``metrics.comm.collective_stats``); empty without collectives."""
        return self._collectives

    @cached_property
    def _collectives(self) -> CollectivesResult:
        return CollectivesResult(self.name, tuple(
            CollectiveKind(r.rank, kind, s.calls, s.total_us, s.mean_us, s.bytes_per_call,
                           s.algbw_gbps, s.busbw_gbps, r.overlap_by_kind.get(kind))
            for r in self.run.ranks for kind, s in sorted(r.collectives.items())))

    def process_groups(self) -> ProcessGroupsResult:
        """Communication per process group, for the run and each rank (``analysis.groups``)."""
        return self._process_groups

    @cached_property
    def _process_groups(self) -> ProcessGroupsResult:
        return ProcessGroupsResult(
            self.name, tuple(group_rows(self.run)),
            tuple(row for r in self.run.ranks for row in rank_group_rows(self.run, r.rank)))

    def waits(self) -> WaitsResult:
        """Each rank's collective time split into waiting for the last member and
        transferring (``metrics.waits``); empty for a one-rank run."""
        return self._waits

    @cached_property
    def _waits(self) -> WaitsResult:
        return WaitsResult(self.name, self.run.slowest_rank, tuple(
            RankWait(r.rank, r.wait.transfer_us, r.wait.wait_us, r.wait.caused_wait_us,
                     r.wait.waiting_us, r.wait.matched_calls)
            for r in self.run.ranks if r.wait is not None))

    def buckets(self) -> BucketsResult:
        """The gradient all-reduce buckets of the first rank's middle analyzed step."""
        return self._buckets

    @cached_property
    def _buckets(self) -> BucketsResult:
        first = self.run.ranks[0]
        timeline = first.buckets
        if timeline is None:
            return BucketsResult(self.name, None, None, None, None, ())
        return BucketsResult(self.name, first.rank, timeline.step, timeline.first_gradient_ms,
                             timeline.backward_end_ms, tuple(timeline.buckets))

    def overlap_tax(self) -> OverlapTaxResult:
        """How much longer compute and communication run overlapped than alone
        (``metrics.tax``); empty where the run gives no samples."""
        return self._overlap_tax

    @cached_property
    def _overlap_tax(self) -> OverlapTaxResult:
        tax = self.run.overlap_tax
        if tax is None:
            return OverlapTaxResult(self.name, (), None, None)
        return OverlapTaxResult(self.name, tuple(tax.rows), tax.pct("compute"),
                                tax.pct("communication"))

    def critical_path(self, edits: Sequence[Sequence[Edit]] = ()) -> CriticalPathResult:
        """Each analyzed step's critical path across ranks (``graph.summary.run_paths``), and
        each what-if of ``edits`` (one list of ``graph.whatif.Edit`` per replay, as
        ``ddpprof critical-path --faster gemm=20`` gives) replayed under the run's measured
        overlap tax: cached without ``edits``, computed on each call with them. Without
        ``step_graphs`` at :meth:`load`, the traces are read again (once) for the graphs."""
        return self._paths(edits) if edits else self._critical_path

    @cached_property
    def _critical_path(self) -> CriticalPathResult:
        return self._paths(())

    def _paths(self, edits: Sequence[Sequence[Edit]]) -> CriticalPathResult:
        # the facade: an analyzer's machinery, loaded when first called
        from .graph.summary import measured_run_paths

        run = self._graph_run
        steps, graphs, notes, tax = measured_run_paths(
            run.name, {r.rank: r.graph_steps or [] for r in run.ranks}, run.overlap_tax,
            [list(chosen) for chosen in edits])
        return CriticalPathResult(self.name, tuple(steps), tuple(notes), tuple(graphs), tax)

    def profile(self) -> RunProfile | None:
        """The run's steps cut into the parts :meth:`diff` compares, per step and rank
        (``diff.profile.run_profile``); None when no rank has a step to cut."""
        return self._profile

    @cached_property
    def _profile(self) -> RunProfile | None:
        return run_profile(self.run)

    def findings(self) -> FindingsResult:
        """What to change, ranked (``ddpprof.advice``), with the simulator's bucket-cap
        advice as ``ddpprof analyze`` gives it."""
        return self._findings

    @cached_property
    def _findings(self) -> FindingsResult:
        advice = cap_advice_within(self.run, list(self._peers))
        return FindingsResult(self.name, tuple(findings(
            [self.run], {self.name: advice} if advice is not None else {})))

    def memory(self) -> MemoryResult:
        """The run's measured memory per rank beside the estimate for its variant
        (``memory.compare_run``). Raises :class:`ddpprof.core.errors.UsageError` for a run without
        a ``run.json`` that measured memory (a trace ddpprof did not record)."""
        return self._memory

    @cached_property
    def _memory(self) -> MemoryResult:
        # the facade: an analyzer's machinery, loaded when first called
        from .memory.estimate import compare_run

        folder = location_of(self.run.folder)
        if isinstance(folder, str) or not (folder / MANIFEST_NAME).is_file():
            raise UsageError(f"{self.run.folder}: no {MANIFEST_NAME} (memory is measured by "
                             "ddpprof record)")
        found = compare_run(folder)
        return MemoryResult(self.name, found.variant, found.model, found.estimate,
                            tuple(found.ranks))

    # --- comparisons and replays: computed on each call --------------------------------------

    def diff(self, other: Job, significance: float = 0.95) -> DiffResult:
        """Why ``other``'s step differs from this one's (``ddpprof diff``: this job before,
        ``other`` after), each part against the run-to-run noise."""
        # the facade: an analyzer's machinery, loaded when first called
        from .diff.compare import diff_pair
        from .diff.noise import DEFAULT_NOISE

        before, after = self.profile(), other.profile()
        if before is None or after is None:
            raise UsageError(f"{(other if before else self).name}: no step to compare")
        return DiffResult(diff_pair([before], [after], significance, DEFAULT_NOISE,
                                    (self.name, other.name)))

    def simulate(self, edits: Sequence[Edit] = (), bucket_caps_mib: Sequence[float] = (),
                 world_sizes: Sequence[int] | None = (), *, costs: Costs | None = None,
                 ready_order: bool = False, measured: dict[float, float] | None = None,
                 shared_cores: int | None = None) -> SimulationResult:
        """The run's steps replayed (``ddpprof simulate``) at its own configuration, each
        bucket cap and world size asked for (``world_sizes`` None: the run's own, 2, 4 and
        8), with ``edits`` (``graph.whatif.Edit``, as ``--faster gemm=20`` parses to
        ``Edit("faster", "gemm", 20)``) applied to every row; ``costs``, ``ready_order``,
        ``measured`` (a sweep's step per cap, in ms) and ``shared_cores`` are ``simulate``'s
        options (``simulate.run.simulate``). Without ``step_graphs`` at :meth:`load`, the
        traces are read again (once)."""
        # the facade: an analyzer's machinery, loaded when first called
        from .graph.whatif import check_rank_edits
        from .simulate.run import simulate
        from .simulate.sources import Costs

        folder = self.path if self.path is not None else location_of(self.run.folder)
        if isinstance(folder, str):
            raise UsageError(f"{folder}: simulate replays local runs only")
        run = self._graph_run
        check_rank_edits(edits, (r.rank for r in run.ranks), f"run {self.name!r}")
        found = simulate(folder, run, list(bucket_caps_mib),
                         list(world_sizes) if world_sizes is not None else None,
                         costs if costs is not None else Costs(), ready_order, measured,
                         tuple(edits), shared_cores=shared_cores)
        return SimulationResult(self.name, found.world_size, tuple(found.steps),
                                tuple(found.edits), tuple(found.predictions),
                                tuple(found.rows), tuple(found.notes), found)

    def gate(self, baseline: Job | str | Path, rules: Sequence[str] = (),
             tolerance: float = 0.0) -> GateResult:
        """``ddpprof gate``: each rule (``gate.parse_rule``; by default
        ``overlap_pct >= baseline - 2``) on this job against ``baseline``: another job, or an
        ``analyze --json`` file."""
        # the facade: an analyzer's machinery, loaded when first called
        from .gate import rules as gating

        parsed = [gating.parse_rule(text) for text in rules or (gating.DEFAULT_RULE,)]
        with_findings = any(r.metric.startswith("findings") for r in parsed)
        now = self._gate_runs(with_findings)
        if isinstance(baseline, Job):
            # paired by the caller, not by name: a trace ddpprof did not record is keyed by
            # its run's name, so only a recorded run's configuration is checked
            (before,) = baseline._gate_runs(with_findings)
            key = before.key if baseline.run.manifest.config is not None else now[0].key
            paired = [replace(before, name=self.name, key=key)]
        else:
            paired = gating.load_runs(Path(baseline))
        return GateResult(tuple(gating.evaluate(parsed, now, paired, tolerance)))

    # --- what the analyzers share ------------------------------------------------------------

    def _gate_runs(self, with_findings: bool) -> list[GateRun]:
        found = list(self.findings().findings) if with_findings else None
        return runs_of(to_json_document(Analysis([self.run], []), found), self.name)

    @cached_property
    def _graph_run(self) -> RunResult:
        """The run with its steps' graphs: this one where the analysis made them, else the
        sources analyzed again with them, the run matched by its traces."""
        if self.options.step_graphs:
            return self.run
        options = replace(self.options, step_graphs=True, replay_graphs=False)
        paths = {r.path for r in self.run.ranks}
        again = analyze_paths(list(self._sources), options)
        for run in again.runs:
            if {r.path for r in run.ranks} == paths:
                return run
        raise UsageError(f"{self.run.folder}: its traces changed since they were loaded")

