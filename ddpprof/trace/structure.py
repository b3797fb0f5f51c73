"""Classification by structure, where names say too little: which kernels are communication
because of where they were launched, and which span on a thread encloses a host op.

The predicates on names are in :mod:`ddpprof.trace.classify`; these rules combine them with
the trace's structure (the host op that launched a kernel, the spans around it on its thread).

A device kernel that the name table (``classify.COMM_KERNEL_PATTERNS``) counts as compute is
**communication by structure** when

* it was launched inside a communication span (``classify.COMM_LAUNCH_SPAN``: a collective's
  ``record_param_comms``, a ``c10d::``/functional collective op, a backend span, a
  ``symm_mem::`` or expert-parallel library op, a ``dispatch``/``combine`` annotation) that
  launched no kernel the name table knows: the span's work is that kernel (a span that did
  launch an NCCL kernel keeps its copies and casts as compute); or
* it runs on a stream every kernel of which was launched inside communication spans.

Spans on one thread that overlap are taken together (a ``record_param_comms`` inside a
``c10d::allreduce_``): the union of the communication spans of a thread, piece by piece.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..metrics import intervals as iv
from . import classify
from .classify import Kind
from .events import RankTrace


@dataclass(frozen=True)
class StructuralComm:
    """The kernels found to be communication by structure."""

    mask: np.ndarray                                  # over the trace's events
    #: The collective each such kernel performs, read from its span's name where the
    #: kernel's own name says nothing (``symm_mem::multimem_all_reduce_`` -> all_reduce).
    collective: dict[int, str] = field(default_factory=dict)
    spans: list[str] = field(default_factory=list)    # the enclosing spans' names, distinct
    streams: list[int] = field(default_factory=list)

    def note(self, trace: RankTrace, start: np.ndarray, end: np.ndarray) -> str | None:
        """The note that says what was found, or None when nothing was."""
        found = np.flatnonzero(self.mask)
        if not found.size:
            return None
        time_ms = float(np.sum(end[found] - start[found])) / 1e3
        names = sorted({trace.names[trace.name_id[i]] for i in found.tolist()})
        listed = ", ".join(f"`{n[:60]}`" for n in names[:3])
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        spans = ", ".join(f"`{s[:50]}`" for s in self.spans[:3])
        streams = ", ".join(map(str, self.streams))
        return (f"{found.size} kernels ({time_ms:.2f} ms) on stream {streams} counted as "
                f"communication by structure: launched inside {spans} spans ({listed}{more}); "
                "--no-structural-comm counts them by name only")


def launching_host_event(trace: RankTrace, stream: np.ndarray) -> np.ndarray:
    """For every event, the index of the host event with its correlation id (the launch of a
    device kernel), else -1."""
    host = np.flatnonzero((stream < 0) & trace.has_correlation)
    launcher = np.full(trace.n_events, -1, dtype=np.int64)
    if not host.size:
        return launcher
    order = host[np.argsort(trace.correlation[host], kind="stable")]
    keys = trace.correlation[order]
    device = np.flatnonzero((stream >= 0) & trace.has_correlation)
    where = np.clip(np.searchsorted(keys, trace.correlation[device]), 0, keys.size - 1)
    matched = keys[where] == trace.correlation[device]
    launcher[device[matched]] = order[where[matched]]
    return launcher


def enclosing(trace: RankTrace, spans: np.ndarray, events: np.ndarray) -> np.ndarray:
    """For each of ``events`` (indices of host events), the piece of the union of ``spans``
    (a mask) on its own thread that holds its start, numbered over the trace; -1 for none."""
    return _pieces_holding(trace, spans, events)[0]


def nested_in(trace: RankTrace, spans: np.ndarray, events: np.ndarray) -> np.ndarray:
    """Which of ``events`` (a mask), not themselves among ``spans`` (a mask), lie wholly
    inside the union of ``spans`` on their own thread: start and end within one of its
    pieces (spans that overlap are taken together)."""
    nested = np.zeros(trace.n_events, dtype=bool)
    candidates = np.flatnonzero(events & ~spans)
    piece, piece_end = _pieces_holding(trace, spans, candidates)
    nested[candidates] = (piece >= 0) & (trace.end_us[candidates] <= piece_end)
    return nested


def _pieces_holding(trace: RankTrace, spans: np.ndarray, events: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``events`` (indices), the piece of the union of ``spans`` on its own
    thread that holds its start (numbered over the trace; -1 for none), and that piece's
    end (NaN for none)."""
    piece = np.full(events.size, -1, dtype=np.int64)
    piece_end = np.full(events.size, np.nan)
    if not events.size or not spans.any():
        return piece, piece_end
    threads = trace.thread_id[events]
    offset = 0
    for thread in np.unique(trace.thread_id[spans]).tolist():
        mine = spans & (trace.thread_id == thread)
        starts, ends = iv.union(trace.start_us[mine], trace.end_us[mine])
        if not starts.size:  # only zero-length spans on this thread: they enclose nothing
            continue
        on_thread = np.flatnonzero(threads == thread)
        t = trace.start_us[events[on_thread]]
        k = np.searchsorted(starts, t, side="right") - 1
        inside = (k >= 0) & (t <= ends[np.clip(k, 0, None)])
        piece[on_thread[inside]] = offset + k[inside]
        piece_end[on_thread[inside]] = ends[k[inside]]
        offset += starts.size
    return piece, piece_end


def structural_comm(trace: RankTrace, stream: np.ndarray, kinds: np.ndarray,
                    selected: np.ndarray, launcher: np.ndarray | None = None
                    ) -> StructuralComm:
    """The selected compute kernels that are communication by structure (module docstring);
    ``launcher``: ``launching_host_event(trace, stream)``, where the caller has it."""
    none = StructuralComm(np.zeros(trace.n_events, dtype=bool))
    kernels = np.flatnonzero(selected & (stream >= 0) & np.isin(
        kinds, (Kind.COMPUTE, Kind.COMMUNICATION)))
    span_mask = classify.per_name(trace, classify.launches_communication) & (stream < 0)
    if not kernels.size or not span_mask.any():
        return none
    launcher = (launching_host_event(trace, stream) if launcher is None else launcher)[kernels]
    launched = launcher >= 0
    kernels, launcher = kernels[launched], launcher[launched]
    piece = enclosing(trace, span_mask, launcher)
    inside = piece >= 0
    known = kinds[kernels] == Kind.COMMUNICATION
    pieces_with_known = np.unique(piece[inside & known])
    found = inside & ~known & ~np.isin(piece, pieces_with_known)
    # a stream whose every kernel was launched inside communication spans
    for s in np.unique(stream[kernels]).tolist():
        on_stream = stream[kernels] == s
        all_selected_on_stream = np.count_nonzero(selected & (stream == s) & np.isin(
            kinds, (Kind.COMPUTE, Kind.COMMUNICATION)))
        if inside[on_stream].all() and on_stream.sum() == all_selected_on_stream:
            found |= on_stream & ~known
    if not found.any():
        return none
    mask = np.zeros(trace.n_events, dtype=bool)
    mask[kernels[found]] = True
    span_names, collective = _span_names(trace, span_mask, launcher[found], kernels[found])
    return StructuralComm(mask, collective, span_names,
                          sorted(set(stream[kernels[found]].tolist())))


def innermost(trace: RankTrace, spans: np.ndarray, events: np.ndarray) -> np.ndarray:
    """For each of ``events`` (host events), the innermost of ``spans`` (a mask) on its thread
    that holds its start: the latest-starting one that has not ended; -1 for none."""
    index = np.flatnonzero(spans)
    index = index[np.lexsort((trace.start_us[index], trace.thread_id[index]))]
    thread, start, end = trace.thread_id[index], trace.start_us[index], trace.end_us[index]
    found = np.full(events.size, -1, dtype=np.int64)
    if not index.size or not events.size:
        return found
    t, mine = trace.start_us[events], trace.thread_id[events]
    lo = np.searchsorted(thread, mine, "left")
    latest = np.empty(events.size, dtype=np.int64)   # the last span starting by the event
    for lane in np.unique(mine).tolist():             # one search per thread
        on = mine == lane
        first, last = np.searchsorted(thread, lane, "left"), np.searchsorted(thread, lane,
                                                                             "right")
        latest[on] = first + np.searchsorted(start[first:last], t[on], side="right") - 1
    # Look outward past siblings that ended before the event: a few steps for all the
    # events at once, then one by one for the few that walk far (a long run of siblings).
    walking = np.flatnonzero(latest >= lo)
    for _ in range(_VECTOR_STEPS):
        walking = walking[end[latest[walking]] < t[walking]]
        if not walking.size:
            break
        latest[walking] -= 1
        walking = walking[latest[walking] >= lo[walking]]
    for k in walking.tolist():
        while latest[k] >= lo[k] and end[latest[k]] < t[k]:
            latest[k] -= 1
    held = latest >= lo
    found[held] = index[latest[held]]
    return found


#: Steps of the outward walk taken for all the events at once (see ``innermost``).
_VECTOR_STEPS = 16


def _span_names(trace: RankTrace, span_mask: np.ndarray, launchers: np.ndarray,
                kernels: np.ndarray) -> tuple[list[str], dict[int, str]]:
    """The names of the innermost communication spans around the launches, and the collective
    a span names for each kernel whose own name says nothing (``symm_mem::multimem_all_reduce_``:
    all_reduce)."""
    names: list[str] = []
    collective: dict[int, str] = {}
    for span, kernel in zip(innermost(trace, span_mask, launchers).tolist(), kernels.tolist(),
                            strict=True):
        if span < 0:
            continue
        name = trace.names[trace.name_id[span]]
        if name not in names:
            names.append(name)
        said = classify.collective_of(name, None)
        if said != "unknown" and classify.collective_of(
                trace.names[trace.name_id[kernel]], None) == "unknown":
            collective[kernel] = said
    return names, collective
