"""A recorded step graph, edited: its gradient collectives re-bucketed at another cap, its
ranks' share of the batch and its collectives' cost at another world size, and (``whatif``)
work classes or the network made faster or a rank delayed; then replayed under the overlap
tax (``contended``). Pure; definitions in ``docs/simulate.md``.

Every node keeps its recorded *work* (``contended.recorded_work``) unless an edit touches it,
and every edge its recorded gap, so the unedited replay gives back the recorded step exactly.

**Bucket cap** (:class:`Rebucket`). Per rank, the collectives of the variant's gradient sync
(its ``gradient_collective``, arriving before the rank's first ``Optimizer.`` node; for ZeRO-1
and -2 also the all-gathers after it) are removed: their nodes, and the ops that issued them,
take no time, and their issue, arrival and completion edges go. In their place, the rank's
gradients (its last backward pass's ``AccumulateGrad`` nodes, in registration order) are
grouped by ``variants.bucketing.assign_buckets`` at the new cap; bucket b gets

* an issue node on the thread of its last-ready gradient, right after the later of that
  gradient's hooks (``Gradient.launchable``: DDP's Reducer copies it into the bucket first)
  and bucket b−1's issue (a bucket launches once it is full and every bucket before it has
  launched), lasting the median of the removed issue ops;
* an arrive and a transfer node on the rank's communication lanes, bucket b on lane
  ``b mod K`` after bucket b−K's transfer (K: the lanes the removed collectives used; gloo runs
  two worker threads), arriving the median recorded issue gap after its issue; its transfer
  starts when every rank's bucket b has arrived, and its work is the cost model's time
  (:class:`CollectiveCost`); the ranks' transfers of bucket b progress together
  (``Editable.together``, ``contended``);
* completion edges into the waits that waited for the removed collectives: of m such waits
  in time order, the j-th waits for buckets 1 to ⌈jB/m⌉, the last for all (a rank with none
  waits before its optimizer).
* where DDP's Reducer copied the reduced buckets back into the gradients
  (``StepGraph.bucket_copies``: one per gradient, bucket by bucket in launch order), an edge
  from bucket b's transfer into the first copy of its gradients.

All-gathers (ZeRO-1, -2) get the same per bucket after the optimizer, issued where the first
removed all-gather was.

**World size** (:class:`WorldSize`). Compute before the rank's last gradient was ready (forward
and backward, not the ``AccumulateGrad`` nodes) takes ``N₀/N`` of its work (the rank's share of
the global batch); the optimizer's compute too when it is sharded (ZeRO); every transfer the
cost model's time at N ranks over its time at N₀. The graph keeps its N₀ ranks: they stand for
the N. Each rank is taken to bring its own device or cores, unless the ranks share a host's C
cores (``shared_cores``): then all work (compute, host, transfers) is slowed by
:attr:`WorldSize.crowding`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..core.units import MIB
from ..trace.classify import GRAD_READY, OPTIMIZER_PREFIX
from ..variants.bucketing import assign_buckets
from .model import Collective, Edge, EdgeKind, Gradient, Node, NodeKind, StepGraph

if TYPE_CHECKING:
    from ..metrics.cost import CostModel

ISSUING = (EdgeKind.ISSUE, EdgeKind.LAUNCH)


@dataclass(frozen=True)
class CollectiveCost:
    """What a collective's transfer costs in a replay: the cost model's time times ``level``,
    the ratio of the step's recorded transfers (their work alone) to the model's time for
    them: the load the run's machine put on communication."""

    model: CostModel
    level: float
    backend: str | None

    def time_us(self, kind: str, size_bytes: float, world_size: int) -> float:
        return self.level * self.model.time_us(size_bytes, world_size, kind, self.backend)


@dataclass(frozen=True)
class RankGradients:
    """One rank's gradients of the step's last backward pass, in the order they became ready,
    with each one's position in the model's registration order and its dtype (if known)."""

    gradients: list[Gradient]
    registration: list[int]
    dtypes: list[str | None] | None = None


@dataclass(frozen=True)
class Rebucket:
    cap_mib: float
    gradient_kind: str                  # the sync's collective (all_reduce, reduce_scatter)
    gathers: bool                       # an all-gather per bucket after the optimizer
    ranks: dict[int, RankGradients]
    ready_order: bool = False           # bucket in ready order, not reverse registration


@dataclass(frozen=True)
class WorldSize:
    world_size: int
    recorded: int
    sharded_optimizer: bool
    #: The cores every rank shares (one CPU host), if they do; with the threads of a rank.
    shared_cores: int | None = None
    threads_per_rank: int = 1

    @property
    def crowding(self) -> float:
        """How much slower a host's work runs at this world size than as recorded when the
        ranks share ``shared_cores``: ``max(1, N·t/C) / max(1, N₀·t/C)`` (1 when they do
        not)."""
        if not self.shared_cores:
            return 1.0
        threads = self.threads_per_rank / self.shared_cores
        return max(1.0, self.world_size * threads) / max(1.0, self.recorded * threads)


@dataclass
class Editable:
    """A graph being edited: nodes, edges, each node's work and release."""

    graph: StepGraph
    work: list[float]
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    release: list[float] = field(default_factory=list)
    buckets: dict[int, int] = field(default_factory=dict)   # rank -> gradient collectives
    #: The transfer nodes of each added collective, one per rank: they progress together.
    together: list[list[int]] = field(default_factory=list)

    @classmethod
    def of(cls, graph: StepGraph, work: np.ndarray) -> Editable:
        return cls(graph, work.tolist(), list(graph.nodes), list(graph.edges),
                   [math.nan if n.release_us is None else n.release_us for n in graph.nodes])

    def add(self, node: Node, work: float) -> int:
        self.nodes.append(node)
        self.work.append(work)
        self.release.append(math.nan)
        return len(self.nodes) - 1

    def finished(self) -> tuple[StepGraph, np.ndarray, np.ndarray]:
        graph = StepGraph(self.graph.step, self.graph.origin_us, self.nodes, self.edges)
        return graph, np.array(self.work), np.array(self.release)

    def of_rank(self, rank: int, kind: NodeKind) -> list[int]:
        return [k for k, n in enumerate(self.nodes) if n.rank == rank and n.kind == kind]


def optimizer_start(graph: StepGraph, rank: int) -> float:
    """The rank's first ``Optimizer.`` node's start (recorded); infinite without one."""
    return min((n.start_us for n in graph.nodes if n.rank == rank
                and n.name.startswith(OPTIMIZER_PREFIX)), default=math.inf)


def sync_collectives(graph: StepGraph, rank: int, gradient_kind: str, gathers: bool
                     ) -> tuple[list[Collective], list[Collective]]:
    """The rank's gradient-sync collectives a bucket cap rebuilds: those of its gradient
    collective before its optimizer, and (``gathers``) its all-gathers after it."""
    begin = optimizer_start(graph, rank)
    mine = sorted((c for c in graph.collectives if c.rank == rank),
                  key=lambda c: graph.nodes[c.arrive].start_us)
    before = [c for c in mine if c.kind == gradient_kind
              and graph.nodes[c.arrive].start_us < begin]
    after = [c for c in mine if gathers and c.kind == "all_gather"
             and graph.nodes[c.arrive].start_us >= begin]
    return before, after


def rebucket(edit: Editable, plan: Rebucket, cost: CollectiveCost, world_size: int) -> None:
    """Replace each rank's gradient-sync collectives by buckets at ``plan.cap_mib`` (see the
    module)."""
    graph = edit.graph
    new: dict[int, list[tuple[int, int]]] = {}        # rank -> [(arrive, transfer)] per bucket
    gathered: dict[int, list[tuple[int, int]]] = {}
    for rank, grads in sorted(plan.ranks.items()):
        before, after = sync_collectives(graph, rank, plan.gradient_kind, plan.gathers)
        if not before:
            continue
        removed = _remove(edit, [*before, *after])
        sizes, anchors, counts = buckets_of(graph, grads, plan.cap_mib, plan.ready_order)
        template = _Template.of(edit, before, removed)
        new[rank] = template.launch(edit, anchors, sizes, plan.gradient_kind, cost,
                                    world_size)
        template.complete(edit, before, new[rank], removed, anchors)
        _copies_after_buckets(edit, rank, counts, new[rank], before)
        if after:
            gathers = _Template.of(edit, after, removed)
            first_issue = next((k for c in after for k in c.issue), None)
            anchor = first_issue if first_issue is not None else anchors[-1]
            gathered[rank] = gathers.launch(edit, [anchor] * len(sizes), sizes, "all_gather",
                                            cost, world_size)
            gathers.complete(edit, after, gathered[rank], removed, [anchor] * len(sizes))
        edit.buckets[rank] = len(sizes)
    for launched in (new, gathered):
        _arrivals(edit, launched)


def buckets_of(graph: StepGraph, grads: RankGradients, cap_mib: float,
               ready_order: bool = False) -> tuple[list[int], list[int], list[int]]:
    """Each bucket's bytes, in launch order, the node after which it launches (the later of
    its last-ready gradient's hooks' and the bucket before it's: buckets launch in order), and
    how many gradients it holds."""
    count = len(grads.gradients)
    by_registration = sorted(range(count), key=lambda i: grads.registration[i])
    position = {i: k for k, i in enumerate(by_registration)}
    buckets = assign_buckets(
        [grads.gradients[i].size_bytes for i in by_registration], cap_mib * MIB,
        [grads.dtypes[i] for i in by_registration] if grads.dtypes else None,
        [position[i] for i in range(count)] if ready_order else None)
    sizes: list[int] = []
    anchors: list[int] = []
    for bucket in buckets:
        members = [grads.gradients[by_registration[k]] for k in bucket]
        sizes.append(sum(g.size_bytes for g in members))
        ready = max(members, key=lambda g: graph.nodes[g.launchable].end_us).launchable
        anchors.append(ready if not anchors or graph.nodes[ready].end_us >=
                       graph.nodes[anchors[-1]].end_us else anchors[-1])
    return sizes, anchors, [len(bucket) for bucket in buckets]


def _copies_after_buckets(edit: Editable, rank: int, counts: list[int],
                          launched: list[tuple[int, int]], removed: list[Collective]) -> None:
    """DDP's Reducer copies the reduced gradients out of its buckets bucket by bucket, in
    launch order, each bucket's after waiting for its collective: the first copy of bucket b
    waits for bucket b's transfer. A recorded gap on the thread before a copy (since the copy
    before it, or the last removed issue) in which a removed collective of the rank ended was
    such a wait: it goes, and the time from that collective's end to the gap's end (the
    thread's wake-up) is kept on the new wait. Only where the rank's copies are one per gradient
    of the buckets (else they stay where they were recorded)."""
    copies = [c.node for c in edit.graph.bucket_copies if c.rank == rank]
    if len(copies) != sum(counts):
        return
    nodes = edit.nodes
    ended = sorted(nodes[c.transfer].end_us for c in removed)
    issues = {k for c in removed for k in c.issue}
    into = {e.dst: k for k, e in enumerate(edit.edges) if e.kind == EdgeKind.PROGRAM}
    wake: dict[int, float] = {}
    for previous, copy in zip([None, *copies], copies, strict=False):
        node = copy
        # back along the thread (the Reducer's views of a bucket come between its wait and
        # its copies)
        while node != previous and node not in issues and node in into:
            k = into[node]
            e = edit.edges[k]
            waited = [t for t in ended if nodes[e.src].end_us < t <= nodes[node].start_us]
            if e.gap_us > 0 and waited:
                wake[copy] = nodes[node].start_us - waited[-1]
                edit.edges[k] = Edge(e.src, e.dst, e.kind, 0.0)
            node = e.src
    first = 0
    for count, (_, transfer) in zip(counts, launched, strict=True):
        edit.edges.append(Edge(transfer, copies[first], EdgeKind.COMPLETE,
                               wake.get(copies[first], 0.0)))
        first += count


@dataclass
class _Removed:
    nodes: set[int]


def _remove(edit: Editable, collectives: list[Collective]) -> _Removed:
    """The collectives' nodes and issuing ops take no time; their issue, arrival and
    completion edges go (program edges stay, so their lanes close up)."""
    nodes = {k for c in collectives for k in (*c.nodes, *c.issue)}
    edit.edges[:] = [e for e in edit.edges if not (
        (e.kind == EdgeKind.COMPLETE and e.src in nodes)
        or (e.kind in ISSUING and e.dst in nodes)
        or (e.kind == EdgeKind.ARRIVAL and (e.src in nodes or e.dst in nodes)))]
    for k in nodes:
        edit.work[k] = 0.0
    return _Removed(nodes)


@dataclass(frozen=True)
class _Template:
    """What the removed collectives of one rank say new ones look like."""

    rank: int
    lanes: list[str]
    name: str
    issue_us: float
    issue_gap_us: float
    issue_kind: EdgeKind

    @classmethod
    def of(cls, edit: Editable, collectives: list[Collective], removed: _Removed) -> _Template:
        nodes, graph = edit.nodes, edit.graph
        lanes = list(dict.fromkeys(nodes[c.transfer].lane for c in collectives))
        issue = [sum(nodes[k].duration_us for k in c.issue if nodes[k].kind != NodeKind.WAIT)
                 for c in collectives if c.issue]
        arrives = {c.arrive for c in collectives}
        gaps = [(e.gap_us, e.kind) for e in graph.edges
                if e.kind in ISSUING and e.dst in arrives]
        return cls(collectives[0].rank, lanes, nodes[collectives[0].transfer].name,
                   statistics.median(issue) if issue else 0.0,
                   statistics.median(g for g, _ in gaps) if gaps else 0.0,
                   gaps[0][1] if gaps else EdgeKind.ISSUE)

    def launch(self, edit: Editable, anchors: list[int], sizes: list[int], kind: str,
               cost: CollectiveCost, world_size: int) -> list[tuple[int, int]]:
        """Issue, arrive and transfer nodes of one collective per bucket (see the module)."""
        launched: list[tuple[int, int]] = []
        issues = _insert_after(edit, anchors, self.issue_us, f"issue {kind}")
        for b, (issue, size) in enumerate(zip(issues, sizes, strict=True)):
            lane = self.lanes[b % len(self.lanes)]
            at = edit.nodes[issue].end_us
            arrive = edit.add(Node(self.rank, lane, NodeKind.ARRIVE, self.name, at, 0.0), 0.0)
            work = cost.time_us(kind, size, world_size)
            transfer = edit.add(Node(self.rank, lane, NodeKind.COMMUNICATION, self.name, at,
                                     work), work)
            edit.edges += [Edge(issue, arrive, self.issue_kind, self.issue_gap_us),
                           Edge(arrive, transfer, EdgeKind.PROGRAM, 0.0)]
            if b >= len(self.lanes):
                edit.edges.append(Edge(launched[b - len(self.lanes)][1], arrive,
                                       EdgeKind.PROGRAM, 0.0))
            launched.append((arrive, transfer))
        step_end = edit.of_rank(self.rank, NodeKind.STEP_END)
        for _, transfer in launched[-len(self.lanes):]:
            edit.edges += [Edge(transfer, end, EdgeKind.STEP, 0.0) for end in step_end]
        return launched

    def complete(self, edit: Editable, collectives: list[Collective],
                 launched: list[tuple[int, int]], removed: _Removed, anchors: list[int]
                 ) -> None:
        """Completion edges from the new transfers into the waits the removed ones had (a
        wait that began before a bucket could launch does not wait for it: an untraced wait
        found mid-backward, say)."""
        own = {k for c in collectives for k in c.nodes}
        gaps: dict[int, float] = {}
        for e in edit.graph.edges:
            if e.kind == EdgeKind.COMPLETE and e.src in own and e.dst not in removed.nodes:
                gaps[e.dst] = max(gaps.get(e.dst, -math.inf), e.gap_us)
        waits = sorted(gaps, key=lambda w: edit.nodes[w].start_us)
        if not waits:
            begin = optimizer_start(edit.graph, self.rank)
            waits = [k for k, n in enumerate(edit.nodes) if n.rank == self.rank
                     and n.start_us == begin][:1]
        count = len(launched)
        for j, wait in enumerate(waits, start=1):
            gap = max(gaps.get(wait, 0.0), 0.0)
            for b, (_, transfer) in enumerate(launched[:math.ceil(j * count / len(waits))]):
                if edit.nodes[anchors[b]].end_us <= edit.nodes[wait].start_us:
                    edit.edges.append(Edge(transfer, wait, EdgeKind.COMPLETE, gap))


def _insert_after(edit: Editable, anchors: list[int], work: float, name: str) -> list[int]:
    """A node of ``work`` after each anchor on its lane (several after one anchor in order),
    before what followed the anchor there."""
    inserted = []
    by_anchor: dict[int, list[int]] = {}
    for anchor in anchors:
        node = edit.nodes[anchor]
        k = edit.add(Node(node.rank, node.lane, NodeKind.HOST, name, node.end_us, work), work)
        by_anchor.setdefault(anchor, []).append(k)
        inserted.append(k)
    for anchor, chain in by_anchor.items():
        lane = edit.nodes[anchor].lane
        onward = [i for i, e in enumerate(edit.edges) if e.src == anchor and e.kind in (
            EdgeKind.PROGRAM, EdgeKind.STEP) and edit.nodes[e.dst].lane == lane]
        links = [Edge(a, b, EdgeKind.PROGRAM, 0.0) for a, b in zip([anchor, *chain], chain,
                                                                   strict=False)]
        for i in onward:
            old = edit.edges[i]
            edit.edges[i] = Edge(chain[-1], old.dst, old.kind, old.gap_us)
        edit.edges += links
    return inserted


def _arrivals(edit: Editable, launched: dict[int, list[tuple[int, int]]]) -> None:
    """Bucket b's transfer on each rank waits for bucket b's arrival on every other rank, and
    the ranks' transfers of bucket b progress together (``Editable.together``)."""
    count = min((len(v) for v in launched.values()), default=0)
    for b in range(count):
        edit.together.append([mine[b][1] for mine in launched.values()])
        for rank, mine in launched.items():
            edit.edges += [Edge(theirs[b][0], mine[b][1], EdgeKind.ARRIVAL, 0.0)
                           for other, theirs in launched.items() if other != rank]


def scale_world(edit: Editable, plan: WorldSize, cost: CollectiveCost) -> None:
    """Compute and the recorded transfers at ``plan.world_size`` ranks (see the module; the
    collectives a re-bucketing added are costed at that world size already)."""
    graph = edit.graph
    share = plan.recorded / plan.world_size
    ready_by_rank: dict[int, float] = {}
    for g in graph.gradients:
        ready_by_rank[g.rank] = max(ready_by_rank.get(g.rank, -math.inf),
                                    graph.nodes[g.node].end_us)
    optimizer = {rank: optimizer_start(graph, rank) for rank in ready_by_rank}
    kinds = {k: c for c in graph.collectives for k in c.nodes}
    for k, node in enumerate(graph.nodes):
        if node.kind == NodeKind.COMPUTE and node.name != GRAD_READY:
            backward_end = ready_by_rank.get(node.rank, math.inf)
            if node.start_us < backward_end or (
                    plan.sharded_optimizer and node.start_us >= optimizer.get(node.rank,
                                                                              math.inf)):
                edit.work[k] *= share
        elif node.kind == NodeKind.COMMUNICATION and k in kinds:
            c = kinds[k]
            if c.size_bytes:
                was = cost.model.time_us(c.size_bytes, plan.recorded, c.kind, cost.backend)
                now = cost.model.time_us(c.size_bytes, plan.world_size, c.kind, cost.backend)
                edit.work[k] *= now / was if was > 0 else 1.0
    if plan.crowding != 1.0:
        for k, node in enumerate(edit.nodes):
            if node.kind in (NodeKind.COMPUTE, NodeKind.COMMUNICATION, NodeKind.HOST):
                edit.work[k] *= plan.crowding
