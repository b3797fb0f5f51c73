"""Replaying a step graph under the overlap tax (``ddpprof.metrics.tax``) and with the
collectives of a rank sharing its bandwidth. Pure.

Each node has a *work* (µs): how long it takes alone. It progresses at a rate:

* compute of class k on rank r: ``1/(1 + τ_k)`` while a transfer of rank r runs, else 1;
* a transfer of rank r: ``1/(n (1 + τ_m))`` while some compute of rank r runs, else ``1/n``,
  n the transfers of rank r running then, itself included (they share its bandwidth);
* the transfers of one collective an edit added (``together``: a re-bucketed bucket's, one
  per rank): the slowest one's rate while they run, since a ring moves as fast as its slowest
  member (recorded collectives keep each rank's own rate, so that the replay of an unedited
  graph gives back its recorded times);
* anything else (host work, zero-length marks): 1, whatever runs beside it.

A node starts when the graph's edges let it (``path.replay``: ``max(end(src) + gap)``) and
ends when its progress reaches its work. The replay (:func:`replay`) is an event simulation,
in time order. A node is known to the others from when the last of its dependencies ended:
where a recorded gap is negative (it started before that, as recorded times allow), its
progress before then is counted against what ran then, but it slows nothing before it is
known. :func:`recorded_work` is each node's work in a recorded graph under those same rules
(``work = ∫ rate dt`` over its recorded time, with what was known to run beside it), so that
the replay of an unedited graph gives back its recorded times exactly.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from ..metrics import intervals as iv
from ..metrics.tax import ALL, WORK_CLASSES, OverlapTax
from ..trace import classify
from .model import GraphColumns, NodeKind, StepGraph
from .path import Schedule


@dataclass(frozen=True)
class Tax:
    """The taxes a replay applies, as fractions (0.2: 20% longer when fully overlapped):
    per work class of compute, and for transfers."""

    compute: dict[str, float]
    communication: float = 0.0

    @classmethod
    def none(cls) -> Tax:
        return cls({name: 0.0 for name in WORK_CLASSES}, 0.0)

    @classmethod
    def measured(cls, measured: OverlapTax | None, notes: list[str]) -> Tax:
        """The tax to replay with, from a measured one (``metrics.tax``): each work class's
        compute tax (else the pooled compute tax), the communication tax; one whose 95%
        interval holds 0 (or that has none) is 0, as are unknown or negative ones, and a note
        says so."""
        def pct(side: str, work_class: str = ALL) -> float | None:
            row = measured.row(side, work_class) if measured is not None else None
            if row is None or row.tax_pct is None:
                return None
            if row.low_pct is None or row.low_pct <= 0 <= (row.high_pct or 0):
                return 0.0       # not told apart from no tax
            return row.tax_pct

        compute = {}
        for name in WORK_CLASSES:
            value = pct("compute", name)
            compute[name] = (value if value is not None else pct("compute") or 0.0) / 100
        communication = (pct("communication") or 0.0) / 100
        unknown = [side for side in ("compute", "communication") if pct(side) is None]
        if unknown:
            notes.append(f"overlap tax: no {' or '.join(unknown)} tax could be measured (no "
                         "op or collective seen both alone and overlapped); taken as 0")
        negative = [name for name, value in (*compute.items(), ("communication",
                                                                  communication)) if value < 0]
        if negative:
            notes.append(f"overlap tax: measured below 0 for {', '.join(negative)} (faster "
                         "when overlapped: noise); taken as 0")
        return cls({k: max(v, 0.0) for k, v in compute.items()}, max(communication, 0.0))

    @property
    def any(self) -> bool:
        return self.communication > 0 or any(v > 0 for v in self.compute.values())


@dataclass(frozen=True)
class Roles:
    """What the tax takes of each node: its rank, and its role (-1 untaxed, ``k`` compute of
    ``WORK_CLASSES[k]``, ``TRANSFER``)."""

    rank: np.ndarray
    role: np.ndarray

    @classmethod
    def of(cls, graph: StepGraph) -> Roles:
        position = {name: k for k, name in enumerate(WORK_CLASSES)}
        role = np.array([position[classify.work_class(n.name)] if n.kind == NodeKind.COMPUTE
                         else TRANSFER if n.kind == NodeKind.COMMUNICATION else -1
                         for n in graph.nodes], dtype=np.int64)
        return cls(np.array([n.rank for n in graph.nodes], dtype=np.int64), role)


TRANSFER = len(WORK_CLASSES)


class _Clock:
    """Work done by time t by a node progressing at ``rates[i]`` between ``points[i]`` and
    ``points[i + 1]`` and at 1 outside them: strictly increasing, and its inverse."""

    def __init__(self, points: np.ndarray, rates: np.ndarray) -> None:
        self.points = points
        self.work = points[:0] if not points.size else np.concatenate(
            [[0.0], np.cumsum(np.diff(points) * rates)]) + points[0]

    @staticmethod
    def _map(t: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """Piecewise linear through (xs, ys), continued with slope 1 on both sides."""
        t = np.asarray(t, dtype=np.float64)
        if xs.size == 0:
            return t.copy()
        inside = np.interp(t, xs, ys)
        result: np.ndarray = np.where(t < xs[0], ys[0] + (t - xs[0]),
                        np.where(t > xs[-1], ys[-1] + (t - xs[-1]), inside))
        return result

    def at(self, t: np.ndarray) -> np.ndarray:
        return self._map(t, self.points, self.work)

    def time_of(self, work: np.ndarray) -> np.ndarray:
        return self._map(work, self.work, self.points)


def rate(role: int, other_transfers: int, computing: bool, tax: Tax) -> float:
    """A node's rate (see the module) with ``other_transfers`` transfers of its rank running
    beside it and its rank ``computing`` or not."""
    if role == TRANSFER:
        return 1.0 / ((1 + other_transfers) * (1 + tax.communication * computing))
    if role >= 0:
        return 1.0 / (1 + tax.compute[WORK_CLASSES[role]]) if other_transfers else 1.0
    return 1.0


def _clock(transfers: iv.Intervals | tuple[np.ndarray, np.ndarray], computing: iv.Intervals,
           role: int, tax: Tax, less: int = 0) -> _Clock:
    """The clock of a node of ``role`` beside ``transfers`` (intervals, overlapping where they
    share) and ``computing`` (a union), counting ``less`` fewer transfers (itself)."""
    starts, ends = transfers
    computing_points = np.ravel(np.column_stack(computing))
    points = np.unique(np.concatenate([starts, ends, computing_points]))
    if points.size < 2:
        return _Clock(points[:0], points[:0])
    middle = (points[:-1] + points[1:]) / 2
    running = (np.searchsorted(np.sort(starts), middle, side="right")
               - np.searchsorted(np.sort(ends), middle, side="right"))
    beside = _inside(computing, middle)
    rates = np.array([rate(role, max(int(k) - less, 0), bool(c), tax)
                      for k, c in zip(running, beside, strict=True)])
    return _Clock(points, rates)


def _inside(intervals: iv.Intervals, t: np.ndarray) -> np.ndarray:
    starts, ends = intervals
    k = np.searchsorted(starts, t, side="right") - 1
    return (k >= 0) & (t < ends[np.clip(k, 0, None)]) if starts.size else \
        np.zeros(t.size, dtype=bool)


def known_from(c: GraphColumns, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """When each node became known in a schedule: its start, or when its last dependency was
    done if that was later (a dependency is done at its end, or when it became known if it
    had ended before that)."""
    src = c.src.tolist()
    incoming = c.incoming()
    starts, ends = start.tolist(), end.tolist()
    known = [0.0] * len(starts)
    done = [0.0] * len(starts)
    for node in c.order.tolist():
        edges = incoming[node]
        known[node] = max(starts[node], max(done[src[k]] for k in edges)) if edges else \
            starts[node]
        done[node] = max(ends[node], known[node])
    return np.array(known)


def recorded_work(graph: StepGraph, roles: Roles, tax: Tax,
                  columns: GraphColumns | None = None) -> np.ndarray:
    """Each node's work in the recorded schedule (see the module's docstring)."""
    c = columns or graph.columns()
    start = np.array([n.start_us for n in graph.nodes], dtype=np.float64) - graph.origin_us
    duration = np.array([n.duration_us for n in graph.nodes], dtype=np.float64)
    end = start + duration
    known = np.minimum(known_from(c, start, end), end)
    work = duration.copy()
    for rank in np.unique(roles.rank).tolist():
        mine = roles.rank == rank
        transfer = mine & (roles.role == TRANSFER) & (end > known)
        compute = mine & (roles.role >= 0) & (roles.role < TRANSFER)
        moving = (known[transfer], end[transfer])
        computing = iv.union(known[compute & (end > known)], end[compute & (end > known)])
        for role in range(TRANSFER):
            picked = np.flatnonzero(compute & (roles.role == role))
            if picked.size:
                clock = _clock(moving, computing, role, tax)
                work[picked] = clock.at(end[picked]) - clock.at(start[picked])
        picked = np.flatnonzero(mine & (roles.role == TRANSFER))
        if picked.size:
            # before it was known it shared with all the known ones; after, with the others
            before = _clock(moving, computing, TRANSFER, tax)
            after = _clock(moving, computing, TRANSFER, tax, less=1)
            k, s, e = known[picked], start[picked], end[picked]
            work[picked] = before.at(k) - before.at(s) + after.at(e) - after.at(k)
    return work


def replay(graph: StepGraph, work_us: np.ndarray, roles: Roles, tax: Tax,
           columns: GraphColumns | None = None, release_us: np.ndarray | None = None,
           together: list[list[int]] | None = None) -> Schedule:
    """The schedule of ``graph`` with each node doing ``work_us`` under ``tax`` beside the
    rest (see the module); ``release_us``: other releases (same order), e.g. a rank delayed;
    ``together``: groups of transfers, one collective's on each rank, that progress at the
    slowest one's rate while they run (a ring moves as fast as its slowest member)."""
    c = columns or graph.columns()
    return _Simulation(graph, c, work_us, roles, tax, release_us, together or []).run()


class _Simulation:
    """The event simulation of :func:`replay`, times from the graph's origin."""

    def __init__(self, graph: StepGraph, c: GraphColumns, work_us: np.ndarray, roles: Roles,
                 tax: Tax, release_us: np.ndarray | None, together: list[list[int]]) -> None:
        n = c.start.size
        self.group = {k: group for group in together for k in group}
        self.own_speed: dict[int, float] = {}
        self.origin, self.tax = graph.origin_us, tax
        release = c.release if release_us is None else release_us
        self.release = (release - graph.origin_us).tolist()
        self.work = work_us.tolist()
        self.rank, self.role = roles.rank.tolist(), roles.role.tolist()
        self.gap, self.dst = c.gap.tolist(), c.dst.tolist()
        by_src = np.argsort(c.src, kind="stable")
        ptr = np.searchsorted(c.src[by_src], np.arange(n + 1)).tolist()
        by_src = by_src.tolist()
        self.outgoing = [by_src[ptr[k]:ptr[k + 1]] for k in range(n)]
        self.waiting = np.bincount(c.dst, minlength=n).tolist()
        self.ready = [-math.inf] * n
        self.start = [math.nan] * n
        self.end = [math.nan] * n
        self.now = -math.inf
        self.heap: list[tuple[float, int]] = []
        self.running: dict[int, float] = {}          # node -> work left
        self.speed: dict[int, float] = {}
        self.known: dict[int, float] = {}            # running nodes others know of
        self.by_rank: dict[int, set[int]] = {}       # known running taxed nodes per rank
        self.past: dict[int, list[tuple[float, float, int]]] = {}  # (known, end, role)

    def run(self) -> Schedule:
        for node in range(len(self.work)):
            if self.waiting[node] == 0:
                r = self.release[node]
                heapq.heappush(self.heap, (0.0 if r != r else r, node))
        while self.heap or self.running:
            next_start = self.heap[0][0] if self.heap else math.inf
            finish, who = math.inf, -1
            for node, left in self.running.items():
                t = self.now + left / self.speed[node]
                if t < finish:
                    finish, who = t, node
            if next_start <= finish:
                t, node = heapq.heappop(self.heap)
                self._advance(t)
                self._begin(node, t)
            else:
                self._advance(finish)
                self._finish(who, finish)
        start = np.array(self.start) + self.origin
        end = np.array(self.end) + self.origin
        last = float(end.max()) if end.size else self.origin
        return Schedule(start, end, last - self.origin)

    def _advance(self, t: float) -> None:
        if t > self.now:
            for node in self.running:
                self.running[node] -= self.speed[node] * (t - self.now)
            self.now = t

    def _begin(self, node: int, s: float) -> None:
        """Start ``node`` at ``s`` (at or before now) and whatever that finishes."""
        work = [(node, s)]
        while work:
            node, s = work.pop()
            self.start[node] = s
            done, end = self._progress_before_now(node, s)
            if end is not None:
                work += self._ended(node, end)
                continue
            self.running[node] = self.work[node] - done
            role, rank = self.role[node], self.rank[node]
            self.speed[node] = 1.0
            if role >= 0:
                self.known[node] = self.now
                self.by_rank.setdefault(rank, set()).add(node)
                self._rates(rank)

    def _progress_before_now(self, node: int, s: float) -> tuple[float, float | None]:
        """The work ``node`` did between ``s`` and now, and its end if it ended by then."""
        work, role = self.work[node], self.role[node]
        if work <= 0:
            return 0.0, s
        if s >= self.now:
            return 0.0, None
        if role < 0:
            return (self.now - s, None) if s + work > self.now else (work, s + work)
        clock = self._clock_of_past(node, s)
        done = float(clock.at(np.array([self.now]))[0] - clock.at(np.array([s]))[0])
        if done < work:
            return done, None
        return work, float(clock.time_of(clock.at(np.array([s])) + work)[0])

    def _clock_of_past(self, node: int, s: float) -> _Clock:
        """The node's clock over what its rank was known to run since ``s``."""
        rank = self.rank[node]
        spans = [(a, b, r) for a, b, r in reversed(self.past.get(rank, [])) if b > s]
        spans += [(self.known[m], self.now, self.role[m]) for m in self.by_rank.get(rank, ())]
        transfers = [(a, b) for a, b, r in spans if r == TRANSFER]
        compute = [(a, b) for a, b, r in spans if r != TRANSFER]
        moving = (np.array([a for a, _ in transfers]), np.array([b for _, b in transfers]))
        computing = iv.union(np.array([a for a, _ in compute]), np.array([b for _, b in compute]))
        return _clock(moving, computing, self.role[node], self.tax)

    def _rates(self, rank: int) -> None:
        members = self.by_rank.get(rank, set())
        transfers = sum(1 for m in members if self.role[m] == TRANSFER)
        computing = any(self.role[m] != TRANSFER for m in members)
        for m in members:
            own = 1 if self.role[m] == TRANSFER else 0
            self.speed[m] = self.own_speed[m] = rate(self.role[m], transfers - own, computing,
                                                     self.tax)
        for m in members:
            if m in self.group:
                self._together(m)

    def _together(self, node: int) -> None:
        """The running members of ``node``'s group at the slowest one's own rate."""
        running = [k for k in self.group[node] if k in self.own_speed]   # only running ones
        slowest = min((self.own_speed[k] for k in running), default=0.0)
        for k in running:
            self.speed[k] = slowest

    def _finish(self, node: int, t: float) -> None:
        del self.running[node]
        self.own_speed.pop(node, None)
        if node in self.group:
            self._together(node)
        if node in self.known:
            rank = self.rank[node]
            self.past.setdefault(rank, []).append((self.known.pop(node), t, self.role[node]))
            self.by_rank[rank].discard(node)
            self._rates(rank)
        for successor, at in self._ended(node, t):
            self._begin(successor, at)

    def _ended(self, node: int, t: float) -> list[tuple[int, float]]:
        """``node`` ended at ``t``: the successors that can start now (the others are queued)."""
        self.end[node] = t
        self.speed.pop(node, None)
        now = []
        for k in self.outgoing[node]:
            d = self.dst[k]
            self.ready[d] = max(self.ready[d], t + self.gap[k])
            self.waiting[d] -= 1
            if self.waiting[d] == 0:
                r = self.release[d]
                at = self.ready[d] if r != r else max(self.ready[d], r)
                if at > self.now:
                    heapq.heappush(self.heap, (at, d))
                else:
                    now.append((d, at))
        return now
