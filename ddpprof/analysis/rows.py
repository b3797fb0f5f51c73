"""Rows: the flat, typed view of results that every output derives from (the terminal table,
CSV, JSON, the HTML report and the gate).

A rank row holds one rank's metrics; a run row the mean over its ranks (with min and max for
the shares). Times are ms, per optimizer step where named so: one ProfilerStep is one
optimizer step (``ddpprof record`` steps the profiler after each ``optimizer.step()``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from ..core.units import MIB
from ..metrics.comm import CollectiveStats
from ..run.manifest import MemoryRow
from .group_rows import group_rows, rank_group_rows
from .profile import profile_json, run_profile
from .results import Analysis, RankResult, RunProblem, RunResult, StepRow

if TYPE_CHECKING:
    from ..graph.summary import CriticalPathSection

#: 6: ``profile.config.bucket_cap_mib`` (run.json's field, ``bucket_cap_mb`` before);
#: 5: metrics named as everywhere else (``exposed_comm_pct``, was ``comm_overhead_pct``;
#: ``bucket_cap_mib``, was ``bucket_cap_mb``: ``ddpprof.metrics.registry.RENAMED``);
#: 4: ``process_groups`` of each run and rank; 3: ``step_ms`` and each run's ``profile``
#: (``ddpprof diff``'s parts); version 2 reads the same without them.
SCHEMA_VERSION = 6
#: Collective kinds that get columns of their own in every row (others are summed in
#: ``other_collective_calls``).
COLUMN_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
SHARES = ("compute_pct", "non_compute_pct", "idle_pct", "overlap_pct", "exposed_comm_pct")


@dataclass(frozen=True)
class CollectiveRow:
    calls: float                    # a whole number for a rank; the mean in a run row
    calls_per_step: float
    ms: float
    ms_per_step: float
    bytes_per_call: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    overlap_pct: float | None       # the share of this kind's time that compute hides

    @classmethod
    def of(cls, stats: CollectiveStats | None, steps: int, overlap: float | None
           ) -> CollectiveRow:
        if stats is None:
            return cls(0, 0.0, 0.0, 0.0, None, None, None, None)
        return cls(stats.calls, stats.calls / steps, stats.total_us / 1e3,
                   stats.total_us / 1e3 / steps, stats.bytes_per_call, stats.algbw_gbps,
                   stats.busbw_gbps, overlap)


def _kind_columns(collectives: dict[str, CollectiveRow]) -> dict[str, Any]:
    return {f"{kind}_{key}": value for kind in COLUMN_KINDS
            for key, value in asdict(collectives[kind]).items()}


@dataclass(frozen=True)
class RankMetrics:
    """Every metric of one rank (or, in a run row, their mean over the run's ranks)."""

    window_ms: float
    step_ms: float                  # the window over the steps analyzed
    compute_ms: float
    compute_pct: float
    non_compute_pct: float
    idle_pct: float
    overlap_pct: float | None
    exposed_comm_pct: float
    comm_ms_per_step: float
    exposed_comm_ms_per_step: float
    comm_transfer_ms_per_step: float | None   # see ddpprof.metrics.waits
    comm_wait_ms_per_step: float | None
    caused_wait_ms_per_step: float | None
    other_collective_calls: float
    other_collective_calls_per_step: float
    collectives: dict[str, CollectiveRow]

    def to_dict(self) -> dict[str, Any]:
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "collectives"}
        return {**flat, **_kind_columns(self.collectives)}

    @classmethod
    def mean(cls, members: list[RankMetrics]) -> RankMetrics:
        """The mean of each metric over ``members``, skipping unknown (None) values."""
        values = {f.name: _mean_any([getattr(m, f.name) for m in members])
                  for f in fields(cls) if f.name != "collectives"}
        kinds = dict.fromkeys(k for m in members for k in m.collectives)
        collectives = {kind: CollectiveRow(**{
            f.name: _mean_any([getattr(m.collectives[kind], f.name) for m in members
                               if kind in m.collectives]) for f in fields(CollectiveRow)})
            for kind in kinds}
        return cls(**values, collectives=collectives)


@dataclass(frozen=True)
class RankRow:
    rank: int
    kind: str
    steps: int
    metrics: RankMetrics

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "kind": self.kind, "steps": self.steps,
                **self.metrics.to_dict()}


def rank_row(rank: RankResult) -> RankRow:
    b, steps = rank.breakdown, max(rank.steps, 1)
    collectives = {kind: CollectiveRow.of(stats, steps, rank.overlap_by_kind.get(kind))
                   for kind, stats in rank.collectives.items()}
    for kind in COLUMN_KINDS:
        collectives.setdefault(kind, CollectiveRow.of(None, steps, None))
    others = sum(s.calls for k, s in rank.collectives.items() if k not in COLUMN_KINDS)
    wait = rank.wait

    def per_step(us: float) -> float:
        return us / 1e3 / steps

    return RankRow(rank=rank.rank, kind=rank.kind, steps=rank.steps, metrics=RankMetrics(
        window_ms=b.window_us / 1e3, step_ms=b.window_us / 1e3 / steps,
        compute_ms=b.compute_us / 1e3,
        compute_pct=b.compute_pct, non_compute_pct=b.non_compute_pct, idle_pct=b.idle_pct,
        overlap_pct=b.overlap_pct, exposed_comm_pct=b.exposed_comm_pct,
        comm_ms_per_step=per_step(b.comm_us),
        exposed_comm_ms_per_step=per_step(b.exposed_comm_us),
        comm_transfer_ms_per_step=per_step(wait.transfer_us) if wait else None,
        comm_wait_ms_per_step=per_step(wait.wait_us) if wait else None,
        caused_wait_ms_per_step=per_step(wait.caused_wait_us) if wait else None,
        other_collective_calls=others, other_collective_calls_per_step=others / steps,
        collectives=collectives))


@dataclass(frozen=True)
class ShareRange:
    """The lowest and highest value over a run's ranks of each share."""

    compute_pct_min: float | None
    compute_pct_max: float | None
    non_compute_pct_min: float | None
    non_compute_pct_max: float | None
    idle_pct_min: float | None
    idle_pct_max: float | None
    overlap_pct_min: float | None
    overlap_pct_max: float | None
    exposed_comm_pct_min: float | None
    exposed_comm_pct_max: float | None

    @classmethod
    def of(cls, members: list[RankMetrics]) -> ShareRange:
        bounds = {}
        for share in SHARES:
            values = [getattr(m, share) for m in members if getattr(m, share) is not None]
            bounds[f"{share}_min"] = min(values) if values else None
            bounds[f"{share}_max"] = max(values) if values else None
        return cls(**bounds)


@dataclass(frozen=True)
class RunRow:
    """One run: configuration from ``run.json`` where there is one, every rank metric as the
    mean over ranks, the shares also as min and max over ranks."""

    run: str
    status: str | None
    variant: str | None
    model: str | None
    world_size: int | None
    backend: str | None
    kind: str
    ranks: int
    missing_ranks: str | None
    steps: int
    last_step: str
    global_batch: int | None
    grad_accum: int | None
    bucket_cap_mib: float | None
    metrics: RankMetrics             # means over ranks
    share_range: ShareRange
    slowest_rank: int | None         # made the others wait the most (wait/transfer split)
    straggler_rank: int              # slowest_rank, else the rank with the most compute
    samples_per_s: float | None
    expected_allreduces_per_step: int | None
    peak_memory_mib: float | None    # the highest rank's: CUDA peak allocated, else peak RSS
    state_memory_mib: float | None   # mean over ranks: params + grads + optimizer state
    compute_tax_pct: float | None    # the overlap tax (ddpprof.metrics.tax), pooled
    comm_tax_pct: float | None

    def to_dict(self) -> dict[str, Any]:
        flat = {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("metrics", "share_range")}
        return {**flat, **self.metrics.to_dict(), **asdict(self.share_range)}


def _mean(values: list[Any]) -> float | None:
    numbers = [v for v in values if v is not None]
    return statistics.fmean(numbers) if numbers else None


def _mean_any(values: list[Any]) -> Any:
    """:func:`_mean`, for a field typed float: never None there (every member has it)."""
    return _mean(values)




def ranges_text(ranges: list[tuple[int, int]]) -> str | None:
    """[(1, 1), (3, 7)] -> "1, 3-7"."""
    if not ranges:
        return None
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def run_row(run: RunResult) -> RunRow:
    rows = [rank_row(r) for r in run.ranks]
    members = [row.metrics for row in rows]
    most_compute = max(rows, key=lambda r: r.metrics.compute_ms).rank
    first = run.ranks[0]
    manifest, throughput = run.manifest, run.manifest.throughput
    config = manifest.config   # None: not a run ddpprof recorded
    return RunRow(
        run=run.name, status=run.status, variant=config.variant if config else None,
        model=config.model if config else None,
        world_size=first.world_size or (config.world_size if config else None),
        backend=first.backend or (config.backend if config else None), kind=first.kind,
        ranks=len(run.ranks), missing_ranks=ranges_text(run.missing_ranks), steps=first.steps,
        last_step=run.last_step.value, global_batch=config.global_batch if config else None,
        grad_accum=config.grad_accum if config else None,
        bucket_cap_mib=config.bucket_cap_mib if config else None,
        metrics=RankMetrics.mean(members), share_range=ShareRange.of(members),
        slowest_rank=run.slowest_rank,
        straggler_rank=run.slowest_rank if run.slowest_rank is not None else most_compute,
        samples_per_s=throughput.samples_per_s if throughput else None,
        expected_allreduces_per_step=manifest.measured.allreduces_per_sync
        if manifest.measured else None,
        peak_memory_mib=max((m for m in map(peak_memory_mib, run.manifest.memory or [])
                             if m is not None), default=None),
        state_memory_mib=_mean([row.state_bytes / MIB for row in run.manifest.memory or []
                                if row.state_bytes is not None]),
        compute_tax_pct=run.overlap_tax.pct("compute") if run.overlap_tax else None,
        comm_tax_pct=run.overlap_tax.pct("communication") if run.overlap_tax else None)


def peak_memory_mib(row: MemoryRow) -> float | None:
    """A rank's peak memory in MiB: the CUDA allocator's peak where there is one, else the
    process's peak resident set (CPU)."""
    peak = row.peak_allocated_bytes if row.peak_allocated_bytes is not None else (
        row.peak_rss_bytes)
    return None if peak is None else peak / MIB


def memory_of(run: RunResult, rank: int) -> MemoryRow | None:
    return next((row for row in run.manifest.memory or [] if row.rank == rank), None)


def _collectives_json(rank: RankResult) -> dict[str, Any]:
    return {kind: {**asdict(stats), "mean_us": stats.mean_us,
                   "overlap_pct": rank.overlap_by_kind.get(kind)}
            for kind, stats in rank.collectives.items()}


def _buckets_json(run: RunResult) -> dict[str, Any] | None:
    timeline = run.ranks[0].buckets
    return None if timeline is None else {"rank": run.ranks[0].rank, **asdict(timeline)}


def _problem(problem: RunProblem) -> dict[str, Any]:
    return {"run": problem.run, "error": problem.error, "status": problem.status}


class Serializable(Protocol):
    """What the document needs of a finding (``ddpprof.advice.Finding``, a layer above the
    analysis): its JSON form."""

    def to_dict(self) -> dict[str, Any]: ...


def to_json_document(analysis: Analysis, findings: Sequence[Serializable] | None = None,
                     critical_path: CriticalPathSection | None = None) -> dict[str, Any]:
    """The stable ``--json`` schema (the gate's input), built once, whole; ``findings`` are
    ``ddpprof.advice.Finding``s, ``critical_path`` the steps' paths of ``analyze
    --critical-path`` (its section, after the others)."""
    runs = []
    for run in analysis.runs:
        profile = run_profile(run)
        runs.append({
            **run_row(run).to_dict(), "folder": run.folder, "notes": run.notes,
            "buckets": _buckets_json(run),
            "overlap_tax": msgspec.to_builtins(run.overlap_tax.rows) if run.overlap_tax
            else None,
            "profile": profile_json(profile) if profile is not None else None,
            "process_groups": [g.to_dict() for g in group_rows(run)],
            "per_rank": [{**rank_row(r).to_dict(), "path": r.path,
                          "memory": msgspec.to_builtins(memory_of(run, r.rank)),
                          "collectives": _collectives_json(r),
                          "process_groups": [g.to_dict() for g in rank_group_rows(run, r.rank)],
                          **({"per_step": [StepShares.of(run.name, r.rank, s).step_json()
                                           for s in r.per_step]} if r.per_step else {})}
                         for r in run.ranks],
        })
    return {"schema": "ddpprof.analyze", "version": SCHEMA_VERSION, "runs": runs,
            "findings": [f.to_dict() for f in findings or []],
            "unfinished": [_problem(p) for p in analysis.unfinished],
            "errors": [_problem(p) for p in analysis.errors],
            **({"critical_path": msgspec.to_builtins(critical_path)}
               if critical_path is not None else {})}


@dataclass(frozen=True)
class StepShares:
    """One rank's ProfilerStep (``--per-step``): its breakdown in µs and its shares."""

    run: str
    rank: int
    step: str
    window_us: float
    compute_us: float
    non_compute_us: float
    idle_us: float
    comm_us: float
    exposed_comm_us: float
    compute_pct: float
    non_compute_pct: float
    idle_pct: float
    overlap_pct: float | None
    exposed_comm_pct: float

    @classmethod
    def of(cls, run: str, rank: int, step: StepRow) -> StepShares:
        b = step.breakdown
        return cls(run=run, rank=rank, step=step.step, window_us=b.window_us,
                   compute_us=b.compute_us, non_compute_us=b.non_compute_us, idle_us=b.idle_us,
                   comm_us=b.comm_us, exposed_comm_us=b.exposed_comm_us,
                   compute_pct=b.compute_pct, non_compute_pct=b.non_compute_pct,
                   idle_pct=b.idle_pct, overlap_pct=b.overlap_pct,
                   exposed_comm_pct=b.exposed_comm_pct)

    def step_json(self) -> dict[str, Any]:
        """The rank's ``per_step`` entry in the analyze JSON (without run and rank)."""
        return {k: v for k, v in asdict(self).items() if k not in ("run", "rank")}


def step_rows(analysis: Analysis) -> list[StepShares]:
    """``--per-step``: one row per run, rank and step."""
    return [StepShares.of(run.name, rank.rank, s)
            for run in analysis.runs for rank in run.ranks for s in rank.per_step]
