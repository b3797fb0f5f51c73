"""Sets of time intervals as a pair of sorted, disjoint arrays ``(starts, ends)``.

Every operation returns that canonical form: intervals that overlap or touch are merged, and
empty intervals are dropped, so ``length`` is the measure of the set.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

EMPTY: Intervals = (np.empty(0), np.empty(0))


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge arbitrary intervals ``[starts[i], ends[i])`` into a disjoint sorted set."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return EMPTY
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    # a new interval begins where a start lies beyond everything before it reaches
    begins = np.empty(starts.size, dtype=bool)
    begins[0] = True
    begins[1:] = starts[1:] > reach[:-1]
    group_ends = np.append(np.flatnonzero(begins)[1:] - 1, starts.size - 1)
    return starts[begins], reach[group_ends]


def length(intervals: Intervals) -> float:
    starts, ends = intervals
    return float(np.sum(ends - starts))


def covered(intervals: Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each window ``[starts[i], ends[i])``, the length of ``intervals`` inside it (0 for
    an empty window): the same as ``length(intersect(intervals, window))``, for every window
    in one pass, from the covered length up to each window's edges."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    lows, highs = intervals
    if lows.size == 0:
        return np.zeros(starts.size)
    before = np.concatenate([[0.0], np.cumsum(highs - lows)])   # of the first k intervals

    def up_to(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(lows, t, side="right")               # intervals starting by t
        last = np.maximum(k - 1, 0)
        return np.where(k > 0, before[last] + np.minimum(t, highs[last]) - lows[last], 0.0)

    return np.where(ends > starts, np.maximum(up_to(ends) - up_to(starts), 0.0), 0.0)


def _pieces(a: Intervals, b: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cut the line at every boundary of ``a`` and ``b``: the pieces, and whether each lies in
    ``a`` and in ``b``. (Pieces between tied boundaries have zero length and vanish later.)"""
    points = np.concatenate([a[0], a[1], b[0], b[1]])
    na, nb = a[0].size, b[0].size
    delta_a = np.concatenate([np.ones(na), -np.ones(na), np.zeros(2 * nb)])
    delta_b = np.concatenate([np.zeros(2 * na), np.ones(nb), -np.ones(nb)])
    order = np.argsort(points, kind="stable")
    points = points[order]
    in_a = np.cumsum(delta_a[order])[:-1] > 0
    in_b = np.cumsum(delta_b[order])[:-1] > 0
    return points[:-1], points[1:], in_a, in_b


def intersect(a: Intervals, b: Intervals) -> Intervals:
    if a[0].size == 0 or b[0].size == 0:
        return EMPTY
    lo, hi, in_a, in_b = _pieces(a, b)
    return union(lo[in_a & in_b], hi[in_a & in_b])


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Points of ``a`` not in ``b``."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    lo, hi, in_a, in_b = _pieces(a, b)
    return union(lo[in_a & ~in_b], hi[in_a & ~in_b])


def merge(a: Intervals, b: Intervals) -> Intervals:
    return union(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))


def window(a: Intervals, start: float, end: float) -> Intervals:
    """The part of ``a`` inside ``[start, end)``: the same as ``intersect(a, ([start],
    [end]))``, found by bisection in time proportional to the part, not to ``a`` (a step of a
    long trace)."""
    starts, ends = a
    first = np.searchsorted(ends, start, side="right")     # the first to end after start
    last = np.searchsorted(starts, end, side="left")       # past the last to start before end
    if last <= first:
        return EMPTY
    lows, highs = np.maximum(starts[first:last], start), np.minimum(ends[first:last], end)
    keep = highs > lows
    return lows[keep], highs[keep]


def contains(intervals: Intervals, points: np.ndarray) -> np.ndarray:
    """For each point, whether it lies in ``intervals`` (a canonical set)."""
    lows, highs = intervals
    points = np.asarray(points, dtype=np.float64)
    k = np.searchsorted(lows, points, side="right") - 1
    return (k >= 0) & (points < highs[np.maximum(k, 0)]) if lows.size else np.zeros(
        points.size, dtype=bool)
