"""Where a rank's time goes: compute, non-compute, idle, and how much communication overlaps.

Two definitions of the same quantities: one over device events (HTA 0.5.0's, so the numbers
match HTA's ``get_temporal_breakdown`` and ``get_comm_comp_overlap``), one over host lanes for
CPU-only (gloo) traces, where HTA has no answer. Pure functions of interval arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import intervals as iv
from .intervals import EMPTY, Intervals


@dataclass(frozen=True)
class Breakdown:
    window_us: float
    compute_us: float
    non_compute_us: float
    idle_us: float
    comm_us: float          # |comm lane|
    overlap_us: float       # |compute ∩ comm|
    exposed_comm_us: float  # |comm \ compute|

    def pct(self, part_us: float) -> float:
        return 100.0 * (part_us / self.window_us) if self.window_us > 0 else float("nan")

    @property
    def compute_pct(self) -> float:
        return self.pct(self.compute_us)

    @property
    def non_compute_pct(self) -> float:
        return self.pct(self.non_compute_us)

    @property
    def idle_pct(self) -> float:
        return self.pct(self.idle_us)

    @property
    def overlap_pct(self) -> float | None:
        """|compute ∩ comm| / |comm| × 100; None (reported as n/a) without communication."""
        return 100.0 * (self.overlap_us / self.comm_us) if self.comm_us > 0 else None

    @property
    def exposed_comm_pct(self) -> float:
        """Exposed communication as a share of the window."""
        return self.pct(self.exposed_comm_us)


EMPTY_BREAKDOWN = Breakdown(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def device_breakdown(start_us: np.ndarray, end_us: np.ndarray, is_compute: np.ndarray,
                     is_comm: np.ndarray, host_comm: Intervals = EMPTY,
                     window: tuple[float, float] | None = None) -> Breakdown:
    """HTA 0.5.0's GPU definitions over the analyzed device events (kernels, memcpy, memset,
    GPU syncs), plus ``host_comm``: collectives that run on the host with no device kernel
    (gloo with CUDA tensors), which HTA cannot see:

    * window = last end − first start, over the events and ``host_comm``
    * busy = ⋃ events ∪ host_comm;  idle = window − |busy|
    * compute = |⋃ compute kernels|;  non_compute = |busy| − compute
    * comm = ⋃ communication kernels ∪ host_comm
    * overlap = |compute ∩ comm| / |comm|;  exposed comm = |comm \\ compute|

    ``window``, if given, is the window's (start, end) instead, the events clipped to it by
    the caller (a step's share of a device timeline that steps tile).
    """
    sets = device_sets(start_us, end_us, is_compute, is_comm, host_comm)
    if sets is None:
        return EMPTY_BREAKDOWN if window is None else NO_DEVICE_SETS.breakdown(window)
    return sets.breakdown(window)


@dataclass(frozen=True)
class DeviceSets:
    """The interval sets :func:`device_breakdown` measures, kept for a caller that needs them
    again (the idle time the host signals look at, the compute beside each collective): the
    first start and last end of the events and ``host_comm``, ``busy`` (their union),
    ``compute`` and ``comm`` (communication kernels and ``host_comm``)."""

    first_us: float
    last_us: float
    busy: Intervals
    compute: Intervals
    comm: Intervals

    def breakdown(self, window: tuple[float, float] | None = None) -> Breakdown:
        """:func:`device_breakdown`'s figures of these sets (over ``window`` if given)."""
        window_us = float(window[1] - window[0]) if window is not None else (
            self.last_us - self.first_us)
        compute_us, busy_us = iv.length(self.compute), iv.length(self.busy)
        return Breakdown(
            window_us=window_us, compute_us=compute_us, non_compute_us=busy_us - compute_us,
            idle_us=window_us - busy_us, comm_us=iv.length(self.comm),
            overlap_us=iv.length(iv.intersect(self.compute, self.comm)),
            exposed_comm_us=iv.length(iv.subtract(self.comm, self.compute)))


NO_DEVICE_SETS = DeviceSets(math.nan, math.nan, EMPTY, EMPTY, EMPTY)


def device_sets(start_us: np.ndarray, end_us: np.ndarray, is_compute: np.ndarray,
                is_comm: np.ndarray, host_comm: Intervals = EMPTY) -> DeviceSets | None:
    """:func:`device_breakdown`'s interval sets of these events; None without any event."""
    starts = np.concatenate([start_us, host_comm[0]])
    ends = np.concatenate([end_us, host_comm[1]])
    if starts.size == 0:
        return None
    return DeviceSets(
        first_us=float(starts.min()), last_us=float(ends.max()), busy=iv.union(starts, ends),
        compute=iv.union(start_us[is_compute], end_us[is_compute]),
        comm=iv.merge(iv.union(start_us[is_comm], end_us[is_comm]), host_comm))


def hta_merge(start_us: np.ndarray, end_us: np.ndarray,
              sort_key: np.ndarray | None = None) -> Intervals:
    """HTA 0.5.0's ``merge_kernel_intervals``, exactly: sort by start; an event opens a new
    group when it starts after every earlier event's end; a group spans its earliest start to
    its latest end. Unlike :func:`intervals.union` it keeps groups whose end precedes their
    start: HTA's inward rounding gives sub-µs events a negative duration, and HTA sums them.
    Which group such an event joins depends on how ties in start are ordered, so the events
    must come in HTA's row order, and are sorted as pandas sorts them: numpy's quicksort of
    ``sort_key``, the starts in the integer type HTA's column has (see ``hta_sort_dtype``)."""
    if start_us.size == 0:
        return EMPTY
    order = np.argsort(start_us if sort_key is None else sort_key, kind="quicksort")
    starts, ends = start_us[order], end_us[order]
    opens = np.empty(starts.size, dtype=bool)
    opens[0] = True
    opens[1:] = starts[1:] > np.maximum.accumulate(ends)[:-1]
    first = np.flatnonzero(opens)
    return np.minimum.reduceat(starts, first), np.maximum.reduceat(ends, first)


def _hta_overlap_us(compute: Intervals, comm: Intervals) -> float:
    """HTA's ``get_comm_comp_overlap`` numerator: +1/−1 at each communication group's start and
    end, +2/−2 at each compute group's, sorted by time; time spent at a running sum of 3."""
    times = np.concatenate([comm[0], comm[1], compute[0], compute[1]])
    steps = np.concatenate([np.ones(comm[0].size), -np.ones(comm[1].size),
                            2 * np.ones(compute[0].size), -2 * np.ones(compute[1].size)])
    order = np.argsort(times, kind="quicksort")   # as pandas' sort_values
    times, running = times[order], np.cumsum(steps[order])
    both = np.flatnonzero(running[:-1] == 3)
    return float(np.sum(times[both + 1] - times[both]))


def hta_sort_dtype(ts_low: float, ts_high: float, ts_missing: bool) -> np.dtype:
    """The type of HTA 0.5.0's ``ts`` column after its rounding: float64 when some event has
    no ``ts``, else the smallest integer type holding every event's rounded ``ts`` (its
    ``pd.to_numeric(downcast="integer")``). numpy sorts each type with a different algorithm,
    and so breaks ties differently."""
    if ts_missing:
        return np.dtype(np.float64)
    low, high = math.ceil(ts_low), math.ceil(ts_high)
    for candidate in (np.int8, np.int16, np.int32):
        info = np.iinfo(candidate)
        if info.min <= low and high <= info.max:
            return np.dtype(candidate)
    return np.dtype(np.int64)


def hta_device_breakdown(start_us: np.ndarray, end_us: np.ndarray, is_compute: np.ndarray,
                         is_comm: np.ndarray, sort_dtype: np.dtype | None = None) -> Breakdown:
    """HTA 0.5.0's arithmetic, for ``--hta-compat``: every sum over :func:`hta_merge` groups
    (negative ones included), window = the last group's end − the first group's start, overlap
    by HTA's running-status sweep. ``sort_dtype``: see :func:`hta_sort_dtype`."""
    if start_us.size == 0:
        return EMPTY_BREAKDOWN
    key = start_us.astype(sort_dtype) if sort_dtype is not None else start_us
    busy = hta_merge(start_us, end_us, key)
    compute = hta_merge(start_us[is_compute], end_us[is_compute], key[is_compute])
    comm = hta_merge(start_us[is_comm], end_us[is_comm], key[is_comm])
    window = float(busy[1][-1] - busy[0][0])
    busy_us = float(np.sum(busy[1] - busy[0]))
    compute_us = float(np.sum(compute[1] - compute[0]))
    comm_us = float(np.sum(comm[1] - comm[0]))
    return Breakdown(
        window_us=window, compute_us=compute_us, non_compute_us=busy_us - compute_us,
        idle_us=window - busy_us, comm_us=comm_us,
        overlap_us=_hta_overlap_us(compute, comm),
        exposed_comm_us=iv.length(iv.subtract(iv.union(*comm), iv.union(*compute))))


def host_breakdown(window: Intervals, compute: Intervals, comm: Intervals,
                   waits: Intervals) -> Breakdown:
    """The CPU (gloo) definitions, every lane clipped to the window first:

    * window W_s = ⋃ analyzed ProfilerStep spans (or the whole trace's span without steps)
    * C = ⋃ over threads of that thread's ops and annotations minus its own communication and
      wait spans W (a thread blocked in a collective computes nothing meanwhile)
    * K = the backends' collective spans (gloo:*, nccl:*, ...), on whatever thread
    * compute = |C|;  non_compute = |(K ∪ W) \\ C|;  idle = |W_s| − compute − non_compute
    * overlap = |C ∩ K| / |K|;  exposed comm = |K \\ C|
    """
    compute = iv.intersect(compute, window)
    comm = iv.intersect(comm, window)
    waits = iv.intersect(waits, window)
    window_us = iv.length(window)
    compute_us = iv.length(compute)
    non_compute_us = iv.length(iv.subtract(iv.merge(comm, waits), compute))
    return Breakdown(
        window_us=window_us, compute_us=compute_us, non_compute_us=non_compute_us,
        idle_us=window_us - compute_us - non_compute_us, comm_us=iv.length(comm),
        overlap_us=iv.length(iv.intersect(compute, comm)),
        exposed_comm_us=iv.length(iv.subtract(comm, compute)))


def overlap_pct(compute: Intervals, comm: Intervals) -> float | None:
    """|compute ∩ comm| / |comm| × 100, None without communication: one collective kind's
    share of time hidden behind compute."""
    comm_us = iv.length(comm)
    return 100.0 * (iv.length(iv.intersect(compute, comm)) / comm_us) if comm_us > 0 else None
