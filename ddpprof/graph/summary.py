"""A step's critical path as results that cross modules (JSON, tables, the report, the
findings): the split by category and rank, the path as segments, the work on it, and the
what-if replays. Definitions in ``docs/critical-path.md``."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..metrics.tax import OverlapTax
from ..trace.loader import _collector_paused
from .build import RankStep, join_steps
from .contended import Tax
from .model import CycleError, StepGraph
from .path import (
    CATEGORIES,
    IDLE,
    WAITING,
    CriticalPath,
    PathPiece,
    critical_path,
    period_us,
    replay,
)
from .whatif import Edit, edited_step_us

SCHEMA = "ddpprof.critical-path"
VERSION = 2
#: The path's work listed by name: the largest this many.
TOP_WORK = 5


class SplitRow(msgspec.Struct, frozen=True):
    """Path time of one category on one rank (for *waiting for rank*, the rank waited for)."""

    category: str
    rank: int
    us: float
    pct: float               # of the step


class Segment(msgspec.Struct, frozen=True):
    """Consecutive path pieces of one rank, lane and category: ``name`` is the piece that
    took longest, ``pieces`` how many were merged."""

    rank: int
    lane: str
    category: str
    name: str
    start_us: float          # from the step's start (the earliest rank's)
    duration_us: float
    pieces: int


class PathWork(msgspec.Struct, frozen=True):
    """The path's time in one op or kernel name on one rank: what shortening it would save
    (at most: other paths may take over, see the slack)."""

    rank: int
    category: str
    name: str
    us: float
    pct: float


class IdleCause(msgspec.Struct, frozen=True):
    """The path's idle device time by what the device waited for: ``another stream (an event
    wait)``, or ``nothing recorded`` (the trace shows no cause: see the notes)."""

    cause: str
    us: float
    pct: float


class WhatIf(msgspec.Struct, frozen=True):
    edit: str
    step_us: float
    change_pct: float        # against the recorded step (negative: shorter)


class StepPath(msgspec.Struct, frozen=True):
    run: str
    step: str
    step_us: float           # the step's span across ranks = the critical path's length
    home_rank: int           # whose work ends the step
    split: list[SplitRow]
    work: list[PathWork]
    segments: list[Segment]
    what_if: list[WhatIf] = []
    idle: list[IdleCause] = []

    def total_pct(self, category: str) -> float:
        return sum(row.pct for row in self.split if row.category == category)

    def waited_for(self) -> int | None:
        waits = [row for row in self.split if row.category == WAITING and row.us > 0]
        return max(waits, key=lambda row: row.us).rank if waits else None


class CriticalPathSection(msgspec.Struct):
    """The critical paths of some runs' steps: ``analyze --critical-path``'s part of the
    analyze document, and the body of ``critical-path``'s own."""

    steps: list[StepPath]
    notes: list[str]


class CriticalPathDocument(CriticalPathSection):
    """``ddpprof critical-path --json``."""

    schema: str = SCHEMA
    version: int = VERSION


def summarize(run: str, graph: StepGraph, path: CriticalPath,
              edits: Sequence[list[Edit]] = (), tax: Tax | None = None) -> StepPath:
    length = path.length_us
    pct = (lambda us: 100.0 * us / length) if length > 0 else (lambda us: 0.0)
    split = [SplitRow(category, rank, us, pct(us))
             for (category, rank), us in sorted(path.split_us.items(), key=lambda kv: (
                 CATEGORIES.index(kv[0][0]), kv[0][1])) if us > 0]
    by_name: dict[tuple[int, str, str], float] = {}
    for piece in path.pieces:
        if piece.name.startswith(("gap before", "idle: ")) or \
                piece.name == "before its step started":
            continue
        key = (piece.rank, piece.category, piece.name)
        by_name[key] = by_name.get(key, 0.0) + piece.duration_us
    work = [PathWork(rank, category, name, us, pct(us)) for (rank, category, name), us in
            sorted(by_name.items(), key=lambda kv: -kv[1])[:TOP_WORK] if us > 0]
    what_if = []
    base = period_us(graph, replay(graph)) if edits else length
    for group in edits:
        step_us = edited_step_us(graph, group, tax)
        what_if.append(WhatIf(" and ".join(e.label for e in group), step_us,
                              100.0 * (step_us - base) / base if base > 0 else 0.0))
    causes: dict[str, float] = {}
    for piece in path.pieces:
        if piece.category == IDLE:
            cause = piece.name.removeprefix("idle: ") if piece.name.startswith("idle: ") \
                else "before its step started"
            causes[cause] = causes.get(cause, 0.0) + piece.duration_us
    idle = [IdleCause(cause, us, pct(us)) for cause, us in sorted(
        causes.items(), key=lambda kv: -kv[1]) if us > 0]
    return StepPath(run, graph.step, length, path.home_rank, split, work,
                    _segments(path.pieces), what_if, idle)


def _segments(pieces: list[PathPiece]) -> list[Segment]:
    segments: list[Segment] = []
    longest: list[float] = []
    for p in pieces:
        last = segments[-1] if segments else None
        if last and (last.rank, last.lane, last.category) == (p.rank, p.lane, p.category):
            name = p.name if p.duration_us > longest[-1] else last.name
            longest[-1] = max(longest[-1], p.duration_us)
            segments[-1] = Segment(last.rank, last.lane, last.category, name, last.start_us,
                                   p.start_us + p.duration_us - last.start_us, last.pieces + 1)
        elif p.duration_us > 0:
            segments.append(Segment(p.rank, p.lane, p.category, p.name, p.start_us,
                                    p.duration_us, 1))
            longest.append(p.duration_us)
    return segments


def measured_run_paths(run: str, ranks: dict[int, list[RankStep]],
                       overlap_tax: OverlapTax | None, edits: Sequence[list[Edit]] = ()
                       ) -> tuple[list[StepPath], list[StepGraph], list[str], Tax]:
    """:func:`run_paths` with each what-if replayed under the run's measured overlap tax
    (``Tax.measured``), which comes back with them (the findings' replays use it too)."""
    tax = Tax.measured(overlap_tax, [])
    return (*run_paths(run, ranks, edits, tax if edits else None), tax)


@_collector_paused()     # (see ``build.rank_steps``)
def run_paths(run: str, ranks: dict[int, list[RankStep]], edits: Sequence[list[Edit]],
              tax: Tax | None = None) -> tuple[list[StepPath], list[StepGraph], list[str]]:
    """Every analyzed step of one run: its path summary and graph, and notes, from each rank's
    share of the graphs (``build.rank_steps``, made where the analysis read the trace); the
    what-ifs replayed under ``tax``."""
    graphs, notes = join_steps(dict(sorted(ranks.items())))
    steps, kept = [], []
    for graph in graphs:
        try:
            steps.append(summarize(run, graph, critical_path(graph), edits, tax))
            kept.append(graph)
        except CycleError as error:
            notes.append(f"{graph.step}: no critical path: {error} (collectives matched "
                         "inconsistently across ranks?)")
    return steps, kept, [f"{run}: {note}" for note in notes]
