"""Waiting versus transferring: each rank's collective time split by what the other ranks were
doing. Pure functions of per-rank call arrays.

A collective cannot move data before every rank of its group has joined it. So for one call
matched across ranks, with ``last_start`` the latest of the ranks' starts:

* **transfer** (rank r) = ``end_r − last_start``: the time all ranks were in it together;
* **wait** (rank r) = ``last_start − start_r``: the time rank r sat in it before the last rank
  arrived, waiting for a slower peer;

both clipped to the call, so that wait + transfer = the call's duration (summed over calls,
like the calls' time; ``waiting_us`` is the union of the waiting intervals instead, the wall
time spent waiting). The rank that arrived last *caused* the others' wait on that call.
Calls are matched within a process group by their sequence number when every rank's trace
gives one, else by their order; a group seen on one rank only has nothing to match and is
left out of both. Timestamps are compared across
ranks as written, which assumes the ranks' clocks agree (one host, or hosts kept in step).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from . import intervals as iv
from .comm import CollectiveCalls


@dataclass(frozen=True)
class WaitSplit:
    transfer_us: float
    wait_us: float
    caused_wait_us: float          # the other ranks' wait on calls this rank joined last
    matched_calls: int
    waiting_us: float = 0.0        # |⋃ waiting intervals|: wall time waiting for any peer


@dataclass
class WaitAnalysis:
    by_rank: dict[int, WaitSplit]
    unmatched: list[str] = field(default_factory=list)  # why some calls were left out
    #: Per rank and call, when its transfer began: the last member's arrival, clipped to the
    #: call (a call left unmatched transfers from its own start).
    transfer_start_us: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def slowest_rank(self) -> int | None:
        """The rank that made the others wait the most, if any rank made anyone wait."""
        ranked = [(split.caused_wait_us, rank) for rank, split in self.by_rank.items()]
        best = max(ranked, default=(0.0, None))
        return best[1] if best[0] > 0 else None


def _instances(calls: CollectiveCalls) -> dict[tuple[str, str], tuple[np.ndarray,
                                                                     list[int | None]]]:
    """Each (group, kind)'s calls, by start, with their sequence numbers: one pass over the
    calls, whatever the number of groups."""
    found: dict[tuple[str, str], list[int]] = {}
    for i, key in enumerate(zip(calls.group, calls.kind, strict=True)):
        found.setdefault(key, []).append(i)
    instances = {}
    for key, picked in found.items():
        picked.sort(key=lambda i: calls.start_us[i])
        instances[key] = (np.array(picked, dtype=np.int64), [calls.sequence[i] for i in picked])
    return instances


def matched_calls(calls_by_rank: dict[int, CollectiveCalls]
                  ) -> Iterator[tuple[dict[int, int], str]]:
    """Every call matched across ranks (``{rank: its index in that rank's calls}``), and its
    kind."""
    for rows, _, _, kind in _matched_calls(calls_by_rank, []):
        yield rows, kind


def _matched_calls(calls_by_rank: dict[int, CollectiveCalls], unmatched: list[str]
                   ) -> Iterator[tuple[dict[int, int], int, float, str]]:
    """Every call matched across ranks: ``{rank: its index in that rank's calls}``, the rank
    that arrived last and when, and the call's kind."""
    by_rank = {rank: _instances(calls) for rank, calls in calls_by_rank.items()}
    for group, kind in sorted({key for found in by_rank.values() for key in found}):
        members = {rank: found[(group, kind)] for rank, found in by_rank.items()
                   if (group, kind) in found}
        if len(members) < 2:
            continue
        for rows in _match(members, f"{kind} in group {group or 'default'}", unmatched):
            starts = {r: calls_by_rank[r].start_us[i] for r, i in rows.items()}
            last_rank = max(starts, key=lambda r: (starts[r], r))
            yield rows, last_rank, float(starts[last_rank]), kind


@dataclass(frozen=True)
class CallWaits:
    """One rank's matched calls that waited: each one's index in the rank's calls, its wait
    (from its start to the last member's arrival, clipped to the call) and that last rank."""

    index: np.ndarray
    wait_us: np.ndarray
    late_rank: np.ndarray


def call_waits(calls_by_rank: dict[int, CollectiveCalls]) -> dict[int, CallWaits]:
    """Per rank, every call that waited for a later rank (see the module's docstring)."""
    found: dict[int, list[tuple[int, float, int]]] = {rank: [] for rank in calls_by_rank}
    for rows, last_rank, last_start, _ in _matched_calls(calls_by_rank, []):
        for rank, i in rows.items():
            start, end = calls_by_rank[rank].start_us[i], calls_by_rank[rank].end_us[i]
            wait = min(max(last_start - start, 0.0), end - start)
            if wait > 0:
                found[rank].append((i, wait, last_rank))
    return {rank: CallWaits(*(np.array(column) for column in zip(*rows, strict=True)))
            if rows else CallWaits(np.empty(0, np.int64), np.empty(0), np.empty(0, np.int64))
            for rank, rows in found.items()}


def wait_split(calls_by_rank: dict[int, CollectiveCalls]) -> WaitAnalysis:
    """Match every rank's calls and split each call's time into wait and transfer."""
    totals = {rank: [0.0, 0.0, 0.0] for rank in calls_by_rank}   # transfer, wait, caused
    matched = dict.fromkeys(calls_by_rank, 0)
    waiting: dict[int, list[tuple[float, float]]] = {rank: [] for rank in calls_by_rank}
    unmatched: list[str] = []
    transfer_start = {rank: calls.start_us.copy() for rank, calls in calls_by_rank.items()}
    for rows, last_rank, last_start, _ in _matched_calls(calls_by_rank, unmatched):
        for rank, i in rows.items():
            start, end = calls_by_rank[rank].start_us[i], calls_by_rank[rank].end_us[i]
            transfer = min(max(end - last_start, 0.0), end - start)
            wait = (end - start) - transfer
            transfer_start[rank][i] = end - transfer
            totals[rank][0] += transfer
            totals[rank][1] += wait
            if wait > 0:
                waiting[rank].append((start, start + wait))
            matched[rank] += 1
            if rank != last_rank:
                totals[last_rank][2] += wait
    return WaitAnalysis({rank: WaitSplit(t[0], t[1], t[2], matched[rank], _union_us(waiting[rank]))
                         for rank, t in totals.items()}, unmatched, transfer_start)


def _union_us(spans: list[tuple[float, float]]) -> float:
    if not spans:
        return 0.0
    starts, ends = (np.array(side, dtype=float) for side in zip(*spans, strict=True))
    return iv.length(iv.union(starts, ends))


def _match(members: dict[int, tuple[np.ndarray, list[int | None]]], label: str,
           unmatched: list[str]) -> list[dict[int, int]]:
    """Rows of matched calls. By sequence number when every call has one; else by order,
    keeping the first ``min`` calls of each rank when the counts differ."""
    numbered = {rank: [s for s in sequences if s is not None]
                for rank, (_, sequences) in members.items()}
    if all(len(numbered[rank]) == len(sequences) for rank, (_, sequences) in members.items()):
        by_sequence: dict[int, dict[int, int]] = {}
        for rank, (index, _) in members.items():
            for i, s in zip(index.tolist(), numbered[rank], strict=True):
                by_sequence.setdefault(s, {})[rank] = i
        rows = [row for _, row in sorted(by_sequence.items()) if len(row) >= 2]
        if len(rows) < len(by_sequence):
            unmatched.append(f"{label}: {len(by_sequence) - len(rows)} sequence numbers "
                             "seen on one rank only")
        return rows
    counts = {rank: index.size for rank, (index, _) in members.items()}
    common = min(counts.values())
    if len(set(counts.values())) > 1:
        unmatched.append(f"{label}: ranks made different numbers of calls "
                         f"({', '.join(f'rank {r}: {n}' for r, n in sorted(counts.items()))}); "
                         f"the first {common} of each were matched by order")
    return [{rank: int(index[k]) for rank, (index, _) in members.items()}
            for k in range(common)]
