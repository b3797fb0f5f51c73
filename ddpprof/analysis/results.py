"""The typed results of an analysis, from one rank up to a set of runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..metrics.breakdown import Breakdown
from ..metrics.comm import CollectiveCalls, CollectiveStats
from ..metrics.groups import GroupFigures
from ..metrics.tax import OverlapTax, RankTaxSamples
from ..metrics.waits import WaitSplit
from ..run.manifest import RunManifest
from ..trace.last_step import LastStep
from .buckets import BucketTimeline
from .parts import RankParts

if TYPE_CHECKING:
    from ..graph.build import RankStep
    from .groups import RunGroup


@dataclass(frozen=True)
class StepRow:
    """One ProfilerStep's breakdown (or the whole trace's, when it has no steps)."""

    step: str
    breakdown: Breakdown


@dataclass(frozen=True)
class CommBar:
    start_us: float                 # from the timeline's origin
    end_us: float
    collective: str
    size_bytes: int | None


@dataclass(frozen=True)
class Timeline:
    """One representative step of one rank, as lanes (times in µs from the step's start)."""

    step: str
    window_us: float
    compute: list[tuple[float, float]]
    comm: list[CommBar]
    truncated: int = 0              # bars left out to keep the page small


@dataclass(frozen=True)
class HostSignals:
    """What the host was doing while the step ran, for the advice (``ddpprof.advice``)."""

    dataloader_us: float             # in the data loader's spans, inside the window
    idle_host_busy_us: float | None  # GPU: device idle while the host was busy issuing work
    #: CPU: in stretches of tiny ops (``metrics.dispatch``), inside the window
    tiny_op_stretch_us: float | None = None


@dataclass
class RankResult:
    path: str
    rank: int
    world_size: int | None
    backend: str | None
    kind: str                       # "gpu" or "cpu"
    last_step: LastStep
    steps: int                      # steps analyzed (the whole trace counts as one)
    total_steps: int                # ProfilerSteps in the trace
    breakdown: Breakdown
    collectives: dict[str, CollectiveStats]
    overlap_by_kind: dict[str, float | None]
    calls: CollectiveCalls          # for matching across ranks (never written out)
    #: Communication per process group (``ddpprof.metrics.groups``), by group name.
    process_groups: list[GroupFigures] = field(default_factory=list)
    per_step: list[StepRow] = field(default_factory=list)
    timeline: Timeline | None = None
    buckets: BucketTimeline | None = None   # the middle analyzed step's all-reduce buckets
    host: HostSignals | None = None
    notes: list[str] = field(default_factory=list)
    wait: WaitSplit | None = None   # set by the run, once every rank is in
    #: Per call, when its transfer began: the last member's arrival (``metrics.waits``), set
    #: by the run once every rank is in; a lone rank's calls transfer from their start.
    transfer_start_us: np.ndarray | None = None
    #: This rank's share of the graph of each analyzed step (``AnalysisOptions.step_graphs``,
    #: or ``replay_graphs`` for a run ddpprof recorded whose gradients were bucketed).
    graph_steps: list[RankStep] | None = None
    #: What the trace gives the run's overlap tax (never written out).
    tax_samples: RankTaxSamples | None = None
    parts: RankParts | None = None  # each step cut into parts (``ddpprof diff``)


@dataclass
class RunResult:
    name: str
    folder: str
    manifest: RunManifest
    ranks: list[RankResult]
    last_step: LastStep
    missing_ranks: list[tuple[int, int]]   # inclusive ranges of ranks without a trace
    notes: list[str] = field(default_factory=list)
    slowest_rank: int | None = None        # the rank that made the others wait the most
    status: str | None = None              # the run.json status, None without a manifest
    overlap_tax: OverlapTax | None = None  # see ddpprof.metrics.tax
    process_groups: list[RunGroup] = field(default_factory=list)   # ``analysis.groups``


@dataclass(frozen=True)
class RunProblem:
    """A run that is not in the table: it could not be analyzed, or its recording failed."""

    run: str
    error: str
    status: str | None = None       # "failed" / "interrupted" for a recording that did not end
    folder: str | None = None       # the run's folder, where it has one


@dataclass
class Analysis:
    runs: list[RunResult]
    errors: list[RunProblem]        # runs that could not be analyzed
    unfinished: list[RunProblem] = field(default_factory=list)  # failed or interrupted runs
    #: Folders that hold JSON but no trace, left out because other runs hold traces.
    skipped: list[RunProblem] = field(default_factory=list)
