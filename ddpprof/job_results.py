"""The frozen results of :class:`ddpprof.Job`'s analyzers: each a view of what the analysis
already computed (``ddpprof.analysis``, ``ddpprof.metrics``, ``ddpprof.graph``,
``ddpprof.diff``, ``ddpprof.simulate``, ``ddpprof.gate``), never a metric of its own. Every
metric keeps the definition its source gives it (docs/metrics.md); times are µs where a field
says ``_us``, ms where it says ``_ms``. A result with a table has ``to_pandas()``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from .advice import Finding
from .analysis.buckets import BucketRow
from .analysis.group_rows import GroupRankRow, GroupRow
from .analysis.results import RankResult
from .gate.rules import Verdict
from .metrics.tax import TaxRow
from .simulate.results import Prediction, SimulateRow

if TYPE_CHECKING:
    import pandas

    # types only: the graphs' machinery is imported where a replay is made, a diff and the
    # memory model where a job makes one, none of them by analyze
    from .diff.compare import PairDiff
    from .graph.contended import Tax
    from .graph.model import StepGraph
    from .graph.summary import StepPath
    from .memory.estimate import RankComparison, StageEstimate
    from .simulate.results import Simulation


def frame(rows: Sequence[Any], row_type: type) -> pandas.DataFrame:
    """One row per dataclass or msgspec Struct of ``rows`` (each a ``row_type``), one column
    per field: the columns are there when no row is."""
    import pandas  # pandas: optional, for DataFrames

    names = [f.name for f in dataclasses.fields(row_type)] if dataclasses.is_dataclass(
        row_type) else [f.name for f in msgspec.structs.fields(row_type)]
    return pandas.DataFrame([
        dataclasses.asdict(r) if dataclasses.is_dataclass(r) and not isinstance(r, type)
        else msgspec.to_builtins(r) for r in rows], columns=names)


@dataclass(frozen=True)
class RankBreakdown:
    """One rank's analyzed window (``metrics.breakdown.Breakdown``): where its time went."""

    rank: int
    kind: str                       # "gpu" or "cpu"
    steps: int                      # steps analyzed (the whole trace counts as one)
    window_us: float
    compute_us: float
    non_compute_us: float
    idle_us: float
    comm_us: float
    overlap_us: float
    exposed_comm_us: float
    compute_pct: float
    non_compute_pct: float
    idle_pct: float
    overlap_pct: float | None       # None: no communication
    exposed_comm_pct: float

    @classmethod
    def of(cls, rank: RankResult) -> RankBreakdown:
        b = rank.breakdown
        return cls(rank.rank, rank.kind, rank.steps, b.window_us, b.compute_us,
                   b.non_compute_us, b.idle_us, b.comm_us, b.overlap_us, b.exposed_comm_us,
                   b.compute_pct, b.non_compute_pct, b.idle_pct, b.overlap_pct,
                   b.exposed_comm_pct)


@dataclass(frozen=True)
class BreakdownResult:
    run: str
    last_step: str                  # the analyzed window (``trace.last_step.LastStep``)
    ranks: tuple[RankBreakdown, ...]

    def to_pandas(self) -> pandas.DataFrame:
        return frame(self.ranks, RankBreakdown)


@dataclass(frozen=True)
class RankOverlap:
    """One rank's overlap: the share of its communication time that compute hides, overall
    and per collective kind."""

    rank: int
    comm_us: float                  # |communication lane|
    overlap_us: float               # |compute ∩ communication|
    exposed_comm_us: float          # |communication \\ compute|
    overlap_pct: float | None
    #: (collective kind, its overlap_pct), by kind
    by_kind: tuple[tuple[str, float | None], ...]

    def flat(self) -> dict[str, Any]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name != "by_kind"}
        return {**fields, **{f"{kind}_overlap_pct": pct for kind, pct in self.by_kind}}


@dataclass(frozen=True)
class OverlapResult:
    run: str
    ranks: tuple[RankOverlap, ...]

    def to_pandas(self) -> pandas.DataFrame:
        """One row per rank; a column ``<kind>_overlap_pct`` per collective kind."""
        import pandas  # pandas: optional, for DataFrames

        return pandas.DataFrame([r.flat() for r in self.ranks])


@dataclass(frozen=True)
class CollectiveKind:
    """One rank's calls of one collective kind (``metrics.comm.collective_stats``)."""

    rank: int
    collective: str
    calls: int
    total_us: float                 # the calls' durations summed
    mean_us: float
    bytes_per_call: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    overlap_pct: float | None       # the share of this kind's time that compute hides


@dataclass(frozen=True)
class CollectivesResult:
    run: str
    rows: tuple[CollectiveKind, ...]   # by rank, then kind; empty without collectives

    def to_pandas(self) -> pandas.DataFrame:
        return frame(self.rows, CollectiveKind)


@dataclass(frozen=True)
class ProcessGroupsResult:
    """The run's process groups (``analysis.group_rows``): each group name's figures (means
    over its ranks) and each rank's; both empty without collectives."""

    run: str
    groups: tuple[GroupRow, ...]
    ranks: tuple[GroupRankRow, ...]

    def to_pandas(self) -> pandas.DataFrame:
        return frame(self.groups, GroupRow)


@dataclass(frozen=True)
class RankWait:
    """One rank's collective time split into waiting for the last member and transferring
    (``metrics.waits.WaitSplit``)."""

    rank: int
    transfer_us: float
    wait_us: float
    caused_wait_us: float           # the others' wait on calls this rank joined last
    waiting_us: float               # wall time waiting for any peer
    matched_calls: int


@dataclass(frozen=True)
class WaitsResult:
    """Empty (``ranks`` ``()``, ``slowest_rank`` None) for a one-rank run: nobody to wait
    for."""

    run: str
    slowest_rank: int | None        # made the others wait the most
    ranks: tuple[RankWait, ...]

    def to_pandas(self) -> pandas.DataFrame:
        return frame(self.ranks, RankWait)


@dataclass(frozen=True)
class BucketsResult:
    """The all-reduce buckets of the middle analyzed step of the run's first rank
    (``analysis.buckets``), as ``analyze --json`` gives them; empty where the trace shows no
    gradient all-reduces (``rank`` and ``step`` None)."""

    run: str
    rank: int | None
    step: str | None
    first_gradient_ms: float | None
    backward_end_ms: float | None
    buckets: tuple[BucketRow, ...]

    def to_pandas(self) -> pandas.DataFrame:
        return frame(self.buckets, BucketRow)


@dataclass(frozen=True)
class OverlapTaxResult:
    """How much longer work runs overlapped than alone (``metrics.tax``); empty where the run
    gives no samples (no collectives beside compute)."""

    run: str
    rows: tuple[TaxRow, ...]
    compute_tax_pct: float | None       # pooled over work and size classes
    comm_tax_pct: float | None

    def to_pandas(self) -> pandas.DataFrame:
        return frame(self.rows, TaxRow)


@dataclass(frozen=True)
class CriticalPathResult:
    """Each analyzed step's critical path across ranks (``graph.summary.run_paths``), the
    graphs they were found on (``graphs``, in ``steps``' order) and the overlap tax the
    what-ifs replay under (``tax``)."""

    run: str
    steps: tuple[StepPath, ...]
    notes: tuple[str, ...]
    graphs: tuple[StepGraph, ...] = dataclasses.field(repr=False)
    tax: Tax

    def to_pandas(self) -> pandas.DataFrame:
        """The path's split: one row per step, category and rank."""
        import pandas  # pandas: optional, for DataFrames

        # the facade: an analyzer's machinery, loaded when first called
        from .graph.summary import SplitRow

        return pandas.DataFrame([{"step": s.step, **msgspec.to_builtins(row)}
                                 for s in self.steps for row in s.split],
                                columns=["step", *(f.name for f in msgspec.structs.fields(
                                    SplitRow))])


@dataclass(frozen=True)
class FindingsResult:
    """What to change (``ddpprof.advice``), ranked by estimated gain."""

    run: str                        # "" for a JobSet's, over every run (each finding names its)
    findings: tuple[Finding, ...]

    def to_pandas(self) -> pandas.DataFrame:
        import pandas  # pandas: optional, for DataFrames

        return pandas.DataFrame([f.to_dict() for f in self.findings],
                                columns=list(Finding("", "", "", "").to_dict()))


@dataclass(frozen=True)
class MemoryResult:
    """The run's measured steady-state memory per rank beside the estimate for its variant
    (``memory.estimate.compare_run``)."""

    run: str
    variant: str
    model: str
    estimate: StageEstimate
    ranks: tuple[RankComparison, ...]

    def to_pandas(self) -> pandas.DataFrame:
        import pandas  # pandas: optional, for DataFrames

        return pandas.DataFrame([{"rank": r.rank, "estimated_bytes": r.estimated_bytes,
                                  "measured_bytes": r.measured_bytes,
                                  "error_pct": r.error_pct} for r in self.ranks],
                                columns=["rank", "estimated_bytes", "measured_bytes",
                                         "error_pct"])


@dataclass(frozen=True)
class DiffResult:
    """Why one run's step differs from another's (``diff.compare.diff_pair``): ``pair`` holds
    the step's change, its parts, what moved and the configuration's differences."""

    pair: PairDiff

    @property
    def verdict(self) -> str:
        return self.pair.verdict

    @property
    def step_delta_ms(self) -> float:
        return self.pair.step.delta_ms

    def to_pandas(self) -> pandas.DataFrame:
        """The parts: one row each, largest change first."""
        import pandas  # pandas: optional, for DataFrames

        return pandas.DataFrame([{"part": d.label, "before_ms": d.before_ms,
                                  "after_ms": d.after_ms, "delta_ms": d.delta_ms,
                                  "low_ms": d.low_ms, "high_ms": d.high_ms,
                                  "significant": d.significant} for d in self.pair.parts],
                                columns=["part", "before_ms", "after_ms", "delta_ms", "low_ms",
                                         "high_ms", "significant"])


@dataclass(frozen=True)
class SimulationResult:
    """The replay of the run's steps (``simulate.run.simulate``): its own configuration and
    each one asked for, with the edits applied to every row."""

    run: str
    world_size: int
    steps: tuple[str, ...]          # the ProfilerSteps replayed
    edits: tuple[str, ...]
    predictions: tuple[Prediction, ...]
    rows: tuple[SimulateRow, ...]
    notes: tuple[str, ...]
    #: the whole replay (cost model, overlap tax, measured points): what ``--json`` writes
    simulation: Simulation = dataclasses.field(repr=False)

    def to_pandas(self) -> pandas.DataFrame:
        return frame(self.rows, SimulateRow)


@dataclass(frozen=True)
class GateResult:
    """Every rule on the job against its baseline (``gate.evaluate``)."""

    verdicts: tuple[Verdict, ...]

    @property
    def passed(self) -> bool:
        """No check FAILed."""
        return all(v.verdict != "FAIL" for v in self.verdicts)

    def to_pandas(self) -> pandas.DataFrame:
        return frame(self.verdicts, Verdict)
