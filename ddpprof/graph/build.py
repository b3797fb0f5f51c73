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

from dataclasses import dataclass, field

import msgspec
import numpy as np

from ..analysis.calls import call_args
from ..analysis.options import LastStep
from ..metrics.comm import message_bytes
from ..metrics.waits import _match
from ..trace import classify
from ..trace.classify import KernelClassifier, Kind
from ..trace.events import CommArgs, RankTrace
from ..trace.structure import launching_host_event, nested_in
from . import model
from .marks import thread_marks
from .model import Collective, EdgeKind, Gradient, Node, NodeKind, StepGraph, recorded_graph

#: A collective counts as awaited by a wait that returned up to this long (µs) before the
#: collective's span was closed: the backend closes its span after waking the waiter.
COMPLETION_SLACK_US = 50.0
#: A thread blocked without a span saying so (an untraced wait) runs again at most this long
#: (µs) after the collective it waited for ended: waking it takes the scheduler time. On this
#: project's 2-core machine (``pytorch_ddp``, gloo) the DDP reducer's thread ran again 51 to
#: 77 µs after its all-reduce ended in 11 of 12 waits on 2 ranks (3 ms in one), and on 3
#: ranks sharing the 2 cores 61 to 206 µs in 9 of 12 (3.8 to 6.5 ms in 3: not caught).
WAKE_UP_SLACK_US = 250.0


@dataclass
class _Prepared:
    """What every step of one rank needs, computed once per trace."""

    trace: RankTrace
    stream: np.ndarray
    host: np.ndarray             # host spans that are work on a thread
    kernels: np.ndarray          # device events on a stream
    kinds: np.ndarray            # kernel kinds (classify.Kind)
    host_comm: np.ndarray        # backend collectives that run on the host (gloo)
    waits: np.ndarray
    issuing: np.ndarray          # launches and c10d ops: host work, also on a CPU run
    #: Host ops nested in a backend collective on their thread (gloo's own copies): part of
    #: the collective; nested in a span of communication or of waiting for it (``c10d::``
    #: ops, waits): host work. ``analyze`` counts neither as compute (``host_lanes``).
    in_host_comm: np.ndarray
    in_host_wait: np.ndarray
    gpu: bool
    launch_of: dict[int, int]    # kernel event -> its launch event
    issued_by: dict[int, int]    # backend span -> the c10d op that issued it
    steps: list[tuple[int, str, float, float, int]]  # (number, name, start, end, thread)
    bucket_copies: np.ndarray    # DDP's copies of reduced gradients out of their buckets
    gradients: np.ndarray        # the gradients' AccumulateGrad events


def prepare(trace: RankTrace, keep_last_step: bool = False,
            classifier: KernelClassifier | None = None) -> _Prepared:
    stream = classify.streams(trace)
    cats = classify.per_category
    host = (stream < 0) & cats(trace, lambda c: c in classify.HOST_ISSUE_CATEGORIES) & \
        ~classify.is_step_span(trace)
    kernels = classify.device_kernels(trace, stream) & (stream >= 0)
    kinds = classify.kernel_kinds(trace, classifier or KernelClassifier())
    host_comm = host & classify.per_name(trace, classify.runs_on_host)
    waits = host & classify.per_name(trace, lambda n: bool(classify.BLOCKING_WAIT.search(n)))
    c10d = host & classify.per_name(trace, lambda n: bool(classify.C10D_COLLECTIVE.match(n)))
    comm_or_wait = host & classify.per_name(trace, lambda n: bool(classify.HOST_COMM.search(n)))
    issuing = c10d | (host & ~cats(trace, lambda c: c in classify.HOST_WORK_CATEGORIES)) | \
        comm_or_wait
    launch_of = _launches(trace, stream, kernels)
    gpu = bool(kernels.any())
    # (on a GPU every host piece is host work: only a CPU run's ops can be compute)
    cpu_ops = np.zeros_like(host) if gpu else host
    in_host_comm = nested_in(trace, host_comm, cpu_ops)
    in_host_wait = nested_in(trace, comm_or_wait, cpu_ops)
    # an op on the span's own thread needs no edge of its own
    issued_by = {span: op for span, op in classify.issuing_ops(
        trace, np.flatnonzero(host_comm)).items()
        if trace.thread_id[span] != trace.thread_id[op]}
    index, numbers = classify.profiler_steps(trace, stream)
    last = LastStep.decide(classify.step_names(trace), keep_last_step)
    index, numbers = last.analyzed(index), last.analyzed(numbers)
    steps = [(int(n), trace.names[trace.name_id[i]], float(trace.start_us[i]),
              float(trace.end_us[i]), int(trace.thread_id[i]))
             for i, n in zip(index, numbers, strict=True)]
    if not steps and trace.n_events:
        busiest = int(np.bincount(trace.thread_id[host]).argmax()) if host.any() else 0
        steps = [(-1, "whole trace", float(trace.start_us.min()), float(trace.end_us.max()),
                  busiest)]
    gradients = np.zeros(trace.n_events, dtype=bool)
    gradients[list(trace.grad_bytes)] = True
    return _Prepared(trace, stream, host, kernels, kinds, host_comm, waits, issuing,
                     in_host_comm, in_host_wait, gpu, launch_of, issued_by, steps,
                     classify.per_name(trace, classify.copies_bucket_to_gradient), gradients)


def _launches(trace: RankTrace, stream: np.ndarray, kernels: np.ndarray) -> dict[int, int]:
    """Each kernel's launch: the host event of its correlation id."""
    launcher = launching_host_event(trace, stream)
    launched = np.flatnonzero(kernels & (launcher >= 0))
    return dict(zip(launched.tolist(), launcher[launched].tolist(), strict=True))


@dataclass
class _Part:
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

    def add(self, node: Node) -> int:
        self.nodes.append(node)
        return len(self.nodes) - 1


def _segments(start: np.ndarray, end: np.ndarray, lo: float, hi: float,
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
        s = max(float(start[i]), lo)
        while stack and min(float(end[stack[-1]]), hi) <= s:
            emit(min(float(end[stack[-1]]), hi))
            stack.pop()
        emit(s)
        t = max(t, s)
        if parents is not None and stack and of is not None and of[i]:
            parents[i] = stack[-1]
        if min(float(end[i]), hi) > s:
            stack.append(i)
    while stack:
        emit(min(float(end[stack[-1]]), hi))
        stack.pop()
    return pieces


def _rank_part(p: _Prepared, rank: int, lo: float, hi: float, step_thread: int) -> _Part:
    trace, part = p.trace, _Part(rank)
    s, e = trace.start_us, trace.end_us
    step_lane = f"thread {trace.threads[step_thread][1]}"
    part.add(Node(rank, step_lane, NodeKind.STEP_START, "step start", lo, 0.0))
    inside = (s < hi) & (e > lo)
    for thread in np.unique(trace.thread_id[p.host & inside]).tolist():
        events = np.flatnonzero(p.host & inside & (trace.thread_id == thread))
        lane = f"thread {trace.threads[thread][1]}"
        previous = None
        parents: dict[int, int] = {}
        first_node = len(part.nodes)
        for k, a, b in _segments(s[events], e[events], lo, hi, parents, p.gradients[events]):
            i = int(events[k])
            name = trace.names[trace.name_id[i]]
            if p.host_comm[i] and i not in part.first and s[i] >= lo:
                arrive = part.add(Node(rank, lane, NodeKind.ARRIVE, name, a, 0.0))
                part.arrive[i] = arrive
                part.collectives.append(i)
                if previous is not None:
                    part.edges.append((previous, arrive, EdgeKind.PROGRAM))
                previous = arrive
                kind = NodeKind.COMMUNICATION
            elif p.host_comm[i] or p.in_host_comm[i]:
                kind = NodeKind.COMMUNICATION
            elif p.issuing[i] or p.waits[i] or p.in_host_wait[i] or p.gpu:
                kind = NodeKind.HOST
            else:
                kind = NodeKind.COMPUTE
            node = part.add(Node(rank, lane, kind, name, a, b - a))
            if i in part.arrive:
                part.transfer.setdefault(i, node)
            part.first.setdefault(i, node)
            part.last[i] = node
            part.pieces.setdefault(i, []).append(node)
            if previous is not None:
                part.edges.append((previous, node, EdgeKind.PROGRAM))
            previous = node
        hooks_end, copies = thread_marks(trace, part.nodes[first_node:], events, parents, hi,
                                         events[p.bucket_copies[events]])
        part.after_hooks.update((i, first_node + k) for i, k in hooks_end.items())
        part.bucket_copies += [first_node + k for k in copies]
    _device_lanes(p, part, lo, hi)
    _issue_and_complete(p, part)
    _untraced_waits(part)
    _step_ends(part, hi, step_lane)
    return part


def _device_lanes(p: _Prepared, part: _Part, lo: float, hi: float) -> None:
    trace = p.trace
    launched_at = trace.start_us.copy()
    for kernel, launch in p.launch_of.items():
        launched_at[kernel] = trace.start_us[launch]
    picked = np.flatnonzero(p.kernels & (launched_at >= lo) & (launched_at < hi))
    for stream in np.unique(p.stream[picked]).tolist():
        mine = picked[p.stream[picked] == stream]
        mine = mine[np.argsort(trace.start_us[mine], kind="stable")]
        previous = None
        for i in mine.tolist():
            lane, name = f"stream {stream}", trace.names[trace.name_id[i]]
            a, b = float(trace.start_us[i]), float(trace.end_us[i])
            nodes = []
            if p.kinds[i] == Kind.COMMUNICATION:
                part.arrive[i] = part.add(Node(part.rank, lane, NodeKind.ARRIVE, name, a, 0.0))
                part.collectives.append(i)
                nodes.append(part.arrive[i])
                kind = NodeKind.COMMUNICATION
            else:
                kind = NodeKind.COMPUTE
            nodes.append(part.add(Node(part.rank, lane, kind, name, a, b - a)))
            if kind == NodeKind.COMMUNICATION:
                part.transfer[i] = nodes[-1]
            part.first[i], part.last[i] = nodes[0], nodes[-1]
            for u, v in zip([previous, *nodes], nodes, strict=False):
                if u is not None:
                    part.edges.append((u, v, EdgeKind.PROGRAM))
            previous = nodes[-1]
            launched_by = p.launch_of.get(i)
            if launched_by is not None and launched_by in part.last:
                part.edges.append((part.last[launched_by], nodes[0], EdgeKind.LAUNCH))


def _issue_and_complete(p: _Prepared, part: _Part) -> None:
    trace = p.trace
    for span, op in p.issued_by.items():
        if span in part.arrive and op in part.last:
            _split_blocking_issue(part, part.last[op], part.transfer[span])
            part.edges.append((part.last[op], part.arrive[span], EdgeKind.ISSUE))
    done = [(part.nodes[part.last[i]].end_us, part.last[i]) for i in part.collectives]
    for wait in np.flatnonzero(p.waits).tolist():
        if wait not in part.last:
            continue
        start, end = float(trace.start_us[wait]), float(trace.end_us[wait])
        awaited = [d for d in done if start < d[0] <= end + COMPLETION_SLACK_US]
        if not awaited:
            continue
        ended, collective = max(awaited)
        # the piece of the wait (between its children) in which the collective ended
        blocked = [k for k in part.pieces[wait] if part.nodes[k].start_us <= ended
                   <= part.nodes[k].end_us + COMPLETION_SLACK_US]
        node = blocked[0] if blocked else part.last[wait]
        old = part.nodes[node]
        part.nodes[node] = Node(old.rank, old.lane, NodeKind.WAIT, old.name, old.end_us, 0.0)
        part.edges.append((collective, node, EdgeKind.COMPLETE))


def _split_blocking_issue(part: _Part, issue: int, transfer: int) -> None:
    """A ``c10d::`` op that lasts until the collective it issued has ended (gloo can block the
    caller) is two nodes: the issue, up to the collective's start, and a wait at its end."""
    op, collective = part.nodes[issue], part.nodes[transfer]
    if not (op.start_us <= collective.start_us and op.end_us >= collective.end_us
            and op.duration_us > 2 * COMPLETION_SLACK_US):
        return
    part.nodes[issue] = Node(op.rank, op.lane, op.kind, op.name, op.start_us,
                             collective.start_us - op.start_us)
    wait = part.add(Node(op.rank, op.lane, NodeKind.WAIT, op.name, op.end_us, 0.0))
    part.blocking_waits[issue] = wait
    part.edges[:] = [(wait if u == issue and kind == EdgeKind.PROGRAM else u, v, kind)
                     for u, v, kind in part.edges]
    part.edges += [(issue, wait, EdgeKind.PROGRAM), (transfer, wait, EdgeKind.COMPLETE)]


def _untraced_waits(part: _Part) -> None:
    done = [(part.nodes[part.transfer[i]].end_us, part.transfer[i]) for i in part.collectives
            if i in part.transfer]
    if not done:
        return
    waited = {v for _, v, kind in part.edges if kind == EdgeKind.COMPLETE}
    for u, v, kind in list(part.edges):
        before, after = part.nodes[u], part.nodes[v]
        if (kind != EdgeKind.PROGRAM or v in waited or not after.lane.startswith("thread")
                or after.kind in (NodeKind.ARRIVE, NodeKind.COMMUNICATION)
                or after.start_us - before.end_us <= 2 * COMPLETION_SLACK_US):
            continue
        ended = [d for d in done if before.end_us < d[0] <= after.start_us
                 and after.start_us - d[0] <= WAKE_UP_SLACK_US]
        if ended:
            part.edges.append((max(ended)[1], v, EdgeKind.COMPLETE))


def _step_ends(part: _Part, hi: float, lane: str) -> None:
    """Edges from the step start (node 0) to every lane's first node, and from every lane's
    last node to a step end node."""
    firsts: dict[str, int] = {}
    lasts: dict[str, int] = {}
    in_time = sorted(range(1, len(part.nodes)), key=lambda k: (part.nodes[k].start_us, k))
    for k in in_time:
        firsts.setdefault(part.nodes[k].lane, k)
        lasts[part.nodes[k].lane] = k
    for lane_name, k in firsts.items():
        part.edges.append((0, k, EdgeKind.PROGRAM if lane_name == lane else EdgeKind.STEP))
    end = part.add(Node(part.rank, lane, NodeKind.STEP_END, "step end", hi, 0.0))
    if not lasts:
        part.edges.append((0, end, EdgeKind.PROGRAM))
    for lane_name, k in lasts.items():
        part.edges.append((k, end, EdgeKind.PROGRAM if lane_name == lane else EdgeKind.STEP))


@dataclass
class RankStep:
    """One rank's share of one step's graph, with what joining the ranks needs of its
    collectives: made where the rank's trace is read (``analyze``'s rank worker), so that the
    trace is not read again to join the ranks."""

    number: int                  # the ProfilerStep's number (-1: the whole trace)
    name: str
    start_us: float
    part: _Part
    #: Its collective events by start: (event, collective, process group, sequence number).
    collectives: list[tuple[int, str, str, int | None]]
    #: The same collectives as the graph keeps them (nodes of this part), and its gradients.
    annotated: list[Collective] = field(default_factory=list)
    gradients: list[Gradient] = field(default_factory=list)


def rank_steps(trace: RankTrace, rank: int, keep_last_step: bool = False,
               classifier: KernelClassifier | None = None, at_most: int | None = None
               ) -> list[RankStep]:
    """``rank``'s share of the graph of each of its analyzed steps (at most ``at_most`` of
    them, evenly spread over the window, one: its middle step; the same steps on every rank
    that has the same)."""
    p = prepare(trace, keep_last_step, classifier)
    issuer = {span: op for span, op in classify.issuing_ops(
        trace, np.flatnonzero(p.host_comm)).items()}
    steps = p.steps
    if at_most is not None and len(steps) > at_most:
        steps = [steps[int(k)] for k in np.unique(np.round(np.linspace(
            0, len(steps) - 1, at_most)))] if at_most > 1 else [steps[(len(steps) - 1) // 2]]
    found = []
    for number, name, lo, hi, thread in steps:
        part = _rank_part(p, rank, lo, hi, thread)
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
        found.append(RankStep(number, name, lo, part, collectives, annotated, gradients))
    return found


def _annotated(p: _Prepared, part: _Part, event: int, kind: str, args: CommArgs | None,
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
    for number in common:
        members = [steps[number] for steps in by_number]
        graphs.append(_join(members[-1].name, min(m.start_us for m in members), members,
                            notes))
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
        edges.extend((u + at, v + at, kind) for u, v, kind in member.part.edges)
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
    return recorded_graph(step, origin, nodes, edges, collectives, gradients, copies)
