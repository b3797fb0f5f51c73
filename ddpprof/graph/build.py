"""Build each analyzed step's dependency graph (``model.StepGraph``) from the ranks' loaded
traces. Pure: no I/O. What becomes a node and an edge is defined in ``docs/critical-path.md``:

* **Host lanes**: each thread's host spans (``cpu_op``, ``user_annotation``, ``cuda_runtime``,
  ...; not the ProfilerStep itself) inside the rank's step, cut where a span nests another so
  that every instant of the thread belongs to its innermost span: one node per piece, in
  program order. A piece is communication when its span is a host backend's collective
  (``gloo:*``), host work when it is a launch, a ``c10d::`` op or (GPU runs) any host op, and
  compute otherwise (a CPU run's ops are its compute).
* **Device lanes**: each stream's kernels launched in the step, in order; an edge from the
  launch (same correlation id) to its kernel.
* **Collectives**: a participation is an *arrive* node (zero length, where the rank joined)
  followed by a *transfer* node. Participations are matched across ranks as
  ``metrics.waits`` matches calls (process group and sequence number, else order); a matched
  transfer starts when the last member arrived, with an edge from every member's arrive.
* **Issue and completion**: the k-th ``c10d::`` collective op of a rank issues its k-th
  backend span on the backend's thread (where the counts agree, as ``classify`` pairs them);
  a blocking wait (``classify.BLOCKING_WAIT``) returns when the collective it waited for ended:
  the last one of its rank that ended during the wait. The piece of the wait in which that
  collective ended (a wait may hold ops of its own) becomes a zero-length node at the piece's
  end, so that a replay in which the collective ends sooner ends the wait sooner.
* **Blocking issue**: a ``c10d::`` op that lasts until the collective it issued has ended
  is an issue (up to the collective's start) followed by a wait at its end.
* **Untraced waits**: a thread that blocks on a collective without a span saying so (the
  DDP reducer's wait at the end of backward) shows a gap that ends when the collective does:
  a gap longer than ``2 × COMPLETION_SLACK_US`` on a host thread whose next node starts at
  most ``WAKE_UP_SLACK_US`` after a collective of its rank ended inside the gap gets a
  completion edge from that collective.
* **Step start and end**: a zero-length node per rank at its ProfilerStep's start, before
  every lane's first node, and one at its end, after every lane's last node.
* **What re-bucketing needs** (``graph.edit``): each gradient (its ``AccumulateGrad``) and the
  end of the hooks the autograd engine ran with it (``Gradient.after_hooks``), and each copy
  of a reduced gradient out of DDP's buckets (``StepGraph.bucket_copies``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import msgspec
import numpy as np

from ..metrics.comm import message_bytes
from ..metrics.middle import middle_index
from ..metrics.waits import _match
from ..trace import classify
from ..trace.calls import call_args
from ..trace.classify import KernelClassifier
from ..trace.events import CommArgs, RankTrace
from ..trace.loader import _collector_paused
from . import model
from .completions import NodeView, issue_and_complete, stream_waits, thread_handoffs, untraced_waits
from .lanes import Part, device_lanes, host_lanes, step_ends
from .model import Collective, EdgeKind, Gradient, Node, StepGraph, recorded_graph
from .prepared import Prepared, StepEvents, prepare
from .repair import acyclic


def _rank_part(p: Prepared, rank: int, events: StepEvents, lo: float, hi: float,
               step_thread: int) -> tuple[Part, int]:
    """One rank's share of one step's graph, and how many of its device records waited for
    something the trace does not show."""
    trace, part = p.trace, Part(rank)
    step_lane = f"thread {trace.threads[step_thread][1]}"
    part.add(Node(rank, step_lane, model.NodeKind.STEP_START, "step start", lo, 0.0))
    host_lanes(p, part, events.host, lo, hi)
    device_lanes(p, part, events, lo)
    issue_and_complete(p, part, events.host)
    view = NodeView.of(part.nodes)     # the nodes are final: only edges are added from here
    untraced_waits(p, part, view)
    if p.gpu:
        thread_handoffs(part, view)
    unexplained = stream_waits(p, part, view)
    step_ends(part, hi, step_lane)
    return part, unexplained


@dataclass
class RankStep:
    """One rank's share of one step's graph, with what joining the ranks needs of its
    collectives: made where the rank's trace is read (``analyze``'s rank worker), so that the
    trace is not read again to join the ranks."""

    number: int                  # the ProfilerStep's number (-1: the whole trace)
    name: str
    start_us: float
    part: Part
    #: Its collective events by start: (event, collective, process group, sequence number).
    collectives: list[tuple[int, str, str, int | None]]
    #: The same collectives as the graph keeps them (nodes of this part), and its gradients.
    annotated: list[Collective] = field(default_factory=list)
    gradients: list[Gradient] = field(default_factory=list)
    #: Its device records that waited for something the trace does not show (see
    #: ``completions.stream_waits``), and those it inherited from before the step.
    unexplained: int = 0
    inherited: int = 0
    unlaunched: int = 0          # its communication kernels with no launch in the trace


# (its nodes and edges are a few hundred thousand objects with no cycles: each collection
# would walk them all, a fifth of the time)
@_collector_paused()
def rank_steps(trace: RankTrace, rank: int, keep_last_step: bool = False,
               classifier: KernelClassifier | None = None, at_most: int | None = None
               ) -> list[RankStep]:
    """``rank``'s share of the graph of each of its analyzed steps (at most ``at_most`` of
    them, evenly spread over the window, one: its middle step; the same steps on every rank
    that has the same)."""
    p = prepare(trace, keep_last_step, classifier)
    issuer = {span: op for span, op in classify.issuing_ops(
        trace, np.flatnonzero(p.host_comm)).items()}
    chosen = list(range(len(p.steps)))
    if at_most is not None and len(chosen) > at_most:
        chosen = [int(k) for k in np.unique(np.round(np.linspace(
            0, len(chosen) - 1, at_most)))] if at_most > 1 else [middle_index(len(chosen))]
    found = []
    for position in chosen:
        number, name, lo, hi, thread = p.steps[position]
        part, unexplained = _rank_part(p, rank, p.by_step[position], lo, hi, thread)
        events = sorted(part.collectives, key=lambda i: trace.start_us[i])
        arguments = call_args(trace, np.array(events, dtype=np.int64))
        collectives = [(i, classify.collective_of(trace.names[trace.name_id[i]],
                                                  args.collective if args else None),
                        (args.group or "") if args else "", args.sequence if args else None)
                       for i, args in zip(events, arguments, strict=True)]
        annotated = [_annotated(p, part, i, kind, args, issuer.get(i))
                     for (i, kind, _, _), args in zip(collectives, arguments, strict=True)]
        gradients = [Gradient(rank, part.last[i], int(size), part.after_hooks.get(i))
                     for i, size in sorted(trace.grad_bytes.items()) if i in part.last]
        found.append(RankStep(number, name, lo, part, collectives, annotated, gradients,
                              unexplained, len(part.inherited), len(part.unlaunched)))
    return found


def _annotated(p: Prepared, part: Part, event: int, kind: str, args: CommArgs | None,
               op: int | None) -> Collective:
    """A collective event of ``part`` as the graph keeps it (nodes of the part)."""
    trace = p.trace
    if op is not None:
        kind = classify.issued_collective(trace, op)
    size = message_bytes(kind, args.in_bytes, args.out_bytes,
                         args.group_size or trace.world_size) if args else None
    # a lane's nodes are added in time order: those from the arrive to the span's last piece
    # are the span's own and what nested in it
    nodes = list(range(part.arrive[event], part.last[event] + 1))
    launch = p.launch_of.get(event)
    issuing = op if op is not None else launch
    issue = [] if issuing is None or issuing not in part.pieces else [
        *part.pieces[issuing], *(part.blocking_waits[k] for k in part.pieces[issuing]
                                 if k in part.blocking_waits)]
    return Collective(part.rank, kind, size, part.arrive[event], part.transfer[event], nodes,
                      issue)


def join_steps(ranks: dict[int, list[RankStep]]) -> tuple[list[StepGraph], list[str]]:
    """One graph per step that every rank analyzed (matched by step number), and notes."""
    by_number = [{step.number: step for step in steps} for steps in ranks.values()]
    common = sorted(set.intersection(*(set(s) for s in by_number))) if by_number else []
    notes: list[str] = []
    if by_number and any(len(s) != len(common) for s in by_number):
        notes.append("the ranks analyzed different steps: only the steps every rank has "
                     f"({len(common)}) have a graph")
    graphs = []
    inherited = unexplained = unlaunched = 0
    for number in common:
        members = [steps[number] for steps in by_number]
        graphs.append(_join(members[-1].name, min(m.start_us for m in members), members,
                            notes))
        inherited += sum(m.inherited for m in members)
        unexplained += sum(m.unexplained for m in members)
        unlaunched += sum(m.unlaunched for m in members)
    if inherited:
        notes.append(f"{inherited} device records ran in a step but were launched before it "
                     "(the device's queue, or launches before the profiler started): each is "
                     "the previous step's work on the path (`inherited`), matched with no "
                     "other rank")
    if unlaunched:
        notes.append(f"{unlaunched} communication kernels have no launch in the trace: each is "
                     "placed after the record before it on its stream, and matched with no "
                     "other rank's (which collective it was is not recorded)")
    if unexplained:
        notes.append(f"{unexplained} device records started later than their launch and "
                     "their stream allowed, with no kernel of another stream ending just "
                     "before: the trace does not show what they waited for (the idle before "
                     "them on a path has no recorded cause)")
    return graphs, notes


def step_graphs(traces: dict[int, RankTrace], keep_last_step: bool = False,
                classifier: KernelClassifier | None = None) -> tuple[list[StepGraph], list[str]]:
    """One graph per step that every rank analyzed (matched by step number), and notes."""
    return join_steps({rank: rank_steps(t, rank, keep_last_step, classifier)
                       for rank, t in traces.items()})


def _join(step: str, origin: float, parts: list[RankStep], notes: list[str]) -> StepGraph:
    """The ranks' parts as one graph, with the collectives matched across ranks."""
    nodes: list[Node] = []
    edges: list[tuple[int, int, EdgeKind]] = []
    offsets = []
    collectives: list[Collective] = []
    gradients: list[Gradient] = []
    copies: list[model.BucketCopy] = []
    for member in parts:
        offsets.append(len(nodes))
        at = offsets[-1]
        nodes.extend(member.part.nodes)
        edges.extend([(u + at, v + at, kind) for u, v, kind in member.part.edges] if at
                     else member.part.edges)
        collectives += [msgspec.structs.replace(
            c, arrive=c.arrive + at, transfer=c.transfer + at, nodes=[k + at for k in c.nodes],
            issue=[k + at for k in c.issue]) for c in member.annotated]
        gradients += [msgspec.structs.replace(
            g, node=g.node + at, after_hooks=None if g.after_hooks is None else g.after_hooks + at)
            for g in member.gradients]
        copies += [model.BucketCopy(member.part.rank, k + at) for k in member.part.bucket_copies]
    members: dict[tuple[str, str], dict[int, tuple[list[int], list[int | None]]]] = {}
    for position, member in enumerate(parts):
        for i, kind, group, sequence in member.collectives:
            index, sequences = members.setdefault((group, kind), {}).setdefault(
                position, ([], []))
            index.append(i)
            sequences.append(sequence)
    unmatched: list[str] = []
    for (group, kind), by_part in sorted(members.items()):
        if len(by_part) < 2:
            continue
        typed = {k: (np.array(v[0], dtype=np.int64), v[1]) for k, v in by_part.items()}
        for row in _match(typed, f"{kind} in group {group or 'default'}", unmatched):
            ends = {k: offsets[k] + parts[k].part.transfer[i] for k, i in row.items()}
            arrives = {k: offsets[k] + parts[k].part.arrive[i] for k, i in row.items()}
            last_start = max(nodes[a].start_us for a in arrives.values())
            for k, transfer in ends.items():
                old = nodes[transfer]
                begin = min(max(last_start, old.start_us), old.end_us)
                nodes[transfer] = Node(old.rank, old.lane, old.kind, old.name, begin,
                                       old.end_us - begin)
                edges.extend((arrives[j], transfer, EdgeKind.ARRIVAL) for j in arrives
                             if j != k)
    notes.extend(f"{step}: {line}" for line in unmatched)
    edges, dropped = acyclic(nodes, edges)
    if dropped:
        notes.append(f"{step}: {_dropped(dropped)} contradicted the recorded times (they made "
                     "a cycle) and were left out")
    return recorded_graph(step, origin, nodes, edges, collectives, gradients, copies)


_EDGE_WORDS = {EdgeKind.STREAM: "inferred cross-stream waits",
               EdgeKind.HANDOFF: "hand-offs between threads",
               EdgeKind.COMPLETE: "completions", EdgeKind.ARRIVAL: "arrivals across ranks",
               EdgeKind.ISSUE: "issue edges", EdgeKind.LAUNCH: "launch edges"}


def _dropped(dropped: Counter[EdgeKind]) -> str:
    return ", ".join(f"{n} {_EDGE_WORDS.get(kind, kind.value)}" for kind, n in dropped.items())
