"""Where a rank's time goes: compute, non-compute, idle, and how much communication overlaps.

Two definitions of the same quantities: one over GPU kernels (HTA 0.5.0's, so the numbers
match HTA's ``get_temporal_breakdown`` and ``get_comm_comp_overlap``), one over host lanes for
CPU-only (gloo) traces, where HTA has no answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import intervals as iv
from .intervals import Intervals


@dataclass(frozen=True)
class Breakdown:
    window_us: float
    compute_us: float
    non_compute_us: float
    idle_us: float
    comm_us: float         # |comm lane|
    overlap_us: float      # |compute ∩ comm|
    exposed_comm_us: float  # |comm \ compute|

    def pct(self, part_us: float) -> float:
        return 100.0 * part_us / self.window_us if self.window_us > 0 else float("nan")

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
        return 100.0 * self.overlap_us / self.comm_us if self.comm_us > 0 else None

    @property
    def comm_overhead_pct(self) -> float:
        """Exposed communication as a share of the window."""
        return self.pct(self.exposed_comm_us)


def device_breakdown(start_us: np.ndarray, end_us: np.ndarray, is_compute: np.ndarray,
                     is_comm: np.ndarray) -> Breakdown:
    """HTA 0.5.0's GPU definitions over the analyzed kernels (memcpy/memset included):

    * window = last kernel end − first kernel start
    * idle = window − |⋃ all|;  compute = |⋃ compute|;  non_compute = |⋃ all| − compute
    * overlap = |⋃ compute ∩ ⋃ comm| / |⋃ comm|;  exposed comm = |⋃ comm \\ ⋃ compute|
    """
    busy = iv.union(start_us, end_us)
    if busy[0].size == 0:
        return Breakdown(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    window = float(busy[1][-1] - busy[0][0])
    compute = iv.union(start_us[is_compute], end_us[is_compute])
    comm = iv.union(start_us[is_comm], end_us[is_comm])
    compute_us = iv.length(compute)
    busy_us = iv.length(busy)
    return Breakdown(
        window_us=window, compute_us=compute_us, non_compute_us=busy_us - compute_us,
        idle_us=window - busy_us, comm_us=iv.length(comm),
        overlap_us=iv.length(iv.intersect(compute, comm)),
        exposed_comm_us=iv.length(iv.subtract(comm, compute)))


def host_breakdown(window: Intervals, compute: Intervals, comm: Intervals,
                   waits: Intervals) -> Breakdown:
    """The CPU (gloo) definitions, every lane clipped to the window first:

    * window W_s = ⋃ analyzed ProfilerStep spans
    * C = training-thread ops and annotations minus their communication and wait spans W
    * K = the backend's collective spans on its worker threads
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
