"""Communication per process group: one rank's collective calls taken group by group, and the
all-to-all imbalance across ranks. Pure functions of call arrays and intervals.

For the calls ``G`` of one group on one rank, and that rank's compute lane ``C`` (the same
compute the rank's breakdown uses):

* **calls**, **bytes** (Σ of nccl-tests' size of each call; unknown where any call's is);
* **call time** ``Σ (end − start)`` over the calls: what bandwidth is measured against;
* **communication time** ``|⋃ G|``: the wall time the group communicated;
* **exposed** ``|⋃ G \\ C|``: the part of it no compute hid;
* **overlap %** ``|⋃ G ∩ C| / |⋃ G| × 100`` (None without calls that take time);
* **algbw** bytes / call time, **busbw** Σ bytes × bus factor of the call's kind at the
  group's size / call time (``comm.BUS_FACTOR``, nccl-tests' definitions);
* **queued** (device streams only): the time its calls were ready — launched — but waited
  in their stream's queue behind the call before them on that stream, counted where that call
  is of another group, or of the same group and *blocking* (compute hid less than
  :data:`BLOCKING_HIDDEN_SHARE` of it); with ``queued_behind``, what they waited for most. A
  call ``j`` ready at ``r_j`` behind ``i`` on its stream waits ``max(0, min(s_j, e_i) −
  max(r_j, s_i))``. Waiting behind a same-group call that overlaps compute is one group's
  ordinary pipeline, not counted.

Groups may communicate at the same time (a data-parallel reduce-scatter under a
tensor-parallel all-reduce), so their communication times can add up to more than the rank's
communication lane, and their exposed times to more than its exposed communication.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import intervals as iv
from .comm import CollectiveCalls, GroupRef, bandwidth


@dataclass(frozen=True)
class GroupFigures:
    """One rank's communication over one process group (module docstring)."""

    group: GroupRef
    calls: int
    bytes: float | None
    call_us: float
    comm_us: float
    exposed_us: float
    overlap_pct: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    calls_by_kind: dict[str, int] = field(default_factory=dict)
    queued_us: float = 0.0
    queued_behind: str | None = None     # what its calls waited for most (module docstring)


#: A call compute hid less than this share of is blocking: the rank waited for it.
BLOCKING_HIDDEN_SHARE = 0.1


def queued(calls: CollectiveCalls, compute: iv.Intervals) -> tuple[np.ndarray, list[str | None]]:
    """Each call's queued time and what it waited for (module docstring): the name of the
    other group, or ``"GROUP's blocking KIND"``; None where it did not wait."""
    waited = np.zeros(calls.n)
    behind: list[str | None] = [None] * calls.n
    if not calls.stream or not calls.ready_us:
        return waited, behind
    length = calls.end_us - calls.start_us
    hidden = iv.covered(compute, calls.start_us, calls.end_us)
    blocking = hidden < BLOCKING_HIDDEN_SHARE * length
    last: dict[int, int] = {}       # stream -> its latest call so far (calls are by start)
    for j in range(calls.n):
        stream = calls.stream[j]
        if stream < 0:
            continue
        i = last.get(stream)
        last[stream] = j
        if i is None:
            continue
        mine, theirs = calls.group_of(j).name, calls.group_of(i).name
        if mine == theirs and not blocking[i]:
            continue
        wait = min(calls.start_us[j], calls.end_us[i]) - max(calls.ready_us[j],
                                                             calls.start_us[i])
        if wait > 0:
            waited[j] = wait
            behind[j] = theirs if mine != theirs else f"{theirs}'s blocking {calls.kind[i]}"
    return waited, behind


def calls_by_group(calls: CollectiveCalls) -> dict[str, list[int]]:
    """Each group name's calls (indices), in the order the groups first appear."""
    found: dict[str, list[int]] = {}
    for i in range(calls.n):
        found.setdefault(calls.group_of(i).name, []).append(i)
    return found


def group_figures(calls: CollectiveCalls, compute: iv.Intervals) -> list[GroupFigures]:
    """The figures of every group with calls on this rank, by name."""
    figures = []
    durations = calls.end_us - calls.start_us
    waited, behind = queued(calls, compute)
    for _, picked in sorted(calls_by_group(calls).items()):
        reasons: dict[str, float] = {}
        for i in picked:
            if (label := behind[i]) is not None:
                reasons[label] = reasons.get(label, 0.0) + float(waited[i])
        call_us = float(durations[picked].sum())
        total_bytes, algbw, busbw = bandwidth(calls, picked, call_us)
        lane = iv.union(calls.start_us[picked], calls.end_us[picked])
        comm_us = iv.length(lane)
        # |lane ∩ compute| in one bisection over compute (lane's pieces are disjoint): a
        # group costs its own calls, not the whole compute set's pieces again
        hidden_us = float(iv.covered(compute, *lane).sum())
        kinds: dict[str, int] = {}
        for i in picked:
            kinds[calls.kind[i]] = kinds.get(calls.kind[i], 0) + 1
        figures.append(GroupFigures(
            group=calls.group_of(picked[0]), calls=len(picked), bytes=total_bytes,
            call_us=call_us, comm_us=comm_us, exposed_us=max(comm_us - hidden_us, 0.0),
            overlap_pct=100.0 * hidden_us / comm_us if comm_us > 0 else None,
            algbw_gbps=algbw, busbw_gbps=busbw,
            calls_by_kind=dict(sorted(kinds.items())),
            queued_us=float(waited[picked].sum()),
            queued_behind=max(reasons, key=lambda r: (reasons[r], r)) if reasons else None))
    return figures


@dataclass(frozen=True)
class Imbalance:
    """How unevenly the ranks of a group load its all-to-alls: over the calls matched across
    ranks, ``Σ_calls max_r bytes / Σ_calls mean_r bytes`` (1 = every rank sends, or receives,
    as much; 2 = the heaviest twice the mean, and the others wait for it), and the rank with
    the most bytes over those calls."""

    ratio: float
    heaviest_rank: int
    matched_calls: int


def send_imbalance(rows: list[dict[int, int | None]]) -> Imbalance | None:
    """The imbalance of matched all-to-all calls, each ``{rank: bytes it sent}`` (or
    received); None where no call has every member's size and two members."""
    known = [row for row in rows if len(row) >= 2 and all(v is not None for v in row.values())]
    if not known:
        return None
    sizes = [[v for v in row.values() if v is not None] for row in known]
    peak = sum(max(values) for values in sizes)
    mean = sum(float(np.mean(values)) for values in sizes)
    if mean <= 0:
        return None
    sent: dict[int, float] = {}
    for row in known:
        for rank, size in row.items():
            sent[rank] = sent.get(rank, 0.0) + float(size)  # type: ignore[arg-type]
    heaviest = max(sent, key=lambda r: (sent[r], -r))
    return Imbalance(float(peak) / mean, heaviest, len(known))


def split_imbalance(splits: list[tuple[int, ...] | None]) -> float | None:
    """One rank's all-to-all(v) imbalance over its peers from the recorded split sizes:
    ``Σ_calls max split / Σ_calls mean split`` (1: it sends each peer as much)."""
    known = [s for s in splits if s and sum(s) > 0]
    if not known:
        return None
    return sum(max(s) for s in known) / sum(float(np.mean(s)) for s in known)
