"""An exact partition of step windows among overlapping pieces of work. Pure numpy.

Every instant of every window belongs to exactly one class, or to none (idle):

* the pieces (intervals ``[start, end)``) have a class, and **a lower class number wins**: at
  an instant where pieces of several classes run, the instant belongs to the lowest class
  among them (the caller orders its classes by priority: compute before communication, ...);
* inside the winning class, **the instant is shared equally** by the pieces of that class that
  run then (two kernels on two streams each get half of the time they overlap);
* an instant no piece covers is idle.

So, per window, the shares of all pieces plus the idle time equal the window's length: the
parts that the caller makes by adding up shares sum to the step by construction, and the
difference of two runs' steps is the sum of the differences of their parts.

A piece that crosses a window boundary is cut there; a piece outside every window gets
nothing. Windows must be sorted and disjoint (they may touch).

How much of one piece's share falls inside a sub-interval of it (the part of a collective
spent waiting for a late peer) is the integral of its class's *density*: ``1 / (pieces of the
class running)`` where the class wins, 0 elsewhere (:func:`density_integral`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shares:
    """The result of :func:`partition`: one entry per (piece, window) it overlaps."""

    piece: np.ndarray        # int64: the piece's index in the input
    window: np.ndarray       # int64: the window's index
    share: np.ndarray        # float64: time credited to that piece in that window
    idle: np.ndarray         # float64, one per window: time no piece covers
    #: For each class asked in ``densities``: segments ``(lo, hi, density)`` where it wins.
    density: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]

    def by_window(self, labels: np.ndarray, n_labels: int, n_windows: int) -> np.ndarray:
        """``(n_labels, n_windows)``: the shares added up by ``labels[piece]``."""
        flat = labels[self.piece] * n_windows + self.window
        # float even without pieces: numpy's bincount of nothing is int64, weights or not
        return np.bincount(flat, weights=self.share, minlength=n_labels * n_windows).astype(
            np.float64, copy=False).reshape(n_labels, n_windows)


def cut(start: np.ndarray, end: np.ndarray, window_start: np.ndarray,
         window_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each piece cut into its parts inside each window: (piece, window, start, end)."""
    first = np.searchsorted(window_end, start, side="right")    # first window ending after it
    last = np.searchsorted(window_start, end, side="left") - 1  # last window starting before
    count = np.maximum(last - first + 1, 0)
    piece = np.repeat(np.arange(start.size), count)
    offset = np.arange(piece.size) - np.repeat(np.cumsum(count) - count, count)
    window = np.repeat(first, count) + offset
    lo = np.maximum(start[piece], window_start[window])
    hi = np.minimum(end[piece], window_end[window])
    keep = hi > lo
    return piece[keep], window[keep], lo[keep], hi[keep]


def partition(window_start: np.ndarray, window_end: np.ndarray, start: np.ndarray,
              end: np.ndarray, klass: np.ndarray, densities: tuple[int, ...] = ()) -> Shares:
    """Share the windows among the pieces (see the module's docstring). ``klass``: each
    piece's class, a small non-negative integer, lower winning; ``densities``: the classes
    whose density to return."""
    window_start = np.asarray(window_start, dtype=np.float64)
    window_end = np.asarray(window_end, dtype=np.float64)
    klass = np.asarray(klass, dtype=np.int64)
    piece, window, lo, hi = cut(np.asarray(start, dtype=np.float64),
                                 np.asarray(end, dtype=np.float64), window_start, window_end)
    piece_class = klass[piece]
    points = np.unique(np.concatenate([lo, hi, window_start, window_end]))
    seg_lo, seg_len = points[:-1], np.diff(points)
    classes = np.unique(piece_class)
    top = np.full(seg_lo.size, -1, dtype=np.int64)
    count = np.zeros(seg_lo.size, dtype=np.int64)
    for c in classes[::-1]:       # the lowest class last: it wins
        mine = piece_class == c
        running = (np.searchsorted(np.sort(lo[mine]), seg_lo, side="right")
                   - np.searchsorted(np.sort(hi[mine]), seg_lo, side="right"))
        wins = running > 0
        top[wins], count[wins] = c, running[wins]
    rate = np.where(top >= 0, seg_len / np.maximum(count, 1), 0.0)
    share = np.zeros(piece.size)
    at_lo, at_hi = np.searchsorted(points, lo), np.searchsorted(points, hi)
    density: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for c in classes:
        cumulative = np.concatenate([[0.0], np.cumsum(np.where(top == c, rate, 0.0))])
        mine = piece_class == c
        share[mine] = cumulative[at_hi[mine]] - cumulative[at_lo[mine]]
    for c in densities:
        wins = top == c
        density[c] = (seg_lo[wins], points[1:][wins], 1.0 / count[wins])
    # idle: segments inside a window that no piece covers
    owner = np.searchsorted(window_start, seg_lo, side="right") - 1
    inside = (owner >= 0) & (seg_lo < window_end[np.maximum(owner, 0)])
    empty = inside & (top < 0)
    idle = np.bincount(owner[empty], weights=seg_len[empty],
                       minlength=window_start.size).astype(np.float64, copy=False)
    return Shares(piece, window, share, idle, density)


def density_integral(density: tuple[np.ndarray, np.ndarray, np.ndarray], a: np.ndarray,
                     b: np.ndarray) -> np.ndarray:
    """For each ``[a[i], b[i])``, the integral of a class's density over it (0 when empty):
    the share one running piece of that class gets in that stretch of time."""
    lo, hi, weight = density
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if lo.size == 0:
        return np.zeros(a.size)
    before = np.concatenate([[0.0], np.cumsum((hi - lo) * weight)])

    def up_to(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(lo, t, side="right")
        last = np.maximum(k - 1, 0)
        inside = np.clip(np.minimum(t, hi[last]) - lo[last], 0.0, None) * weight[last]
        return np.where(k > 0, before[last] + inside, 0.0)

    return np.where(b > a, np.maximum(up_to(b) - up_to(a), 0.0), 0.0)
