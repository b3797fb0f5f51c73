"""The dependency graph of one training step across ranks: what it is made of and how a
recorded one is completed with its gaps. Schema: ``docs/critical-path.md``.

A **node** is one piece of work on one lane of one rank (a host op on a thread, a kernel on a
stream, a collective's participation), with its recorded start and duration in µs. An **edge**
``src -> dst`` says that ``dst`` cannot start before ``src`` has ended, give or take the edge's
``gap_us``: in a replay, ``start(dst) = max over its edges of end(src) + gap_us`` (a node with
no edges starts at its ``release_us``).

The gaps of a recorded graph are chosen so that replaying it unchanged gives back the recorded
times exactly (:func:`recorded_graph`): each node's *binding* edge (the one whose source ended
last) carries the time between that end and the node's start (untraced CPU time, launch
latency, idle); every other edge carries ``min(0, start(dst) − end(src))``, which is 0 when the
order was respected and negative only where the recorded times contradict it (clock skew).
"""

from __future__ import annotations

from enum import StrEnum

import msgspec
import numpy as np

SCHEMA = "ddpprof.step-graph"
VERSION = 4


class NodeKind(StrEnum):
    COMPUTE = "compute"              # work that computes: a kernel, or a host op of a CPU run
    COMMUNICATION = "communication"  # a collective's transfer (after every member arrived)
    HOST = "host"                    # host work that is not compute: launches, issuing, API
    ARRIVE = "arrive"                # zero-length: this rank joined a collective
    WAIT = "wait"                    # zero-length: a blocking wait returned
    STEP_START = "step_start"        # zero-length: the rank's ProfilerStep started
    STEP_END = "step_end"            # zero-length: the rank's ProfilerStep ended
    #: device work launched before the step (or before the profiler started) that the device
    #: was still running when the step began: the queue the step inherited
    INHERITED = "inherited"


class EdgeKind(StrEnum):
    PROGRAM = "program"              # the next piece of work on the same lane
    LAUNCH = "launch"                # a host launch -> its kernel (correlation id)
    ISSUE = "issue"                  # a c10d op -> the backend's work on its own thread
    COMPLETE = "complete"            # the awaited collective -> the wait that returned
    ARRIVAL = "arrival"              # a member joined -> the collective's transfer, any rank
    STEP = "step"                    # step start -> a lane's first work; its last -> step end
    #: a kernel that started as soon as a kernel of another stream of its rank ended, though
    #: its launch and its stream were ready long before: a cross-stream event wait
    STREAM = "stream"
    #: a host thread resumed (or began) as soon as another thread of its rank stopped: on a GPU
    #: run the thread that calls ``backward()`` waits, untraced, while the autograd engine
    #: runs it on a device thread of its own, and that thread starts when it is handed work
    HANDOFF = "handoff"


class Node(msgspec.Struct, frozen=True):
    rank: int
    lane: str                        # "thread <tid>" or "stream <n>"
    kind: NodeKind
    name: str
    start_us: float                  # recorded, absolute (the trace's clock)
    duration_us: float
    release_us: float | None = None  # a node with no edges starts here (its recorded start)

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us


class Edge(msgspec.Struct, frozen=True):
    src: int
    dst: int
    kind: EdgeKind
    gap_us: float = 0.0


class Collective(msgspec.Struct, frozen=True):
    """One rank's part in one collective: its nodes, the op that issued it, what it moved."""

    rank: int
    kind: str                        # as the op that issued it names it (gloo runs a
    #                                  reduce-scatter as an all-reduce)
    size_bytes: int | None           # nccl-tests' size (``metrics.comm.message_bytes``)
    arrive: int                      # its arrive node
    transfer: int                    # its (first) transfer node
    nodes: list[int]                 # every node of it on its lane: arrive, transfer pieces,
    #                                  and ops nested in its span
    issue: list[int]                 # the nodes of the op (or launch) that issued it, if known


class Gradient(msgspec.Struct, frozen=True):
    """A parameter's gradient became ready: the last node of its ``AccumulateGrad``;
    ``after_hooks``: the last node of the autograd engine's span around it, where the hooks it
    fires end (DDP's Reducer copies the gradient into its bucket there): a bucket holding it
    launches after that (None: no such span; then after ``node``)."""

    rank: int
    node: int
    size_bytes: int
    after_hooks: int | None = None

    @property
    def launchable(self) -> int:
        """The node after which a bucket holding this gradient can launch."""
        return self.node if self.after_hooks is None else self.after_hooks


class BucketCopy(msgspec.Struct, frozen=True):
    """DDP's Reducer copied a reduced gradient out of its bucket (``copy_bucket_to_grad``,
    after the bucket's collective): the first node of its thread at or after that copy."""

    rank: int
    node: int


class StepGraph(msgspec.Struct, frozen=True):
    """One step's graph: ``origin_us`` is the earliest rank's step start, the time every
    critical path is measured from. ``collectives``, ``gradients`` and ``bucket_copies`` name
    what a replay with another bucket cap replaces (``graph.edit``)."""

    step: str
    origin_us: float
    nodes: list[Node]
    edges: list[Edge]
    collectives: list[Collective] = []
    gradients: list[Gradient] = []
    bucket_copies: list[BucketCopy] = []
    schema: str = SCHEMA
    version: int = VERSION

    @property
    def n(self) -> int:
        return len(self.nodes)

    def columns(self) -> GraphColumns:
        return GraphColumns.of(self)


class GraphColumns:
    """The graph as arrays, in a topological order (what the replay walks)."""

    def __init__(self, start: np.ndarray, duration: np.ndarray, release: np.ndarray,
                 src: np.ndarray, dst: np.ndarray, gap: np.ndarray, order: np.ndarray) -> None:
        self.start, self.duration, self.release = start, duration, release
        self.src, self.dst, self.gap, self.order = src, dst, gap, order
        # in-edges of each node, as slices of the edges sorted by destination
        by_dst = np.argsort(dst, kind="stable")
        self.in_edges = by_dst
        self.in_ptr = np.searchsorted(dst[by_dst], np.arange(start.size + 1))
        self._incoming: list[list[int]] | None = None

    def incoming(self) -> list[list[int]]:
        """Each node's in-edges as a list (what a replay walks; made once)."""
        if self._incoming is None:
            edges, ptr = self.in_edges.tolist(), self.in_ptr.tolist()
            self._incoming = [edges[ptr[k]:ptr[k + 1]] for k in range(len(ptr) - 1)]
        return self._incoming

    @classmethod
    def of(cls, graph: StepGraph) -> GraphColumns:
        start = np.array([n.start_us for n in graph.nodes], dtype=np.float64)
        duration = np.array([n.duration_us for n in graph.nodes], dtype=np.float64)
        release = np.array([np.nan if n.release_us is None else n.release_us
                            for n in graph.nodes], dtype=np.float64)
        src = np.array([e.src for e in graph.edges], dtype=np.int64)
        dst = np.array([e.dst for e in graph.edges], dtype=np.int64)
        gap = np.array([e.gap_us for e in graph.edges], dtype=np.float64)
        # nodes by start: a topological order wherever every edge goes forward in time (a
        # recorded graph, nearly always), checked in one pass, else Kahn's algorithm
        by_start = np.lexsort((np.arange(start.size), start))
        position = np.empty(start.size, dtype=np.int64)
        position[by_start] = np.arange(start.size)
        order = by_start if np.all(position[src] < position[dst]) else topological_order(
            len(graph.nodes), src, dst)
        return cls(start, duration, release, src, dst, gap, order)


class CycleError(ValueError):
    """The edges make a cycle: the recorded dependencies contradict each other."""


def topological_order(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Kahn's algorithm; ties in the order the nodes are listed."""
    indegree = np.bincount(dst, minlength=n).astype(np.int64)
    by_src = np.argsort(src, kind="stable")
    ptr = np.searchsorted(src[by_src], np.arange(n + 1))
    ready = list(np.flatnonzero(indegree == 0)[::-1])
    order: list[int] = []
    while ready:
        node = int(ready.pop())
        order.append(node)
        for k in by_src[ptr[node]:ptr[node + 1]]:
            target = int(dst[k])
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    if len(order) != n:
        raise CycleError(f"the dependencies make a cycle through {n - len(order)} nodes")
    return np.array(order, dtype=np.int64)


def recorded_graph(step: str, origin_us: float, nodes: list[Node],
                   edges: list[tuple[int, int, EdgeKind]],
                   collectives: list[Collective] | None = None,
                   gradients: list[Gradient] | None = None,
                   bucket_copies: list[BucketCopy] | None = None) -> StepGraph:
    """The graph of recorded ``nodes`` and ``edges`` with the gaps and releases that make its
    unchanged replay give back the recorded times (see the module's docstring). Of edges whose
    sources ended at the same time, the first listed binds."""
    start = np.array([node.start_us for node in nodes], dtype=np.float64)
    end = start + np.array([node.duration_us for node in nodes], dtype=np.float64)
    sources, targets, kinds = zip(*edges, strict=True) if edges else ((), (), ())
    src = np.array(sources, dtype=np.int64)
    dst = np.array(targets, dtype=np.int64)
    gap = start[dst] - end[src]
    # each node's binding edge: the latest-ending source, of equal ends the first listed
    order = np.lexsort((np.arange(dst.size)[::-1], end[src], dst))
    binds = np.zeros(dst.size, dtype=bool)
    if dst.size:
        binds[order[np.flatnonzero(np.append(dst[order][1:] != dst[order][:-1], True))]] = True
    gaps = np.where(binds, gap, np.minimum(gap, 0.0)).tolist()
    gapped = list(map(Edge, sources, targets, kinds, gaps))
    has_edge = np.zeros(len(nodes), dtype=bool)
    has_edge[dst] = True
    released = [node if has_edge[i] else msgspec.structs.replace(node, release_us=node.start_us)
                for i, node in enumerate(nodes)]
    return StepGraph(step, origin_us, released, gapped, collectives or [], gradients or [],
                     bucket_copies or [])
