"""The edges that say what a piece of work waited for, in one rank's share of a step graph:
issue (a ``c10d::`` op -> the collective on the backend's thread), completion (a collective
or device work -> the wait or synchronisation that returned when it ended) and stream (a
kernel that waited for another stream's kernel). Pure; the rules and their constants are
in ``docs/critical-path.md``."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from .lanes import Part
from .model import EdgeKind, Node, NodeKind
from .prepared import Prepared

#: A collective counts as awaited by a wait that returned up to this long (µs) before the
#: collective's span was closed: the backend closes its span after waking the waiter.
COMPLETION_SLACK_US = 50.0
#: A thread blocked without a span saying so (an untraced wait) runs again at most this long
#: (µs) after the collective it waited for ended: waking it takes the scheduler time. On this
#: project's 2-core machine (``pytorch_ddp``, gloo) the DDP reducer's thread ran again 51 to
#: 77 µs after its all-reduce ended in 11 of 12 waits on 2 ranks (3 ms in one), and on 3
#: ranks sharing the 2 cores 61 to 206 µs in 9 of 12 (3.8 to 6.5 ms in 3: not caught).
WAKE_UP_SLACK_US = 250.0
#: A host thread of a GPU run resumes at most this long (µs) after the thread it handed work
#: to stopped: the main thread of the 8 × H100 compiled job ran again 275 µs after the
#: autograd engine's thread finished backward (Python's interpreter lock and the hooks' end).
HANDOFF_SLACK_US = 1000.0
#: A kernel that started at least this long (µs) after both its launch and the kernel before
#: it on its stream ended was held by something else: a cross-stream event wait
#: (``cudaStreamWaitEvent``), which the trace records only as the host call.
STREAM_HELD_US = 20.0
#: ... and the kernel of another stream that it waited for ended at most this long (µs)
#: before it started: the device starts a waiting kernel a few µs after the event (1 to 3 µs
#: on the H100 fixtures, 9 to 15 µs on the MI300X one; an NCCL kernel waiting for a
#: gradient up to 77 µs on an H100).
STREAM_SLACK_US = 100.0


def issue_and_complete(p: Prepared, part: Part, host: np.ndarray) -> None:
    """Issue edges, and completion edges into the step's waits (``host``: its host events):
    a wait for a host collective (gloo) returns when the last collective of its rank that
    ended during it did; a device synchronisation (``cudaStreamSynchronize``, ...) when the
    last device record launched before it that ended during it did."""
    for span in part.collectives:
        op = p.issued_by.get(span)
        if op is not None and op in part.last:
            _split_blocking_issue(part, part.last[op], part.transfer[span])
            part.edges.append((part.last[op], part.arrive[span], EdgeKind.ISSUE))
    collectives = [(part.nodes[part.last[i]].end_us, part.last[i]) for i in part.collectives
                   if p.host_comm[i]]
    for wait in host[p.waits[host]].tolist():
        if wait in part.last:
            _complete(p, part, wait, collectives)
    if not part.device or not p.syncs[host].any():
        return
    device = np.array(part.device, dtype=np.int64)
    end = p.trace.end_us[device]
    for sync in host[p.syncs[host]].tolist():
        if sync in part.last:
            ready = device[p.launched_at[device] < p.trace.start_us[sync]]
            _complete(p, part, sync, [(float(e), part.last[i]) for i, e in zip(
                ready.tolist(), end[p.launched_at[device] < p.trace.start_us[sync]].tolist(),
                strict=True)])


def _complete(p: Prepared, part: Part, wait: int, done: list[tuple[float, int]]) -> None:
    """A completion edge from the last of ``done`` (end, node) that ended during ``wait``
    (or up to :data:`COMPLETION_SLACK_US` after it) to the piece of the wait in which it
    ended, made a zero-length ``wait`` node at the piece's end."""
    start, end = float(p.trace.start_us[wait]), float(p.trace.end_us[wait])
    awaited = [d for d in done if start < d[0] <= end + COMPLETION_SLACK_US]
    if not awaited:
        return
    ended, source = max(awaited)
    # the piece of the wait (between its children) in which the awaited work ended
    blocked = [k for k in part.pieces[wait] if part.nodes[k].start_us <= ended
               <= part.nodes[k].end_us + COMPLETION_SLACK_US]
    node = blocked[0] if blocked else part.last[wait]
    old = part.nodes[node]
    part.nodes[node] = Node(old.rank, old.lane, NodeKind.WAIT, old.name, old.end_us, 0.0)
    part.edges.append((source, node, EdgeKind.COMPLETE))


def _split_blocking_issue(part: Part, issue: int, transfer: int) -> None:
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


@dataclass(frozen=True)
class NodeView:
    """The nodes of a part as lists, read once where the nodes no longer change (after
    :func:`issue_and_complete`; the passes after it add edges only): per node, attribute
    access costs more than the passes' own work."""

    start: list[float]
    end: list[float]
    lane: list[str]
    kind: list[NodeKind]
    on_thread: list[bool]            # a host thread's node (else a stream's)

    @classmethod
    def of(cls, nodes: list[Node]) -> NodeView:
        start = np.array([n.start_us for n in nodes], dtype=np.float64)
        end = start + np.array([n.duration_us for n in nodes], dtype=np.float64)
        lanes = [n.lane for n in nodes]
        threads = {lane: lane.startswith("thread") for lane in set(lanes)}
        return cls(start.tolist(), end.tolist(), lanes, [n.kind for n in nodes],
                   [threads[lane] for lane in lanes])


def untraced_waits(p: Prepared, part: Part, view: NodeView) -> None:
    """A host thread's gap that ends soon after a host collective (gloo) ended inside it:
    the thread blocked on that collective without a span saying so (see
    :data:`WAKE_UP_SLACK_US`)."""
    start, end = view.start, view.end
    # (end, node), sorted: the latest that ended by a time is found by bisection
    done = sorted((end[part.transfer[i]], part.transfer[i]) for i in part.collectives
                  if i in part.transfer and p.host_comm[i])
    if not done:
        return
    done_ends = [d[0] for d in done]
    waited = {v for _, v, kind in part.edges if kind == EdgeKind.COMPLETE}
    for u, v, kind in list(part.edges):
        # (the gap first: most edges have none)
        if (start[v] - end[u] <= 2 * COMPLETION_SLACK_US or kind != EdgeKind.PROGRAM
                or v in waited or not view.on_thread[v]
                or view.kind[v] in (NodeKind.ARRIVE, NodeKind.COMMUNICATION)):
            continue
        # the latest collective that ended by the node's start: if any ended in the gap
        # and woke the thread, that one did (both tests are monotone in its end)
        j = bisect.bisect_right(done_ends, start[v]) - 1
        if j >= 0 and end[u] < done_ends[j] and start[v] - done_ends[j] <= WAKE_UP_SLACK_US:
            part.edges.append((done[j][1], v, EdgeKind.COMPLETE))


def thread_handoffs(part: Part, view: NodeView) -> None:
    """Hand-off edges on a GPU run: a host thread's node that starts after a gap longer than
    ``2 × COMPLETION_SLACK_US`` with no completion or issue edge, at most
    :data:`HANDOFF_SLACK_US` after a node of another host thread of the rank ended inside the
    gap, waited for that node (the latest such). A thread that begins in the step (its first
    node, on another thread than the step's own) was handed its work by the step's thread:
    it waited for the last node of that thread that ended before it began, however long
    before (untraced time between them: the autograd engine starting backward)."""
    start, end, lanes = view.start, view.end, view.lane
    host = [k for k in range(1, len(start)) if view.on_thread[k]]
    if not host:
        return
    by_end = np.array(host, dtype=np.int64)
    order = np.argsort(np.array(end)[by_end], kind="stable")
    by_end = by_end[order]
    ends = np.array(end)[by_end]
    explained: set[int] = set()
    before: dict[int, float] = {}
    for u, v, kind in part.edges:
        if kind == EdgeKind.PROGRAM:
            if view.on_thread[v]:
                before[v] = end[u]
        elif kind in (EdgeKind.COMPLETE, EdgeKind.ISSUE, EdgeKind.HANDOFF):
            explained.add(v)
    step_lane = lanes[0]
    for k in host:
        since = before.get(k, start[0])
        if k in explained or start[k] - since <= 2 * COMPLETION_SLACK_US:
            continue
        first = k not in before
        lane = lanes[k]
        if first and lane == step_lane:
            continue
        lo = np.searchsorted(ends, since if first else max(
            since, start[k] - HANDOFF_SLACK_US), side="right")
        hi = np.searchsorted(ends, start[k], side="right")
        other = next((j for j in by_end[lo:hi][::-1].tolist() if lanes[j] != lane
                      and (not first or lanes[j] == step_lane)), None)
        if other is not None:
            part.edges.append((other, k, EdgeKind.HANDOFF))


def stream_waits(p: Prepared, part: Part, view: NodeView) -> int:
    """Stream edges into the step's device records: from the kernel a cross-stream event wait
    read from the host's calls held it for (``Prepared.waits_for``), where that kernel is in
    the step; else, for a record that started :data:`STREAM_HELD_US` or more after both its
    launch and its stream's previous record ended, from the latest record of another stream
    of the rank that ended within :data:`STREAM_SLACK_US` before it started. Returns how many
    records were held with neither: the trace does not show what they waited for."""
    start, end, lanes = view.start, view.end, view.lane
    ready: dict[int, float] = {}
    for u, v, kind in part.edges:
        if kind in (EdgeKind.PROGRAM, EdgeKind.LAUNCH) and not view.on_thread[v]:
            ready[v] = max(ready.get(v, -np.inf), end[u])
    lasts = np.array([part.last[i] for i in part.device], dtype=np.int64)
    if not lasts.size:
        return 0
    ends = np.array(end)[lasts]
    order = np.argsort(ends, kind="stable")
    lasts, ends = lasts[order], ends[order]
    unexplained = 0
    for i in part.device:
        first = part.first[i]
        source = p.waits_for.get(i)
        if source is not None and source in part.last and \
                end[part.last[source]] <= start[first] + STREAM_SLACK_US:
            part.edges.append((part.last[source], first, EdgeKind.STREAM))
            continue
        # a lane's first record (no edge yet: its step edge comes last) was ready at the start
        if start[first] - ready.get(first, start[0]) < STREAM_HELD_US:
            continue
        lo = np.searchsorted(ends, start[first] - STREAM_SLACK_US, side="left")
        hi = np.searchsorted(ends, start[first], side="right")
        other = next((int(k) for k in lasts[lo:hi][::-1].tolist() if lanes[k] != lanes[first]),
                     None)
        if other is not None:
            part.edges.append((other, first, EdgeKind.STREAM))
        else:
            unexplained += 1
    return unexplained
