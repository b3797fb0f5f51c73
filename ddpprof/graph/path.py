"""Replay of a step graph, its critical path, each node's slack, and the path's length split by
what it is. Pure functions of ``ddpprof.graph.model`` graphs; definitions in
``docs/critical-path.md``.

* **Replay**: in a topological order, ``start(n) = max(release(n), max over edges e -> n of
  end(src e) + gap e)`` and ``end(n) = start(n) + duration(n)``. The *makespan* is the latest
  end minus the graph's origin. Replaying a recorded graph unchanged gives back its recorded
  times (``model.recorded_graph``).
* **Step length**: from the start of the *home* rank's step (its ``step_start`` node; the
  graph's origin when it has none) to the latest end of any node, the home rank being the
  rank of the node that ends last (of equal ends: a step end, then the lowest rank). It is
  the home rank's ProfilerStep, up to device work that outlives it.
* **Critical path**: from the node that ends last, repeatedly the *binding* in-edge (the one
  whose ``end(src) + gap`` equals the node's start; of several, the latest-ending source on
  the same rank, then on the same lane), until a node started at its release. The path is a
  chain of dependent nodes; its **length** is the step length (the part of the chain before
  the home rank's step started is cut off).
* **Slack** of a node: how much later it could end without making the step longer,
  ``latest_end − end`` with ``latest_end(n) = min over edges n -> m of latest_start(m) − gap``
  (the makespan's end for a node nothing depends on). Nodes on the critical path have none.
* **Split**: the path's length, walked back from its end, attributed piece by piece, each to
  the rank it ran on: a node's time by its kind (compute, communication, host), the gap
  before it by the edge it came through (a gap on a host thread, a launch, an issue or a
  completion is host time; on a stream, idle; before the step of the path's first rank
  started, when that rank is not the home rank, waiting for that rank). Where the path
  enters rank r's collective from rank r''s arrival, the ``w`` µs that r sat in the
  collective before r' arrived (``metrics.waits``' wait) are relabelled: the last ``w`` µs
  of path before the hop, unless communication, are *waiting for rank r'*. The pieces tile
  the step, so the split sums to the step length exactly.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import msgspec
import numpy as np

from .completions import STREAM_HELD_US
from .model import EdgeKind, GraphColumns, NodeKind, StepGraph

#: Ends closer than this (µs) count as equal when looking for the binding edge: the float
#: noise of adding a gap back to an end.
TIE_US = 1e-6

COMPUTE, COMMUNICATION, HOST, IDLE, WAITING, INHERITED = (
    "compute", "communication", "host", "idle", "waiting for rank", "inherited")
CATEGORIES = (COMPUTE, COMMUNICATION, HOST, IDLE, WAITING, INHERITED)


@dataclass(frozen=True)
class Schedule:
    """Each node's start and end in a replay, and the makespan from the origin."""

    start_us: np.ndarray
    end_us: np.ndarray
    makespan_us: float


def replay(graph: StepGraph, columns: GraphColumns | None = None,
           duration_us: np.ndarray | None = None, gap_us: np.ndarray | None = None,
           release_us: np.ndarray | None = None) -> Schedule:
    """Replay ``graph`` with, optionally, other durations, gaps or releases (same order)."""
    c = columns or graph.columns()
    duration = (c.duration if duration_us is None else duration_us).tolist()
    gaps = c.gap if gap_us is None else gap_us
    release = (c.release if release_us is None else release_us).tolist()
    # the in-edges' sources and gaps by destination: node n's are [ptr[n], ptr[n + 1])
    src, gap = c.src[c.in_edges].tolist(), gaps[c.in_edges].tolist()
    ptr = c.in_ptr.tolist()
    start = [0.0] * c.start.size
    end = [0.0] * c.start.size
    for node in c.order.tolist():
        lo, hi = ptr[node], ptr[node + 1]
        ready = release[node]
        if hi > lo:
            if hi == lo + 1:     # most nodes: the one edge from the node before on its lane
                best = end[src[lo]] + gap[lo]
            else:
                best = max(end[src[k]] + gap[k] for k in range(lo, hi))
            ready = best if ready != ready else max(ready, best)    # nan: no release
        start[node] = ready
        end[node] = ready + duration[node]
    last = max(end) if end else graph.origin_us
    return Schedule(np.array(start), np.array(end), last - graph.origin_us)


class PathPiece(msgspec.Struct, frozen=True):
    """One piece of the critical path: a node's time on it, or the gap before a node (a
    struct: a long path has as many pieces as nodes, and a struct is made ten times faster
    than a frozen dataclass)."""

    category: str          # one of CATEGORIES, before waiting is told apart: see ``split``
    rank: int
    lane: str
    name: str
    start_us: float        # from the graph's origin
    duration_us: float
    node: int              # the node, or the node the gap leads to


@dataclass(frozen=True)
class CriticalPath:
    step: str
    length_us: float                 # the makespan: the step's span across ranks
    home_rank: int                   # the rank whose work ends the step
    nodes: list[int]                 # in time order; each depends on the one before
    pieces: list[PathPiece]          # in time order; they tile [0, length_us]
    slack_us: np.ndarray             # per node
    split_us: dict[tuple[str, int], float] = field(default_factory=dict)

    def total(self, category: str) -> float:
        return sum(us for (c, _), us in self.split_us.items() if c == category)


def step_end(graph: StepGraph, s: Schedule) -> tuple[int, float]:
    """The node that ends the step and the start of its rank's step (see the module)."""
    nodes = graph.nodes
    ends = s.end_us.tolist()
    latest = max(ends)
    # of the nodes that end last (in order), the first with the greatest key
    candidates = [i for i, e in enumerate(ends) if e == latest] or range(len(nodes))
    sink = max(candidates, key=lambda i: (
        ends[i], nodes[i].kind == NodeKind.STEP_END, -nodes[i].rank))
    home = next((i for i, n in enumerate(nodes)
                 if n.kind == NodeKind.STEP_START and n.rank == nodes[sink].rank), None)
    return sink, float(s.start_us[home]) if home is not None else graph.origin_us


def step_length_us(graph: StepGraph, s: Schedule) -> float:
    if not graph.nodes:
        return 0.0
    sink, home_start = step_end(graph, s)
    return float(s.end_us[sink]) - home_start


def period_us(graph: StepGraph, s: Schedule) -> float:
    """How long the step takes in a replay, as ``analyze`` measures a run's step (each rank's
    window over its steps, the mean over ranks): on a GPU run, the mean over ranks of each
    rank's span of its own device work, from where the first device record the step launched
    started as recorded (the queue it inherited belongs to the step before, and is kept as
    recorded) to where the last one ends in the replay; a CPU run, the step length
    (:func:`step_length_us`). Faster work never lengthens it."""
    own = np.array([n.rank if n.lane.startswith("stream") and n.kind != NodeKind.INHERITED
                    else -1 for n in graph.nodes], dtype=np.int64)
    if not (own >= 0).any():
        return step_length_us(graph, s)
    recorded = np.array([n.start_us for n in graph.nodes], dtype=np.float64)
    return float(np.mean([s.end_us[own == r].max() - recorded[own == r].min()
                          for r in np.unique(own[own >= 0]).tolist()]))


_NODE_CATEGORY = {NodeKind.COMPUTE: COMPUTE, NodeKind.COMMUNICATION: COMMUNICATION,
                  NodeKind.HOST: HOST, NodeKind.ARRIVE: COMMUNICATION,
                  NodeKind.WAIT: HOST, NodeKind.STEP_END: HOST,
                  NodeKind.STEP_START: HOST, NodeKind.INHERITED: INHERITED}


NOTHING_RECORDED = "nothing recorded"
#: A device record with no launch in the step: launched before it, or before the profiler
#: started, so when it could have started is not in the trace.
LAUNCH_NOT_TRACED = "its launch, before the step (not in it)"
#: A stream's next record started less than ``STREAM_HELD_US`` after it could: the device's
#: own latency between kernels.
BETWEEN_KERNELS = "the device's latency between kernels"
#: What a device lane's idle time on the path waited for, by the edge it came through.
IDLE_CAUSES = {EdgeKind.STREAM: "another stream (an event wait)",
               EdgeKind.PROGRAM: NOTHING_RECORDED, EdgeKind.STEP: NOTHING_RECORDED}


def _gap_category(kind: EdgeKind, lane: str) -> str:
    if kind == EdgeKind.ARRIVAL:
        return COMMUNICATION
    if lane.startswith("stream") and kind in IDLE_CAUSES:
        return IDLE
    return HOST


def critical_path(graph: StepGraph, columns: GraphColumns | None = None,
                  schedule: Schedule | None = None) -> CriticalPath:
    """The critical path of ``graph`` as replayed (by default, unchanged: the recorded times)."""
    c = columns or graph.columns()
    s = schedule or replay(graph, c)
    if not graph.nodes:
        return CriticalPath(graph.step, 0.0, -1, [], [], np.empty(0))
    nodes = graph.nodes
    sink, home_start = step_end(graph, s)
    # the in-edges by destination (node n's: [ptr[n], ptr[n + 1])), their sources and gaps
    by_dst, ptr = c.in_edges.tolist(), c.in_ptr.tolist()
    src, gap = c.src.tolist(), c.gap.tolist()
    start, end = s.start_us.tolist(), s.end_us.tolist()
    # (node, the edge into it from the node before it on the path), walked back from the end
    chain: list[tuple[int, int | None]] = []
    node: int | None = sink
    while node is not None:
        chain.append((node, None))
        due = start[node] - TIE_US
        binding = [k for k in by_dst[ptr[node]:ptr[node + 1]] if end[src[k]] + gap[k] >= due]
        if not binding:
            break
        # most nodes have one binding edge: the tie-break only where there are several
        here = nodes[node]
        k = binding[0] if len(binding) == 1 else max(
            binding, key=lambda k: (end[src[k]], nodes[src[k]].rank == here.rank,
                                    nodes[src[k]].lane == here.lane))
        chain[-1] = (node, k)
        node = src[k]
    pieces = _waiting(graph, c, s, chain, _pieces(graph, s, chain, home_start))
    split: dict[tuple[str, int], float] = {}
    for piece in pieces:
        key = (piece.category, piece.rank)
        split[key] = split.get(key, 0.0) + piece.duration_us
    return CriticalPath(graph.step, float(s.end_us[sink]) - home_start, nodes[sink].rank,
                        [n for n, _ in reversed(chain)], pieces, slack(c, s), split)


def _waiting(graph: StepGraph, c: GraphColumns, s: Schedule, chain: list[tuple[int, int | None]],
             pieces: list[PathPiece]) -> list[PathPiece]:
    """Relabel as *waiting for rank r'* the path time during which another rank sat in a
    collective for r': where the path enters a rank's transfer from r''s arrival, the
    ``last arrival − that rank's own arrival`` before the hop (``metrics.waits``' wait)."""
    origin = graph.origin_us
    spans: list[tuple[float, float, int]] = []
    for node, edge in chain:
        if edge is None or graph.edges[edge].kind != EdgeKind.ARRIVAL:
            continue
        waiter, late = graph.nodes[node].rank, graph.nodes[int(c.src[edge])].rank
        own = [int(c.src[k]) for k in c.in_edges[c.in_ptr[node]:c.in_ptr[node + 1]]
               if graph.nodes[int(c.src[k])].kind == NodeKind.ARRIVE
               and graph.nodes[int(c.src[k])].rank == waiter]
        if late == waiter or not own:
            continue
        hop = float(s.start_us[node]) - origin
        spans.append((hop - max(0.0, hop + origin - float(s.start_us[own[0]])), hop, late))
    for lo, hi, late in spans:
        relabelled = []
        for p in pieces:
            a, b = p.start_us, p.start_us + p.duration_us
            cut = sorted({a, b, *(x for x in (lo, hi) if a < x < b)})
            for x, y in itertools.pairwise(cut):
                inside = lo <= x and y <= hi and p.category != COMMUNICATION
                relabelled.append(PathPiece(WAITING if inside else p.category,
                                            late if inside else p.rank, p.lane, p.name, x,
                                            y - x, p.node))
            if a == b:
                relabelled.append(p)
        pieces = relabelled
    return pieces


def _pieces(graph: StepGraph, s: Schedule, chain: list[tuple[int, int | None]],
            home_start: float) -> list[PathPiece]:
    """Walk the chain back from its end with a boundary ``t``: each node covers
    ``[start, t]`` (clipped at ``t`` where the recorded times overlap), the gap before it
    ``[end of the node before, start]``; all clipped at ``home_start``, and whatever remains
    between it and the first node is idle."""
    origin = graph.origin_us
    starts, ends = s.start_us.tolist(), s.end_us.tolist()
    t = ends[chain[0][0]]
    pieces: list[PathPiece] = []
    launched: set[int] | None = None     # made where first needed (device idle only)
    for position, (node, edge) in enumerate(chain):
        if t <= home_start:
            break
        info = graph.nodes[node]
        begin = max(min(starts[node], t), home_start)
        pieces.append(PathPiece(_NODE_CATEGORY[info.kind], info.rank, info.lane, info.name,
                                begin - origin, t - begin, node))
        t = begin
        if edge is None:
            continue
        before = max(ends[chain[position + 1][0]], home_start)
        if before < t:
            kind = EdgeKind(graph.edges[edge].kind)
            category = _gap_category(kind, info.lane)
            label = f"gap before {info.name} ({kind.value})"
            if category == IDLE:
                cause = IDLE_CAUSES[kind]
                if cause == NOTHING_RECORDED and t - before < STREAM_HELD_US:
                    cause = BETWEEN_KERNELS
                elif cause == NOTHING_RECORDED:
                    if launched is None:
                        launched = {e.dst for e in graph.edges if e.kind == EdgeKind.LAUNCH}
                    if node not in launched:
                        cause = LAUNCH_NOT_TRACED
                label = f"idle: {cause}"
            pieces.append(PathPiece(category, info.rank, info.lane, label, before - origin,
                                    t - before, node))
            t = before
    first = graph.nodes[chain[-1][0]]
    if t > home_start:
        # the path starts on a rank that began its step after the home rank did: the home
        # rank's step was held by that rank's lateness
        home = graph.nodes[chain[0][0]].rank
        pieces.append(PathPiece(IDLE if first.rank == home else WAITING, first.rank,
                                first.lane, "before its step started", home_start - origin,
                                t - home_start, chain[-1][0]))
    return [p for p in reversed(pieces) if p.duration_us > 0 or p.node == chain[0][0]]


def slack(c: GraphColumns, s: Schedule) -> np.ndarray:
    """Each node's slack (see the module's docstring), by a backward pass."""
    finish = float(s.end_us.max()) if s.end_us.size else 0.0
    latest_end = [finish] * c.start.size
    by_src = np.argsort(c.src, kind="stable")
    ptr = np.searchsorted(c.src[by_src], np.arange(c.start.size + 1)).tolist()
    targets, gaps = c.dst[by_src].tolist(), c.gap[by_src].tolist()
    duration = (s.end_us - s.start_us).tolist()
    for node in c.order[::-1].tolist():
        lo, hi = ptr[node], ptr[node + 1]
        if hi == lo + 1:        # most nodes: one edge out
            target = targets[lo]
            latest_end[node] = min(finish, latest_end[target] - duration[target] - gaps[lo])
        elif hi > lo:
            latest_end[node] = min(finish, min(
                latest_end[targets[k]] - duration[targets[k]] - gaps[k] for k in range(lo, hi)))
    result: np.ndarray = np.maximum(np.array(latest_end) - s.end_us, 0.0)
    return result
