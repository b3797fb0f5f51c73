"""What-if replays of a step graph: the recorded graph with edits (``edit``: a bucket cap, a
world size; here: work made faster, a rank delayed), replayed under the overlap tax
(``contended``), and what the step then takes. Pure; definitions in ``docs/critical-path.md``
and ``docs/simulate.md``.

* ``--faster CLASS=PCT``: every compute node whose name is in the class
  (``work_names.WORK_CLASSES``: ``gemm``, ``compute``) does ``PCT`` % less work
  (``work × (1 − PCT/100)``).
* ``--faster-network PCT``: every collective's transfer does ``PCT`` % less work.
* ``--rank-delay RANK=US``: the rank starts its step ``US`` µs later (negative: sooner, but
  never before the earliest rank's start). The step length is measured from the home rank's
  replayed start, so a delayed rank that ends the step counts from its own later start.

Gaps (untraced CPU time, launch latency, idle) are kept as recorded; waits are not (they are
re-derived from when the awaited collectives end), which is what makes a faster collective or
a late rank move the other ranks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..core.errors import UsageError
from ..metrics import intervals as iv
from ..render.table import ranks_text
from ..trace.work_names import WORK_CLASSES
from . import contended
from .contended import Roles, Tax
from .edit import (
    CollectiveCost,
    Editable,
    Rebucket,
    WorldSize,
    optimizer_start,
    rebucket,
    scale_world,
)
from .model import NodeKind, StepGraph
from .path import Schedule, period_us

OPTIONS = ("faster", "faster-network", "rank-delay")


@dataclass(frozen=True)
class Edit:
    """One change to replay: ``kind`` is ``faster``, ``faster-network`` or ``rank-delay``."""

    kind: str
    target: str          # the work class (faster), the rank (rank-delay), or ""
    amount: float        # percent (faster, faster-network) or µs (rank-delay)

    @property
    def label(self) -> str:
        if self.kind == "faster":
            return f"{self.target} {self.amount:g}% faster"
        if self.kind == "faster-network":
            return f"network {self.amount:g}% faster"
        return f"rank {self.target} {self.amount:+g} µs at the start"


def parse_edit(option: str, text: str) -> Edit:
    """``--faster gemm=20``, ``--faster-network 30``, ``--rank-delay 1=-500``: one line of
    error naming the option when the value is not understood."""
    try:
        if option == "faster-network":
            edit = Edit(option, "", float(text))
        else:
            target, _, amount = text.partition("=")
            edit = Edit(option, target.strip(), float(amount))
    except ValueError:
        raise UsageError(f"--{option} {text!r}: expected "
                         f"{'PCT' if option == 'faster-network' else 'NAME=NUMBER'}") from None
    if option == "faster" and edit.target not in WORK_CLASSES:
        raise UsageError(f"--faster {text!r}: the class is one of {', '.join(WORK_CLASSES)}")
    if option != "rank-delay" and not 0 <= edit.amount < 100:
        raise UsageError(f"--{option} {text!r}: the percentage must be in [0, 100)")
    if option == "rank-delay" and not edit.target.isdigit():
        raise UsageError(f"--rank-delay {text!r}: RANK must be a rank number")
    if not np.isfinite(edit.amount):
        raise UsageError(f"--{option} {text!r}: not a finite number")
    return edit


def parse_edits(faster: Sequence[str], faster_network: Sequence[str],
                rank_delay: Sequence[str]) -> list[Edit]:
    """Every ``--faster``, ``--faster-network`` and ``--rank-delay`` given, parsed."""
    return [parse_edit(option, text) for option, texts in zip(
        OPTIONS, (faster, faster_network, rank_delay), strict=True) for text in texts]


@dataclass(frozen=True)
class Outcome:
    """A replay: the step; per rank, in rank order, its collectives' time (arrival to end,
    what ``analyze`` counts as communication) and the part of it no compute hid; and the
    gradient collectives per step."""

    step_us: float
    comm_by_rank_us: np.ndarray
    exposed_by_rank_us: np.ndarray
    buckets: int | None
    schedule: Schedule
    graph: StepGraph

    @property
    def exposed_us(self) -> float:
        """Exposed communication, mean over ranks."""
        return float(self.exposed_by_rank_us.mean()) if self.exposed_by_rank_us.size else 0.0

    @property
    def overlap_pct(self) -> float | None:
        """This step's overlap as ``analyze`` would measure a one-step window: per rank
        ``1 − exposed / communication``, mean over the ranks that communicated."""
        return overlap_pct([self])


def overlap_pct(outcomes: Sequence[Outcome]) -> float | None:
    """Overlap over several replayed steps as ``analyze`` measures a window of them: per
    rank, ``1 − Σ exposed / Σ communication`` over the steps, then the mean over the ranks
    that communicated (``analyze``'s run overlap: its ranks' mean). None without
    communication. On unedited steps it is ``analyze``'s overlap of those steps exactly."""
    if not outcomes:
        return None
    comm = np.sum([o.comm_by_rank_us for o in outcomes], axis=0)
    exposed = np.sum([o.exposed_by_rank_us for o in outcomes], axis=0)
    talked = comm > 0
    return float(np.mean(100 * (1 - exposed[talked] / comm[talked]))) if talked.any() else None


def _simple(edit: Editable, edits: list[Edit]) -> None:
    """``--faster``, ``--faster-network`` and ``--rank-delay`` on the work and releases."""
    for change in edits:
        for k, node in enumerate(edit.nodes):
            faster = change.kind == "faster" and node.kind == NodeKind.COMPUTE and bool(
                WORK_CLASSES[change.target].search(node.name))
            if faster or (change.kind == "faster-network"
                          and node.kind == NodeKind.COMMUNICATION):
                edit.work[k] *= 1 - change.amount / 100
            elif change.kind == "rank-delay" and node.rank == int(change.target) and \
                    edit.release[k] == edit.release[k]:
                edit.release[k] = max(edit.release[k] + change.amount, edit.graph.origin_us)


def replay_edited(graph: StepGraph, tax: Tax | None = None, edits: Sequence[Edit] = (),
                  rebucketing: Rebucket | None = None, world: WorldSize | None = None,
                  cost: CollectiveCost | None = None, work_us: np.ndarray | None = None
                  ) -> Outcome:
    """``graph`` replayed under ``tax`` with ``edits``, re-bucketed at ``rebucketing``'s cap
    and at ``world``'s world size (both need ``cost``); ``work_us``: its recorded work under
    ``tax``, if known (``contended.recorded_work``)."""
    tax = tax or Tax.none()
    if work_us is None:
        work_us = contended.recorded_work(graph, Roles.of(graph), tax)
    edit = Editable.of(graph, work_us)
    world_size = world.world_size if world else None
    if rebucketing is not None:
        assert cost is not None
        rebucket(edit, rebucketing, cost, world_size or _ranks(graph))
    if world is not None:
        assert cost is not None
        scale_world(edit, world, cost)
    _simple(edit, list(edits))
    edited, work, release = edit.finished()
    edited_roles = Roles.of(edited)
    schedule = contended.replay(edited, work, edited_roles, tax, release_us=release,
                                together=edit.together)
    comm, exposed = communication(edited, schedule)
    return Outcome(period_us(edited, schedule), comm, exposed,
                   _count(edit.buckets) if rebucketing else _recorded_buckets(graph),
                   schedule, edited)


def _ranks(graph: StepGraph) -> int:
    return len({n.rank for n in graph.nodes})


def _count(buckets: dict[int, int]) -> int | None:
    return max(buckets.values()) if buckets else None


def _recorded_buckets(graph: StepGraph) -> int | None:
    """The most collectives of one kind a rank ran before its optimizer."""
    counts: dict[tuple[int, str], int] = {}
    begins = {rank: optimizer_start(graph, rank) for rank in {c.rank for c in graph.collectives}}
    for c in graph.collectives:
        if graph.nodes[c.arrive].start_us < begins[c.rank]:
            counts[(c.rank, c.kind)] = counts.get((c.rank, c.kind), 0) + 1
    return max(counts.values()) if counts else None


def communication(graph: StepGraph, s: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, in rank order, |M| and |M \\ C|: M the union of the collectives' spans (from
    their arrival, or their transfer's start, to their transfer's end), C the rank's
    compute."""
    ranks = sorted({n.rank for n in graph.nodes})
    kind = np.array([n.kind for n in graph.nodes], dtype=object)
    rank = np.array([n.rank for n in graph.nodes])
    comm, exposed = [], []
    for r in ranks:
        mine = rank == r
        spans = mine & ((kind == NodeKind.COMMUNICATION) | (kind == NodeKind.ARRIVE))
        transfers = np.flatnonzero(mine & (kind == NodeKind.COMMUNICATION))
        # an arrive opens the span its transfer closes: the same lane's next transfer
        starts, ends = list(s.start_us[transfers]), list(s.end_us[transfers])
        for a in np.flatnonzero(spans & (kind == NodeKind.ARRIVE)).tolist():
            lane = graph.nodes[a].lane
            after = [t for t in transfers.tolist() if graph.nodes[t].lane == lane
                     and s.start_us[t] >= s.start_us[a]]
            if after:
                t = min(after, key=lambda t: s.start_us[t])
                starts.append(s.start_us[a])
                ends.append(s.start_us[t])
        m = iv.union(np.array(starts), np.array(ends))
        compute = mine & (kind == NodeKind.COMPUTE)
        c = iv.union(s.start_us[compute], s.end_us[compute])
        comm.append(iv.length(m))
        exposed.append(iv.length(iv.subtract(m, c)))
    return np.array(comm, dtype=np.float64), np.array(exposed, dtype=np.float64)


def edited_step_us(graph: StepGraph, edits: list[Edit], tax: Tax | None = None) -> float:
    """The step (``path.period_us``) of ``graph`` replayed with all of ``edits`` applied
    together."""
    return replay_edited(graph, tax, edits).step_us


def check_rank_edits(edits: Iterable[Edit], ranks: Iterable[int], where: str) -> None:
    """A ``UsageError`` naming the ranks ``where`` (a run) has, for a ``--rank-delay`` of
    another."""
    there = set(ranks)
    for edit in edits:
        if edit.kind == "rank-delay" and int(edit.target) not in there:
            raise UsageError(f"--rank-delay {edit.target}={edit.amount:g}: {where} has no rank "
                             f"{edit.target} (its ranks: {ranks_text(there)})")
