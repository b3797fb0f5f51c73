"""Matching the ranks' collectives in each process group by sequence id, and finding the first
one its members did not all reach alike.

A group's members issue its collectives in one order, each numbered by the group's sequence
id; collective *s* can complete only when every member has issued it with the same op, sizes
and dtypes. So, per group, over the sequence ids every member's buffer still holds:

* a **mismatch** is the first *s* that members issued differently (op, sizes, dtypes); when
  the dumps hold stacks, two members issuing *s* from different call sites count too, if one
  of them is the other's sequence shifted (an **order** problem: it skipped a collective, or
  issued one more);
* else a collective **not reached** is the first *s* some members issued and others never did;
* else, when members left no dump, the last collective the others were at when they dumped is
  one those members are **not known** to have reached;
* else, where the backend records progress (NCCL's ``started`` and ``completed``), one every
  member issued but that did not complete everywhere is **not completed**.

Where two sides of a mismatch are the same size, the side whose call repeats what it issued one
training step earlier (the sequence's period) is taken as the expected one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .model import STATES, DumpSet, GroupInfo, Track

#: How far (in collectives) a rank's sequence is tried shifted against another's.
MAX_SHIFT = 3
#: Collectives compared after the first difference to confirm a shift.
SHIFT_WINDOW = 8
#: Longest step period (in collectives of one group) looked for, and the history it is read from.
MAX_PERIOD = 256
_COMPLETED = STATES.index("completed")
_STARTED = STATES.index("started")
_EMPTY = Track(*(np.zeros(0, dtype=t) for t in (np.int64, np.int32, np.int32, np.int32,
                                                 np.int64, np.int64, np.int8, np.int8)))


@dataclass(frozen=True)
class Problem:
    """The first collective of ``group`` that its members did not all reach alike."""

    group: str
    seq: int
    kind: str                      # mismatch, order, deviation, not_reached, not_known,
    #                                not_completed
    reached: dict[int, int]        # rank: its row at ``seq``
    missing: list[int]             # members whose dumps show they never issued it
    unknown: list[int]             # members with no dump, or whose buffer no longer holds it
    culprits: list[int]
    expected: list[int]            # the ranks taken as right (the majority side)
    shift: int = 0                 # order: +d the culprits skipped d, -d issued d more
    created_ns: int = 0            # when its first member issued it
    tie: bool = False              # mismatch: two sides alike in size, and nothing told them apart
    pattern_row: int | None = None  # deviation: the culprit's row it should have repeated


@dataclass
class GroupCheck:
    """One group's matching: how many collectives every member issued alike, and its first
    problem."""

    info: GroupInfo
    matched: int = 0
    window: tuple[int, int] | None = None      # the sequence ids compared across all members
    problem: Problem | None = None
    uncovered: list[int] = field(default_factory=list)   # wrapped past this group: unknown


def check_all(dump_set: DumpSet) -> list[GroupCheck]:
    return [check_group(dump_set, info) for info in dump_set.groups.values()]


def check_group(dump_set: DumpSet, info: GroupInfo) -> GroupCheck:
    dumps = dump_set.dumps
    check = GroupCheck(info)
    tracks: dict[int, Track] = {}
    low: dict[int, int] = {}
    high: dict[int, int] = {}
    unknown = [r for r in info.ranks if r not in dumps]
    for rank in info.ranks:
        if rank not in dumps:
            continue
        track = dumps[rank].tracks.get(info.name, _EMPTY)
        if not len(track.seq) and dumps[rank].wrapped:
            check.uncovered.append(rank)     # its entries of this group were overwritten
            continue
        tracks[rank] = track
        low[rank] = int(track.seq[0]) if len(track.seq) else 1
        high[rank] = int(track.seq[-1]) if len(track.seq) else 0
    unknown += check.uncovered
    if not tracks:
        return check
    start, frontier = max(low.values()), min(high.values())
    ranks = sorted(tracks)
    if frontier >= start:
        check.window = (start, frontier)
        calls, stacks, valid = _aligned(tracks, ranks, start, frontier)
        bad_call = _first_difference(calls, valid)
        bad_stack = _first_difference(stacks, valid & (stacks > 0))
        if bad_stack is not None and (bad_call is None or bad_stack < bad_call):
            problem = _difference(tracks, ranks, info, start + bad_stack, unknown,
                                  by_stack=True)
            if problem is not None and problem.kind == "order":
                check.problem, check.matched = problem, bad_stack
                return check
        if bad_call is not None:
            check.problem = _difference(tracks, ranks, info, start + bad_call, unknown,
                                        by_stack=False)
            check.matched = bad_call
            return check
        check.matched = frontier - start + 1
    ahead = [r for r in ranks if high[r] > frontier]
    if ahead:
        seq = frontier + 1
        reached = {r: row for r in ahead if (row := tracks[r].index(seq)) is not None}
        if len({int(tracks[r].match[row]) for r, row in reached.items()}) > 1:
            check.problem = _difference(tracks, ranks, info, seq, unknown, by_stack=False)
        else:
            missing = [r for r in ranks if high[r] < seq]
            check.problem = Problem(info.name, seq, "not_reached", reached, missing, unknown,
                                    missing, sorted(reached), created_ns=_created(tracks,
                                                                                  reached))
        return check
    if frontier < 1:
        return check
    reached = {r: row for r in ranks if (row := tracks[r].index(frontier)) is not None}
    stopped_here = [r for r, row in reached.items()
                    if dumps[r].last_entry() == (info.name, row)]
    if unknown and stopped_here:
        check.problem = _deviation(tracks, ranks, info, frontier, unknown) or Problem(
            info.name, frontier, "not_known", reached, [], unknown, unknown, sorted(reached),
            created_ns=_created(tracks, reached))
        check.matched = min(check.matched, check.problem.seq - start)
        return check
    states = {r: int(tracks[r].state[row]) for r, row in reached.items()}
    progress = any(s in (_STARTED, _COMPLETED) for s in states.values())
    running = [r for r, s in states.items() if s != _COMPLETED]
    if progress and running and stopped_here:
        check.problem = Problem(info.name, frontier, "not_completed", reached, [], unknown,
                                running, sorted(set(reached) - set(running)),
                                created_ns=_created(tracks, reached))
        check.matched -= 1
    return check


def _deviation(tracks: dict[int, Track], ranks: list[int], info: GroupInfo, frontier: int,
               unknown: list[int]) -> Problem | None:
    """Where members left no dump (a rank that aborted on a mismatch leaves none), a dumped
    member whose collectives break their own step pattern once, before the others stopped,
    is the likely culprit: it issued something the dead rank could not match."""
    for rank in ranks:
        found = deviation(tracks[rank], frontier)
        if found is not None:
            seq, pattern_row = found
            reached = {r: row for r in ranks if (row := tracks[r].index(seq)) is not None}
            return Problem(info.name, seq, "deviation", reached, [], unknown, [rank], [],
                           created_ns=_created(tracks, reached), pattern_row=pattern_row)
    return None


def _created(tracks: dict[int, Track], reached: dict[int, int]) -> int:
    times = [int(tracks[r].created_ns[row]) for r, row in reached.items()
             if tracks[r].created_ns[row] > 0]
    return min(times, default=0)


def _aligned(tracks: dict[int, Track], ranks: list[int], start: int, frontier: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each rank's calls and stacks at sequence ids ``start..frontier`` (a row per rank), and
    where the rank holds that sequence id."""
    seqs = np.arange(start, frontier + 1, dtype=np.int64)
    calls = np.full((len(ranks), len(seqs)), -1, dtype=np.int32)
    stacks = np.zeros((len(ranks), len(seqs)), dtype=np.int32)
    valid = np.zeros((len(ranks), len(seqs)), dtype=bool)
    for i, rank in enumerate(ranks):
        track = tracks[rank]
        rows = np.clip(np.searchsorted(track.seq, seqs), 0, max(len(track.seq) - 1, 0))
        if not len(track.seq):
            continue
        held = track.seq[rows] == seqs
        valid[i] = held
        calls[i] = np.where(held, track.match[rows], -1)
        stacks[i] = np.where(held, track.stack[rows], 0)
    return calls, stacks, valid


def _first_difference(values: np.ndarray, valid: np.ndarray) -> int | None:
    """The first column where the valid values differ, or None."""
    if values.shape[0] < 2 or not values.size:
        return None
    low = np.where(valid, values, np.iinfo(values.dtype).max).min(axis=0)
    high = np.where(valid, values, np.iinfo(values.dtype).min).max(axis=0)
    differs = (valid.sum(axis=0) >= 2) & (low != high)
    hits = np.flatnonzero(differs)
    return int(hits[0]) if len(hits) else None


def _key(track: Track, row: int, by_stack: bool) -> int:
    return int(_keys(track, by_stack)[row])


def _difference(tracks: dict[int, Track], ranks: list[int], info: GroupInfo, seq: int,
                unknown: list[int], by_stack: bool) -> Problem | None:
    """The members at ``seq`` split into sides by what they issued (by call, or by call and
    stack); the majority (or, between sides alike in size, the side that repeats its previous
    step) is expected, the others are culprits, and a culprit whose sequence is the expected
    one's shifted is an order problem."""
    reached = {r: row for r in ranks if (row := tracks[r].index(seq)) is not None}
    sides: dict[int, list[int]] = {}
    for rank, row in reached.items():
        sides.setdefault(_key(tracks[rank], row, by_stack), []).append(rank)
    if len(sides) < 2:
        return None
    ordered = sorted(sides.values(), key=lambda side: (-len(side), side[0]))
    tie = len(ordered[0]) == len(ordered[1])
    if tie:
        steady = [side for side in ordered if _repeats_its_step(tracks[side[0]], seq, by_stack)]
        if len(steady) == 1:
            ordered.remove(steady[0])
            ordered.insert(0, steady[0])
            tie = False
    expected, culprits = ordered[0], sorted(r for side in ordered[1:] for r in side)
    shifts = {_shift(tracks[c], tracks[expected[0]], seq, by_stack) for c in culprits}
    shift = shifts.pop() if len(shifts) == 1 else 0
    if by_stack and not shift:
        return None
    missing = [r for r in ranks if r not in reached]
    return Problem(info.name, seq, "order" if shift else "mismatch", reached, missing, unknown,
                   culprits, sorted(expected), shift, _created(tracks, reached), tie)


def _shift(culprit: Track, expected: Track, seq: int, by_stack: bool) -> int:
    """+d when ``culprit``'s collectives from ``seq`` on are ``expected``'s from ``seq + d``
    (it skipped d), -d when the reverse (it issued d more), else 0. Where the expected rank
    stopped (it hung there), what it would have issued next is its step's pattern: what it
    issued one period earlier."""
    mine = _keys_from(culprit, seq, SHIFT_WINDOW + MAX_SHIFT, by_stack, predict=False)
    theirs = _keys_from(expected, seq, SHIFT_WINDOW + MAX_SHIFT, by_stack, predict=True)
    for d in range(1, MAX_SHIFT + 1):
        n = min(len(mine), len(theirs) - d)
        if n >= 1 and mine[:n] == theirs[d:d + n]:
            return d
        n = min(len(theirs), len(mine) - d)
        if n >= 1 and theirs[:n] == mine[d:d + n]:
            return -d
    return 0


def _keys_from(track: Track, seq: int, count: int, by_stack: bool, predict: bool
               ) -> list[int]:
    """The keys of ``count`` collectives from ``seq`` on: those the track holds, then (with
    ``predict``) the ones its period says come next."""
    row = track.index(seq)
    if row is None:
        return []
    keys = _keys(track, by_stack)
    found = keys[row:row + count].tolist()
    period = _period(keys, row) if predict else None
    while period and len(found) < count:
        back = row + len(found) - period
        if back < 0:
            break
        found.append(found[back - row] if back >= row else int(keys[back]))
    result: list[int] = found
    return result


def _keys(track: Track, by_stack: bool) -> np.ndarray:
    """One int64 per row: its call, and its stack when ``by_stack``."""
    keys = track.match.astype(np.int64)
    return keys * (1 << 31) + track.stack if by_stack else keys


def _period(keys: np.ndarray, end: int) -> int | None:
    """The period of ``keys[:end]`` (a training step's collectives): the least p for which the
    last p keys repeat the p before them; None when they do not repeat."""
    for period in range(1, min(MAX_PERIOD, end // 2) + 1):
        if np.array_equal(keys[end - period:end], keys[end - 2 * period:end - period]):
            return period
    return None


def _loose_period(keys: np.ndarray, end: int) -> int | None:
    """The period of ``keys[:end]`` allowing for a break in it: the least p for which the last
    ``4 * MAX_PERIOD`` keys but a few equal the key p before them (at most 2 or 10% differ,
    and at most a quarter: the first steps and a one-off break may differ)."""
    window = keys[max(0, end - 4 * MAX_PERIOD):end]
    for period in range(1, min(MAX_PERIOD, len(window) // 2) + 1):
        compared = len(window) - period
        differ = int(np.count_nonzero(window[period:] != window[:-period]))
        if differ <= max(2, compared // 10) and 4 * differ <= compared:
            return period
    return None


def _repeats_its_step(track: Track, seq: int, by_stack: bool) -> bool:
    """Whether this rank issued at ``seq`` what it issued one period (a step) earlier."""
    row = track.index(seq)
    if row is None:
        return False
    keys = _keys(track, by_stack)
    period = _period(keys, row)
    return period is not None and keys[row - period] == keys[row]


def deviation(track: Track, last_seq: int) -> tuple[int, int] | None:
    """A one-off break in a rank's pattern at or before ``last_seq``, in its last three
    periods: the sequence id where it issued something other than one period earlier, and the
    row it should have repeated. The collective after the break must be back in the pattern,
    or, for the rank's last collective, the break must come from the very call site it
    repeats (the same line issuing other sizes or dtypes: not the end of the loop's
    pattern)."""
    end = track.index(last_seq)
    if end is None:
        return None
    keys = _keys(track, by_stack=False)
    period = _period(keys, end)        # the steps before the last collective
    if period is not None and keys[end] != keys[end - period] and track.stack[end] \
            and track.stack[end] == track.stack[end - period]:
        return int(track.seq[end]), end - period
    period = _loose_period(keys, end + 1)
    if period is None:
        return None
    for row in range(max(period, end - 3 * period), end):
        if keys[row] != keys[row - period] and keys[row + 1] == keys[row + 1 - period]:
            return int(track.seq[row]), row - period
    return None
