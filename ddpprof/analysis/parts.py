"""Each analyzed step of one rank cut into parts that add up to it: the attribution behind
``ddpprof diff``. Pure: no I/O. Definitions in ``docs/diff.md``.

The step windows are those of the rank's breakdown, so that they add up to its analyzed
window (``step_ms`` is that window over the steps):

* **CPU** (gloo): each analyzed ``ProfilerStep`` span;
* **GPU**: from the device's first analyzed event to the first device event launched by the
  second step, and so on; the last step ends at the last analyzed device event. Device time is
  what is shared out; the host shows only where the device is idle.

Every instant of a window goes to one part (``metrics.partition``), the first of these that
runs then (work of the same rank shared equally where several run at once):

1. **compute** (category from ``classify.work_category``): a compute kernel (GPU), or on a CPU
   run the innermost host op of a thread, outside any communication or wait span; work inside
   an ``Optimizer.*`` span is ``optimizer``, inside the data loader's span **data loading**;
2. **communication** of a kind and process group: a collective (its kernel, or gloo's span) no
   compute hides; the part of it spent before the last rank of its group arrived becomes
   **waiting for rank N** (N: that last rank), once the ranks are matched
   (``ddpprof.analysis.profile``);
3. **device** (GPU): memory copies and sets, then synchronisation and other device work;
4. **host: communication calls** (CPU): the thread inside a ``c10d::``/wait span with no
   collective running;
5. **data loading** (GPU): the device idle while the host is in the data loader;
6. **host-bound** (GPU): the device idle while the host runs ops or launches;
7. **idle**: nothing traced runs: the remainder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..metrics import intervals as iv
from ..metrics.comm import CollectiveCalls
from ..metrics.partition import partition
from ..trace import classify
from ..trace.events import RankTrace
from ..trace.work_names import DATALOADER_CATEGORY, OPTIMIZER_CATEGORY

#: Classes of work, in the order they win an instant (``metrics.partition``).
COMPUTE, COMMUNICATION, DEVICE, HOST_COMM, DATA, HOST = range(6)


@dataclass(frozen=True, order=True)
class PartKey:
    """One part of a step: ``group`` (compute, communication, waiting, device, host, data
    loading, idle), ``item`` within it (a compute category, a collective kind, ``rank N``),
    and for communication the process group (``""``: the trace names none)."""

    group: str
    item: str = ""
    process_group: str = ""

    @property
    def label(self) -> str:
        if self.group == "communication":
            group = f" [{self.process_group}]" if self.process_group else ""
            return f"{self.item}{group}"
        if self.group == "waiting":
            return f"waiting for {self.item}"
        return f"{self.group}: {self.item}" if self.item else self.group


IDLE = PartKey("idle", "nothing traced")
COMMUNICATION_CALLS = PartKey("host", "communication calls")


@dataclass(frozen=True)
class ItemTime:
    """One kernel or op name (with its shape, where the trace gives one) inside one part."""

    part: int
    name: str
    shape: str            # "" when unknown; "2MKN=…" from a matrix product's input shapes
    us: float             # over the analyzed steps
    calls: int


@dataclass(frozen=True)
class RankParts:
    """One rank's steps cut into parts; ``part_us[p, s]`` sums over ``p`` to the window of
    step ``s``. Collectives (in ``RankResult.calls`` order) keep their part and what of them
    is exposed, so that their waiting can be split off once the ranks are matched."""

    step_names: list[str]
    window_start_us: np.ndarray
    window_end_us: np.ndarray
    parts: list[PartKey]
    part_us: np.ndarray                   # (parts, steps)
    items: list[ItemTime]
    call_part: np.ndarray                 # (calls,): the part of each collective
    comm_density: tuple[np.ndarray, np.ndarray, np.ndarray]   # see metrics.partition

    @property
    def step_us(self) -> np.ndarray:
        result: np.ndarray = self.window_end_us - self.window_start_us
        return result


class _Parts:
    """The table of parts as they are met."""

    def __init__(self) -> None:
        self.index: dict[PartKey, int] = {IDLE: 0}

    def of(self, key: PartKey) -> int:
        return self.index.setdefault(key, len(self.index))

    @property
    def keys(self) -> list[PartKey]:
        return list(self.index)


def _category_parts(trace: RankTrace, events: np.ndarray, parts: _Parts,
                    in_optimizer: np.ndarray, in_loader: np.ndarray | None = None
                    ) -> np.ndarray:
    """The compute part of each event: data loading, the optimizer, else its name's
    category (``classify.work_category``)."""
    names, inverse = np.unique(trace.name_id[events], return_inverse=True)
    by_name = np.array([parts.of(PartKey("compute", classify.work_category(trace.names[n])))
                        for n in names.tolist()], dtype=np.int64)
    part = by_name[inverse] if events.size else np.empty(0, dtype=np.int64)
    if in_optimizer.any():
        part = np.where(in_optimizer, parts.of(PartKey("compute",
                                                       OPTIMIZER_CATEGORY)), part)
    if in_loader is not None and in_loader.any():
        part = np.where(in_loader, parts.of(PartKey(DATALOADER_CATEGORY)), part)
    return part


def _call_parts(calls: CollectiveCalls, parts: _Parts) -> np.ndarray:
    return np.array([parts.of(PartKey("communication", kind, group))
                     for kind, group in zip(calls.kind, calls.group_labels(), strict=True)],
                    dtype=np.int64)


@dataclass(frozen=True)
class _Pieces:
    """Intervals of one class: each one's part, and its event and name where it has one
    (-1: none), and its shape (an index into the shape table)."""

    start: np.ndarray
    end: np.ndarray
    klass: int
    part: np.ndarray
    event: np.ndarray | None = None
    shape: np.ndarray | None = None


def _share(trace: RankTrace, windows: tuple[np.ndarray, np.ndarray], pieces: list[_Pieces],
           parts: _Parts, call_part: np.ndarray, step_names: list[str],
           shape_table: Sequence[str] = ("",)) -> RankParts:
    """Partition the windows among the pieces, and add the shares up by part and step and by
    named item (part, name, shape)."""
    def column(get: Callable[[_Pieces], np.ndarray | None], fill: int) -> np.ndarray:
        return np.concatenate([get(p) if get(p) is not None else np.full(p.start.size, fill)
                               for p in pieces]).astype(np.int64)

    start = np.concatenate([p.start for p in pieces])
    end = np.concatenate([p.end for p in pieces])
    klass = column(lambda p: np.full(p.start.size, p.klass), 0)
    part, event = column(lambda p: p.part, 0), column(lambda p: p.event, -1)
    shape = column(lambda p: p.shape, 0)
    shares = partition(windows[0], windows[1], start, end, klass, densities=(COMMUNICATION,))
    keys = parts.keys
    part_us = shares.by_window(part, len(keys), windows[0].size)
    part_us[0] += shares.idle
    named = event[shares.piece] >= 0
    piece = shares.piece[named]
    items: list[ItemTime] = []
    if piece.size:
        name = trace.name_id[event[piece]].astype(np.int64)
        n_names, n_shapes = len(trace.names), len(shape_table)
        key = (part[piece] * n_names + name) * n_shapes + shape[piece]
        unique, inverse = np.unique(key, return_inverse=True)
        us = np.bincount(inverse, weights=shares.share[named])
        span = int(event.max()) + 1
        distinct = np.unique(inverse.astype(np.int64) * span + event[piece]) // span
        calls = np.bincount(distinct, minlength=unique.size)
        for k, total, count in zip(unique.tolist(), us.tolist(), calls.tolist(), strict=True):
            rest, shape_id = divmod(k, n_shapes)
            item_part, name_id = divmod(rest, n_names)
            items.append(ItemTime(item_part, trace.names[name_id], shape_table[shape_id],
                                  total, count))
    empty = (np.empty(0), np.empty(0), np.empty(0))
    return RankParts(step_names, windows[0], windows[1], keys, part_us, items, call_part,
                     shares.density.get(COMMUNICATION, empty))


def device_step_bounds(start: np.ndarray, device: np.ndarray, launch_position: np.ndarray,
                       n_steps: int, lo: float, hi: float) -> np.ndarray:
    """Where each analyzed step begins and ends on the device (``n_steps + 1`` times): step k
    begins where the first device record it launched started (``device``: the analyzed
    device records; ``launch_position``: each event's step), the first at ``lo``, the last
    ends at ``hi``; a step that launched nothing is empty. The steps tile ``[lo, hi]``."""
    mine = device & (launch_position >= 1)
    first = np.full(n_steps, np.inf)         # each step's first device event
    np.minimum.at(first, launch_position[mine], start[mine])
    first[0] = lo
    first = np.where(np.isinf(first), -np.inf, first)   # a step without device work: empty
    return np.clip(np.maximum.accumulate(np.append(first, hi)), lo, hi)


def device_parts(trace: RankTrace, stream: np.ndarray, start: np.ndarray, end: np.ndarray,
                 selected: np.ndarray, kinds: np.ndarray, launch_us: np.ndarray,
                 launch_position: np.ndarray, analyzed: np.ndarray,
                 calls: CollectiveCalls) -> RankParts:
    """A GPU rank (see the module's docstring). ``selected``: the analyzed events;
    ``launch_us``: when each was issued (``trace.events.launch_times``), ``launch_position``:
    the position in ``analyzed`` (the analyzed ProfilerStep events; none: the window is one
    step) of the step that issued it (-1: none); ``calls``: its collectives (kernels, and host
    collectives that carry device data)."""
    Kind = classify.Kind
    n_steps = max(int(analyzed.size), 1)
    step_names = [trace.names[trace.name_id[i]] for i in analyzed] or ["whole trace"]
    lo = min(float(start[selected].min()), float(calls.start_us.min()) if calls.n else np.inf)
    hi = max(float(end[selected].max()), float(calls.end_us.max()) if calls.n else -np.inf)
    bounds = device_step_bounds(start, selected & (stream >= 0), launch_position, n_steps,
                                lo, hi)
    windows = (bounds[:-1], bounds[1:])
    parts = _Parts()
    compute = np.flatnonzero(selected & (kinds == Kind.COMPUTE))
    optimizer = iv.union(*_host_spans(trace, stream, classify.is_optimizer_span))
    in_optimizer = iv.contains(optimizer, launch_us[compute])
    compute_part = _category_parts(trace, compute, parts, in_optimizer)
    other = np.flatnonzero(selected & ((kinds == Kind.MEMORY) | (kinds == Kind.OTHER)))
    other_part = np.where(kinds[other] == Kind.MEMORY, parts.of(PartKey("device", "memory")),
                          parts.of(PartKey("device", "sync and other")))
    call_part = _call_parts(calls, parts)
    host_spans = (stream < 0) & classify.per_category(
        trace, lambda c: c in classify.HOST_ISSUE_CATEGORIES) & ~classify.is_step_span(trace)
    loading = host_spans & classify.per_name(trace, classify.is_dataloader_span)
    data = iv.union(trace.start_us[loading], trace.end_us[loading])
    host = iv.union(trace.start_us[host_spans & ~loading], trace.end_us[host_spans & ~loading])
    pieces = [
        _Pieces(start[compute], end[compute], COMPUTE, compute_part, compute),
        _Pieces(calls.start_us, calls.end_us, COMMUNICATION, call_part),
        _Pieces(start[other], end[other], DEVICE, other_part, other),
        _Pieces(data[0], data[1], DATA,
                np.full(data[0].size, parts.of(PartKey(DATALOADER_CATEGORY)))),
        _Pieces(host[0], host[1], HOST, np.full(host[0].size, parts.of(PartKey("host-bound"))))]
    return _share(trace, windows, pieces, parts, call_part, step_names)


def _host_spans(trace: RankTrace, stream: np.ndarray, predicate: Callable[[str], bool]
                ) -> tuple[np.ndarray, np.ndarray]:
    mine = (stream < 0) & classify.per_name(trace, predicate)
    return trace.start_us[mine], trace.end_us[mine]


#: Bits of a host span's flags (``innermost_pieces``): inside a communication or wait span,
#: inside the optimizer's step, inside the data loader.
WAIT_FLAG, OPTIMIZER_FLAG, LOADER_FLAG = 1, 2, 4


def innermost_pieces(start: np.ndarray, end: np.ndarray, thread: np.ndarray,
                     flags: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                 np.ndarray]:
    """Per thread, the time of each span where it is the innermost one running (its *self*
    time), as pieces ``(start, end, span, flags)``; a span's flags are or-ed with its
    ancestors' (a bit mask: inside a wait, ...). A span that outlives its parent is cut at
    the parent's end, so that pieces of one thread never overlap."""
    lo: list[float] = []
    hi: list[float] = []
    owner: list[int] = []
    owned_flags: list[int] = []

    def emit(a: float, b: float, span: int, f: int) -> None:
        if b > a:
            lo.append(a)
            hi.append(b)
            owner.append(span)
            owned_flags.append(f)

    order = np.lexsort((-end, start, thread))
    s_all, e_all, t_all, f_all = (start[order].tolist(), end[order].tolist(),
                                  thread[order].tolist(), flags[order].tolist())
    stack: list[tuple[float, int, int]] = []     # (end, span, flags)
    cursor, current = -np.inf, None
    for s, e, t, f, span in zip(s_all, e_all, t_all, f_all, order.tolist(), strict=True):
        if t != current:
            while stack:
                top_end, top, top_flags = stack.pop()
                emit(cursor, top_end, top, top_flags)
                cursor = max(cursor, top_end)
            current, cursor = t, -np.inf
        while stack and stack[-1][0] <= s:
            top_end, top, top_flags = stack.pop()
            emit(cursor, top_end, top, top_flags)
            cursor = max(cursor, top_end)
        if stack:
            emit(cursor, s, stack[-1][1], stack[-1][2])
            e = min(e, stack[-1][0])
            f |= stack[-1][2]
        cursor = max(cursor, s)
        stack.append((e, span, f))
    while stack:
        top_end, top, top_flags = stack.pop()
        emit(cursor, top_end, top, top_flags)
        cursor = max(cursor, top_end)
    return (np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64),
            np.array(owner, dtype=np.int64), np.array(owned_flags, dtype=np.int64))


def host_parts(trace: RankTrace, lanes: classify.HostLanes, window: iv.Intervals,
               analyzed: np.ndarray, calls: CollectiveCalls) -> RankParts:
    """A CPU rank (see the module's docstring): ``lanes`` as the breakdown reads them,
    ``window`` the analyzed window, ``analyzed`` the analyzed ProfilerStep events (none: the
    window is one step), ``calls`` the collectives in the window."""
    if analyzed.size:
        order = analyzed[np.argsort(trace.start_us[analyzed], kind="stable")]
        ends = np.maximum.accumulate(trace.end_us[order])
        # steps that overlap (a malformed trace) are cut where the one before ended
        starts = np.minimum(np.maximum(trace.start_us[order], np.append(-np.inf, ends[:-1])),
                            ends)
        windows = (starts, ends)
        step_names = [trace.names[trace.name_id[i]] for i in order]
    else:
        windows = (window[0][:1], window[1][-1:])
        step_names = ["whole trace"]
    # The backends' collective spans are among the waits: the ops a backend runs inside one
    # on its own thread (gloo's copies) are communication, as the breakdown counts them
    spans = np.flatnonzero(lanes.work | lanes.waits)
    flags = (lanes.waits[spans] * WAIT_FLAG
             | classify.per_name(trace, classify.is_optimizer_span)[spans] * OPTIMIZER_FLAG
             | classify.per_name(trace, classify.is_dataloader_span)[spans] * LOADER_FLAG)
    lo, hi, local, leaf_flags = innermost_pieces(trace.start_us[spans], trace.end_us[spans],
                                                 trace.thread_id[spans], flags)
    event = spans[local]
    parts = _Parts()
    waiting = (leaf_flags & WAIT_FLAG) > 0
    work = event[~waiting]
    work_part = _category_parts(trace, work, parts, (leaf_flags[~waiting] & OPTIMIZER_FLAG) > 0,
                                (leaf_flags[~waiting] & LOADER_FLAG) > 0)
    call_part = _call_parts(calls, parts)
    shape_table = ["", *sorted({_shape(trace, int(i)) for i in trace.matmul_flops})]
    shape_id = {shape: k for k, shape in enumerate(shape_table)}
    work_shape = np.array([shape_id[_shape(trace, i)] for i in work.tolist()], dtype=np.int64)
    pieces = [
        _Pieces(lo[~waiting], hi[~waiting], COMPUTE, work_part, work, work_shape),
        _Pieces(calls.start_us, calls.end_us, COMMUNICATION, call_part),
        _Pieces(lo[waiting], hi[waiting], HOST_COMM, np.full(int(waiting.sum()), parts.of(
            COMMUNICATION_CALLS)))]
    return _share(trace, windows, pieces, parts, call_part, step_names, shape_table)


def _shape(trace: RankTrace, event: int) -> str:
    """What tells two calls of one op apart: a matrix product's FLOPs (2·M·K·N), the one
    measure of its input shapes that the loader keeps."""
    flops = trace.matmul_flops.get(event)
    return "" if flops is None else f"2MKN={flops:.0f}"
