"""Rows of the per-process-group view (``analysis.groups``): one per group of a run (means over
the ranks with calls in it) and one per group of a rank. The table, the JSON (``process_groups``
of each run and each rank), the HTML report and the gate read these. Times are ms per step.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from ..metrics.groups import GroupFigures
from .groups import INTER, INTRA, RunGroup
from .results import RunResult


@dataclass(frozen=True)
class GroupRankRow:
    """One rank's communication over one process group."""

    name: str
    rank: int
    calls: int
    calls_per_step: float
    bytes_per_step: float | None
    comm_ms_per_step: float              # |⋃ the group's calls|
    exposed_comm_ms_per_step: float      # |⋃ calls \\ compute|
    overlap_pct: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    transfer_ms_per_step: float | None   # metrics.waits, within the group
    wait_ms_per_step: float | None
    caused_wait_ms_per_step: float | None
    locality: str | None                 # "intra-node", "inter-node", None: unknown
    calls_by_kind: dict[str, int]
    queued_ms_per_step: float            # metrics.groups: ready but queued behind other traffic
    queued_behind: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GroupRow:
    """One process group name of a run: each figure the mean over the ranks with calls in it
    (``ranks``), the straggler and the imbalance across them."""

    name: str
    description: str | None
    source: str
    size: int | None                     # ranks per group
    groups: list[list[int]]              # the groups of this name, where their ranks are known
    ranks: int
    calls_per_step: float
    bytes_per_step: float | None
    comm_ms_per_step: float
    exposed_comm_ms_per_step: float
    overlap_pct: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    transfer_ms_per_step: float | None
    wait_ms_per_step: float | None
    straggler_rank: int | None           # made the group's other ranks wait the most
    locality: str | None                 # "intra-node", "inter-node", "mixed"; None: unknown
    intra_node_ms_per_step: float | None
    inter_node_ms_per_step: float | None
    a2a_imbalance: float | None          # metrics.groups.Imbalance.ratio, the worse side
    a2a_imbalance_side: str | None       # "send" or "receive": the side it is of
    a2a_heaviest_rank: int | None
    a2a_split_imbalance: float | None    # over peers, from recorded split sizes
    calls_by_kind_per_step: dict[str, float]
    queued_ms_per_step: float            # the mean over its ranks (metrics.groups)
    queued_behind: str | None            # what the ranks' calls waited for most

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _per_step(us: float, steps: int) -> float:
    return us / 1e3 / steps


def group_rank_row(group: RunGroup, rank: int) -> GroupRankRow:
    f: GroupFigures = group.per_rank[rank]
    steps, wait = group.steps[rank], group.wait.get(rank)
    return GroupRankRow(
        name=group.name, rank=rank, calls=f.calls, calls_per_step=f.calls / steps,
        bytes_per_step=None if f.bytes is None else f.bytes / steps,
        comm_ms_per_step=_per_step(f.comm_us, steps),
        exposed_comm_ms_per_step=_per_step(f.exposed_us, steps), overlap_pct=f.overlap_pct,
        algbw_gbps=f.algbw_gbps, busbw_gbps=f.busbw_gbps,
        transfer_ms_per_step=_per_step(wait.transfer_us, steps) if wait else None,
        wait_ms_per_step=_per_step(wait.wait_us, steps) if wait else None,
        caused_wait_ms_per_step=_per_step(wait.caused_wait_us, steps) if wait else None,
        locality=group.locality.get(rank), calls_by_kind=f.calls_by_kind,
        queued_ms_per_step=_per_step(f.queued_us, steps), queued_behind=f.queued_behind)


def _mean(values: list[Any]) -> float | None:
    numbers = [v for v in values if v is not None]
    return statistics.fmean(numbers) if numbers else None


def group_row(group: RunGroup) -> GroupRow:
    rows = [group_rank_row(group, rank) for rank in sorted(group.per_rank)]

    def mean(key: str) -> float | None:
        return _mean([getattr(r, key) for r in rows])

    where = {r.locality for r in rows}
    split = {kind: sum(r.comm_ms_per_step for r in rows if r.locality == kind) / len(rows)
             for kind in (INTRA, INTER)} if None not in where else None
    kinds = sorted({k for r in rows for k in r.calls_by_kind})
    sides = [(i.ratio, side, i) for side, i in (("send", group.imbalance),
                                                ("receive", group.receive_imbalance)) if i]
    _, side, worse = max(sides, key=lambda s: s[0]) if sides else (None, None, None)
    return GroupRow(
        name=group.name, description=group.description, source=group.source, size=group.size,
        groups=[list(m) for m in sorted(group.members)], ranks=len(rows),
        calls_per_step=mean("calls_per_step") or 0.0, bytes_per_step=mean("bytes_per_step")
        if all(r.bytes_per_step is not None for r in rows) else None,
        comm_ms_per_step=mean("comm_ms_per_step") or 0.0,
        exposed_comm_ms_per_step=mean("exposed_comm_ms_per_step") or 0.0,
        overlap_pct=mean("overlap_pct"), algbw_gbps=mean("algbw_gbps"),
        busbw_gbps=mean("busbw_gbps"), transfer_ms_per_step=mean("transfer_ms_per_step"),
        wait_ms_per_step=mean("wait_ms_per_step"), straggler_rank=group.straggler_rank,
        locality=group.locality_of_run, intra_node_ms_per_step=split[INTRA] if split else None,
        inter_node_ms_per_step=split[INTER] if split else None,
        a2a_imbalance=worse.ratio if worse else None,
        a2a_imbalance_side=side if worse else None,
        a2a_heaviest_rank=worse.heaviest_rank if worse else None,
        a2a_split_imbalance=group.split_imbalance,
        calls_by_kind_per_step={k: statistics.fmean(
            r.calls_by_kind.get(k, 0) / group.steps[r.rank] for r in rows) for k in kinds},
        queued_ms_per_step=mean("queued_ms_per_step") or 0.0,
        queued_behind=_most_waited_for(rows))


def _most_waited_for(rows: list[GroupRankRow]) -> str | None:
    """What the ranks' calls waited for most: each rank's own answer, weighted by its queued
    time."""
    reasons: dict[str, float] = {}
    for row in rows:
        if row.queued_behind is not None:
            reasons[row.queued_behind] = reasons.get(row.queued_behind, 0.0) + \
                row.queued_ms_per_step
    return max(reasons, key=lambda r: (reasons[r], r)) if reasons else None


def group_rows(run: RunResult) -> list[GroupRow]:
    return [group_row(group) for group in run.process_groups]


def rank_group_rows(run: RunResult, rank: int) -> list[GroupRankRow]:
    return [group_rank_row(g, rank) for g in run.process_groups if rank in g.per_rank]
