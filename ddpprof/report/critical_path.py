"""The critical path as tables and as a figure over the ranks' timelines (``critical-path``
and ``analyze --critical-path``)."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from ..graph.model import NodeKind, StepGraph
from ..graph.path import COMMUNICATION, COMPUTE, HOST, IDLE, INHERITED, WAITING
from ..graph.summary import StepPath
from ..metrics.middle import middle_index
from ..render.charts import layout
from ..render.table import Column, Table

#: The figure draws at most this many nodes per step (the path is always drawn whole).
MAX_DRAWN_NODES = 5000


@dataclass(frozen=True)
class PathRow:
    run: str
    step: str
    step_ms: float
    home_rank: int
    compute_pct: float
    communication_pct: float
    host_pct: float
    idle_pct: float
    waiting_pct: float
    waiting_for: int | None
    inherited_pct: float
    top_work: str


PATH_COLUMNS = (
    Column("run", max_width=28), Column("step", max_width=16), Column("step_ms"),
    Column("ends_on_rank", attr="home_rank", wide=True),
    *(Column(f"path_{part}_pct", attr=f"{key}_pct") for part, key in (
        ("compute", "compute"), ("comm", "communication"), ("host", "host"), ("idle", "idle"),
        ("waiting", "waiting"))),
    Column("waiting_for"), Column("path_inherited_pct", attr="inherited_pct"),
    Column("top_work", max_width=40))


@dataclass(frozen=True)
class WhatIfRow:
    run: str
    step: str
    edit: str
    step_ms: float
    change_pct: float


WHAT_IF_COLUMNS = (Column("run", max_width=28), Column("step", max_width=16),
                   Column("edit", max_width=40), Column("predicted_ms", attr="step_ms"),
                   Column("change_pct"))


def path_row(step: StepPath) -> PathRow:
    top = step.work[0] if step.work else None
    return PathRow(step.run, step.step, step.step_us / 1e3, step.home_rank,
                   step.total_pct(COMPUTE), step.total_pct(COMMUNICATION),
                   step.total_pct(HOST), step.total_pct(IDLE), step.total_pct(WAITING),
                   step.waited_for(), step.total_pct(INHERITED),
                   f"{top.name} (rank {top.rank}, {top.pct:.1f}%)" if top else "")


def tables(steps: list[StepPath]) -> list[Table]:
    made = [Table(PATH_COLUMNS, [path_row(s) for s in steps], title="Critical path")]
    what_if = [WhatIfRow(s.run, s.step, w.edit, w.step_us / 1e3, w.change_pct)
               for s in steps for w in s.what_if]
    if what_if:
        made.append(Table(WHAT_IF_COLUMNS, what_if, title="What if (replayed)"))
    return made


def summary_lines(steps: list[StepPath]) -> list[str]:
    """One sentence per run: what holds its steps, from the median step's split."""
    lines = []
    for run in dict.fromkeys(s.run for s in steps):
        mine = sorted((s for s in steps if s.run == run), key=lambda s: s.step_us)
        median = mine[middle_index(len(mine))]
        parts = sorted(((median.total_pct(c), c) for c in (COMPUTE, COMMUNICATION, HOST, IDLE,
                                                           WAITING, INHERITED)), reverse=True)
        top = median.work[0] if median.work else None
        named = {INHERITED: "inherited from the previous step (the device's queue)",
                 IDLE: "idle (" + ", ".join(f"{row.pct:.0f}% {row.cause}"
                                            for row in median.idle) + ")"}
        lines.append(f"{run}: the critical path of {median.step} ({median.step_us / 1e3:.2f} "
                     f"ms) is " + ", ".join(f"{pct:.0f}% {named.get(c, c)}" for pct, c in parts
                                            if pct >= 0.5)
                     + (f"; its longest work is {top.name} on rank {top.rank} "
                        f"({top.pct:.1f}% of the step)" if top else ""))
    return lines


_COLOURS = {COMPUTE: "#4C78A8", COMMUNICATION: "#E45756", HOST: "#F58518", IDLE: "#BAB0AC",
            WAITING: "#B279A2", INHERITED: "#72B7B2"}
#: The same kinds of work off the path: paler, so that the path reads on top of them.
_PALE = {COMPUTE: "#c3d3e6", COMMUNICATION: "#f4c4c3", HOST: "#fbd9b5"}


def path_figure(graph: StepGraph, step: StepPath) -> go.Figure:
    """Every lane of every rank as a row of bars (the work, pale), with the critical path's
    segments drawn over it in their category's colour."""
    origin = graph.origin_us
    lanes = sorted({(n.rank, n.lane) for n in graph.nodes})
    label = {key: f"rank {key[0]} {key[1]}" for key in lanes}
    fig = go.Figure()
    drawn = [n for n in graph.nodes if n.duration_us > 0][:MAX_DRAWN_NODES]
    for kind in (NodeKind.COMPUTE, NodeKind.COMMUNICATION, NodeKind.HOST):
        mine = [n for n in drawn if n.kind == kind]
        if mine:
            fig.add_trace(go.Bar(
                orientation="h", base=[(n.start_us - origin) / 1e3 for n in mine],
                x=[n.duration_us / 1e3 for n in mine], y=[label[(n.rank, n.lane)] for n in mine],
                name=f"{kind.value} (all work)",
                marker_color=_PALE.get(kind.value, "#ddd"), text=[n.name for n in mine],
                hovertemplate="%{text}: %{x:.3f} ms<extra></extra>"))
    for category, colour in _COLOURS.items():
        on_path = [s for s in step.segments if s.category == category]
        if on_path:
            fig.add_trace(go.Bar(
                orientation="h", base=[s.start_us / 1e3 for s in on_path],
                x=[s.duration_us / 1e3 for s in on_path],
                y=[label.get((s.rank, s.lane), f"rank {s.rank} {s.lane}") for s in on_path],
                name=f"path: {category}", marker_color=colour, width=0.45,
                text=[f"{s.name} ({s.pieces} piece{'s' * (s.pieces != 1)})" for s in on_path],
                hovertemplate="%{text}: %{x:.3f} ms<extra></extra>"))
    fig.update_layout(barmode="overlay")
    return layout(fig, f"{step.run} {step.step}: critical path over the ranks' timelines",
                  xaxis_title="ms from the step's start (earliest rank)",
                  height=max(320, 140 + 34 * len(lanes)),
                  yaxis=dict(autorange="reversed", tickfont=dict(size=11)))
