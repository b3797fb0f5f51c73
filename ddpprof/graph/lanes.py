"""One rank's share of a step graph as lanes of nodes: each host thread's spans cut so that
every instant belongs to its innermost span, each device stream's records in order (the
queue the step inherited first), and the step's start and end around them. Pure; the
definitions are in ``docs/critical-path.md``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..trace.classify import Kind
from .marks import thread_marks
from .model import EdgeKind, Node, NodeKind
from .prepared import Prepared, StepEvents


@dataclass
class Part:
    """One rank's share of a step graph, before the ranks are joined."""

    rank: int
    nodes: list[Node] = field(default_factory=list)
    edges: list[tuple[int, int, EdgeKind]] = field(default_factory=list)
    first: dict[int, int] = field(default_factory=dict)    # event -> its first node
    last: dict[int, int] = field(default_factory=dict)     # event -> its last node
    pieces: dict[int, list[int]] = field(default_factory=dict)  # event -> its nodes
    arrive: dict[int, int] = field(default_factory=dict)   # collective event -> arrive node
    transfer: dict[int, int] = field(default_factory=dict)  # collective event -> transfer
    collectives: list[int] = field(default_factory=list)   # collective events, by start
    blocking_waits: dict[int, int] = field(default_factory=dict)  # issue node -> its wait
    after_hooks: dict[int, int] = field(default_factory=dict)  # gradient -> its hooks' end
    bucket_copies: list[int] = field(default_factory=list)  # copy out of a bucket -> its node
    device: list[int] = field(default_factory=list)        # device records of the step
    inherited: list[int] = field(default_factory=list)     # device records it inherited
    #: communication kernels of the step with no launch in the trace: never matched
    unlaunched: list[int] = field(default_factory=list)

    def add(self, node: Node) -> int:
        self.nodes.append(node)
        return len(self.nodes) - 1


def segments(start: np.ndarray, end: np.ndarray, lo: float, hi: float,
             parents: dict[int, int] | None = None, of: np.ndarray | None = None
             ) -> list[tuple[int, float, float]]:
    """Cut one thread's spans (positions into ``start``/``end``) so that every instant in
    ``[lo, hi]`` belongs to the innermost span covering it: (span, from, to), in time order.
    Of spans with equal starts the longer is the outer; a span that outlives its parent (bad
    nesting) is cut at the parent's end. ``parents``, if given, gets the innermost enclosing
    span of each nested span that ``of`` (a mask over the positions) picks."""
    order = np.lexsort((-end, start))
    pieces: list[tuple[int, float, float]] = []
    stack: list[int] = []
    # the inner loop on Python floats (the same values as the arrays'): per element, numpy's
    # scalar indexing costs more than the work
    starts = np.maximum(start, lo).tolist()
    ends = np.minimum(end, hi).tolist()
    picked: list[bool] = of.tolist() if parents is not None and of is not None else []
    record = parents if picked else None
    t = lo

    def emit(until: float) -> None:
        nonlocal t
        if stack and until > t:
            if pieces and pieces[-1][0] == stack[-1] and pieces[-1][2] == t:
                pieces[-1] = (stack[-1], pieces[-1][1], until)
            else:
                pieces.append((stack[-1], t, until))
        t = max(t, until)

    for i in order.tolist():
        s = starts[i]
        while stack and ends[stack[-1]] <= s:
            emit(ends[stack[-1]])
            stack.pop()
        emit(s)
        t = max(t, s)
        if record is not None and stack and picked[i]:
            record[i] = stack[-1]
        if ends[i] > s:
            stack.append(i)
    while stack:
        emit(ends[stack[-1]])
        stack.pop()
    return pieces


def host_lanes(p: Prepared, part: Part, host: np.ndarray, lo: float, hi: float) -> None:
    """Each thread's host spans of the step (``host``: the events that overlap it) as nodes in
    program order: communication for a host backend's collective (after an *arrive* node where
    it starts), host work for launches, ``c10d::`` ops, waits and any host op of a GPU run, and
    compute otherwise."""
    trace, rank, nodes, edges = p.trace, part.rank, part.nodes, part.edges
    s, e = trace.start_us, trace.end_us
    threads = trace.thread_id[host]
    for thread in np.unique(threads).tolist():
        events = host[threads == thread]
        lane = f"thread {trace.threads[thread][1]}"
        previous = None
        parents: dict[int, int] = {}
        first_node = len(nodes)
        # what each event is, as lists (per event, numpy's scalar indexing costs more)
        ids, name_ids = events.tolist(), trace.name_id[events].tolist()
        comm, in_comm = p.host_comm[events].tolist(), p.in_host_comm[events].tolist()
        in_step = (s[events] >= lo).tolist()
        hosted = (p.issuing[events] | p.waits[events] | p.in_host_wait[events]).tolist()
        for k, a, b in segments(s[events], e[events], lo, hi, parents, p.gradients[events]):
            i = ids[k]
            name = trace.names[name_ids[k]]
            if comm[k] and i not in part.first and in_step[k]:
                arrive = len(nodes)
                nodes.append(Node(rank, lane, NodeKind.ARRIVE, name, a, 0.0))
                part.arrive[i] = arrive
                part.collectives.append(i)
                if previous is not None:
                    edges.append((previous, arrive, EdgeKind.PROGRAM))
                previous = arrive
                kind = NodeKind.COMMUNICATION
            elif comm[k] or in_comm[k]:
                kind = NodeKind.COMMUNICATION
            elif hosted[k] or p.gpu:
                kind = NodeKind.HOST
            else:
                kind = NodeKind.COMPUTE
            node = len(nodes)
            nodes.append(Node(rank, lane, kind, name, a, b - a))
            if i in part.arrive:
                part.transfer.setdefault(i, node)
            part.first.setdefault(i, node)
            part.last[i] = node
            part.pieces.setdefault(i, []).append(node)
            if previous is not None:
                edges.append((previous, node, EdgeKind.PROGRAM))
            previous = node
        hooks_end, copies = thread_marks(trace, part.nodes[first_node:], events, parents, hi,
                                         events[p.bucket_copies[events]])
        part.after_hooks.update((i, first_node + k) for i, k in hooks_end.items())
        part.bucket_copies += [first_node + k for k in copies]


def device_lanes(p: Prepared, part: Part, events: StepEvents, lo: float) -> None:
    """Each stream's device records in the step, in order: first those it inherited (launched
    before the step, or before the profiler started), as ``inherited`` nodes from the step's
    start (clipped to it), never matched across ranks; then those launched in the step, with
    an edge from each launch and, for a communication kernel, an *arrive* node."""
    trace = p.trace
    both = np.concatenate([events.inherited, events.kernels])
    inherited = np.zeros(both.size, dtype=bool)
    inherited[:events.inherited.size] = True
    for stream in np.unique(p.stream[both]).tolist():
        mine = p.stream[both] == stream
        order = np.lexsort((~inherited[mine], trace.start_us[both[mine]]))
        previous = None
        for i, old in zip(both[mine][order].tolist(), inherited[mine][order].tolist(),
                          strict=True):
            lane, name = f"stream {stream}", trace.names[trace.name_id[i]]
            a, b = max(float(trace.start_us[i]), lo) if old else float(trace.start_us[i]), \
                float(trace.end_us[i])
            nodes = []
            if old:
                kind = NodeKind.INHERITED
                part.inherited.append(i)
            elif p.kinds[i] == Kind.COMMUNICATION and i in p.launch_of:
                part.arrive[i] = part.add(Node(part.rank, lane, NodeKind.ARRIVE, name, a, 0.0))
                part.collectives.append(i)
                nodes.append(part.arrive[i])
                kind = NodeKind.COMMUNICATION
            elif p.kinds[i] == Kind.COMMUNICATION:
                # no launch in the trace: which collective it was is unknown, so it is matched
                # with no other rank's
                kind = NodeKind.COMMUNICATION
                part.unlaunched.append(i)
            else:
                kind = NodeKind.COMPUTE
            nodes.append(part.add(Node(part.rank, lane, kind, name, a, max(b - a, 0.0))))
            if i in part.arrive:
                part.transfer[i] = nodes[-1]
            part.first[i], part.last[i] = nodes[0], nodes[-1]
            part.device.append(i)
            for u, v in zip([previous, *nodes], nodes, strict=False):
                if u is not None:
                    part.edges.append((u, v, EdgeKind.PROGRAM))
            previous = nodes[-1]
            launched_by = p.launch_of.get(i)
            if not old and launched_by is not None and launched_by in part.last:
                part.edges.append((part.last[launched_by], nodes[0], EdgeKind.LAUNCH))


def step_ends(part: Part, hi: float, lane: str) -> None:
    """Edges from the step start (node 0) to every lane's first node, and from every lane's
    last node to a step end node."""
    firsts: dict[str, int] = {}
    lasts: dict[str, int] = {}
    lanes = [node.lane for node in part.nodes]
    start = np.array([node.start_us for node in part.nodes[1:]], dtype=np.float64)
    # in time order (of equal starts, as added)
    for k in (np.lexsort((np.arange(start.size), start)) + 1).tolist():
        firsts.setdefault(lanes[k], k)
        lasts[lanes[k]] = k
    for lane_name, k in firsts.items():
        part.edges.append((0, k, EdgeKind.PROGRAM if lane_name == lane else EdgeKind.STEP))
    end = part.add(Node(part.rank, lane, NodeKind.STEP_END, "step end", hi, 0.0))
    if not lasts:
        part.edges.append((0, end, EdgeKind.PROGRAM))
    for lane_name, k in lasts.items():
        part.edges.append((k, end, EdgeKind.PROGRAM if lane_name == lane else EdgeKind.STEP))
