"""Which rank the others wait for, step by step, and what that rank spends the time on: the
evidence of the findings on slow ranks (``advice.ranks``). Pure: from a run's ranks.

In data-parallel training the collectives equalise the ranks' steps, so a rank slow in its
compute does not show in step times: the others wait for it, inside the collectives. The wait
split (``metrics.waits``) says, for every call matched across ranks, which rank arrived last
and how long each other rank waited for it; the part of that wait that no compute of the
waiting rank hides is its **waiting for rank N** (``diff.profile.waiting_moved``, as
``ddpprof diff`` shows it): what the wait costs that rank's step. Per analyzed step (the
ranks' ``ProfilerStep``s, matched by name):

* ``late_rank[s]``: the rank the others' waiting in step s was most for;
* ``waited_ms[r, s]``: rank r's waiting for it in step s;
* ``caused_ms[N]``: the others' mean waiting for rank N per step, over the analyzed steps:
  what rank N costs the others' steps; ``held_ms[N]`` the same with the waits compute hides
  (the wall time the others sat in collectives for rank N): on CPU ranks sharing cores, a
  rank that waits beside its own compute slows that compute, so its wait costs it more than
  its exposed part.

What a rank L spends the time on, against the other ranks (their median), comes from each
rank's steps cut into parts (``analysis.parts``) and its ops by name and shape (self time and
calls over the analyzed steps), in ms per step:

* **extra work**: calls L makes beyond the others' of the same op and shape (more calls, or
  an op the others do not run), at the others' time per call: the rank does more work;
* **slower**: on the ops L calls as often as the others, its time beyond theirs: the same
  work done slower (a busy core, a throttled or slower device); ``slowdown`` is the ratio of
  L's time on them to the others';
* **untraced**: L's idle time (nothing traced runs) beyond the others': data loading or host
  work the profiler does not see, a late start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..analysis.parts import IDLE, PartKey, RankParts
from ..analysis.profile import waiting_moved
from ..analysis.results import RankResult
from ..metrics import intervals as iv
from ..metrics.waits import CallWaits, call_waits


@dataclass(frozen=True)
class Lateness:
    """A run's ranks against each other, step by step (see the module)."""

    steps: list[str]
    step_ms: float                      # the mean analyzed step over the ranks
    ranks: list[int]                    # the rows of ``waited_ms``
    late_rank: list[int | None]         # per step: the rank the others waited for most
    waited_ms: np.ndarray               # (ranks, steps): each one's waiting for late_rank
    caused_ms: dict[int, float]         # per rank: the others' mean waiting for it per step
    held_ms: dict[int, float]           # ... with the waits compute hides
    #: per rank: its own exposed waiting for any other rank, mean per step (what of its
    #: exposed communication is waiting, not transfer)
    exposed_wait_ms: dict[int, float]

    def others_wait_ms(self, step: int) -> float:
        """The mean waiting, in ``step``, of the ranks other than its late rank."""
        late = self.late_rank[step]
        rows = [k for k, r in enumerate(self.ranks) if r != late]
        return float(np.mean(self.waited_ms[rows, step])) if late is not None else 0.0

    def late_steps(self, rank: int, min_wait_ms: float = 0.0) -> int:
        """The steps in which the others waited for ``rank`` most, at least
        ``min_wait_ms``."""
        return sum(1 for s, late in enumerate(self.late_rank)
                   if late == rank and self.others_wait_ms(s) >= min_wait_ms)

    def waiting_steps(self, min_wait_ms: float) -> int:
        """The steps in which the ranks waited at least ``min_wait_ms`` for one of them."""
        return sum(1 for s in range(len(self.steps)) if self.others_wait_ms(s) >= min_wait_ms)

    @property
    def culprit(self) -> int | None:
        """The rank the others waited for longest over the run (None: no one waited)."""
        found = max(self.caused_ms.items(), key=lambda kv: (kv[1], -kv[0]), default=None)
        return found[0] if found is not None and found[1] > 0 else None

    @property
    def mean_wait_ms(self) -> float:
        """The others' waiting for each step's late rank, mean over the steps."""
        return float(np.mean([self.others_wait_ms(s) for s in range(len(self.steps))]))


def _columns(parts: RankParts, steps: list[str]) -> list[int]:
    position = {name: k for k, name in enumerate(parts.step_names)}
    return [position[name] for name in steps]


def common_steps(ranks: Sequence[RankResult]) -> list[str]:
    """The analyzed steps every rank has, in the first rank's order."""
    names = [r.parts.step_names for r in ranks if r.parts is not None]
    if len(names) < len(ranks) or not names:
        return []
    shared = set(names[0]).intersection(*names[1:])
    return [name for name in names[0] if name in shared]


def lateness(ranks: Sequence[RankResult]) -> Lateness | None:
    """The ranks' lateness step by step; None with fewer than two ranks or no common steps."""
    steps = common_steps(ranks)
    if len(ranks) < 2 or not steps:
        return None
    order = sorted(r.rank for r in ranks)
    row = {rank: k for k, rank in enumerate(order)}
    waits = call_waits({r.rank: r.calls for r in ranks})
    # waiting[k, s, j]: rank order[k]'s waiting for rank order[j] in step s (ms)
    waiting = np.zeros((len(order), len(steps), len(order)))
    for rank in ranks:
        assert rank.parts is not None
        parts, part_us = waiting_moved(rank, rank.parts, waits.get(rank.rank))
        columns = _columns(rank.parts, steps)
        for j, late in enumerate(order):
            key = PartKey("waiting", f"rank {late}")
            if key in parts:
                waiting[row[rank.rank], :, j] = part_us[parts.index(key), columns] / 1e3
    others = waiting.sum(axis=0)                        # (steps, late rank)
    late_rank: list[int | None] = [order[int(np.argmax(others[s]))] if others[s].any()
                                   else None for s in range(len(steps))]
    waited = np.zeros((len(order), len(steps)))
    for s, late_one in enumerate(late_rank):
        if late_one is not None:
            waited[:, s] = waiting[:, s, row[late_one]]
    caused = {rank_id: float(others[:, j].mean()) / (len(order) - 1)
              for j, rank_id in enumerate(order)}
    step_ms = float(np.mean([np.mean(r.parts.step_us) for r in ranks
                             if r.parts is not None])) / 1e3
    return Lateness(steps, step_ms, order, late_rank, waited, caused,
                    _held({r.rank: r for r in ranks}, waits, order, len(steps)),
                    {rank: float(waiting[k].sum(axis=1).mean()) for k, rank in enumerate(order)})


def _held(by_rank: dict[int, RankResult], waits: dict[int, CallWaits], order: list[int],
          steps: int) -> dict[int, float]:
    """Per rank N: the others' mean wall time per step sitting in collectives for rank N (the
    union of their waits for it, hidden by compute or not)."""
    held = {}
    for late in order:
        total = 0.0
        for rank, found in waits.items():
            mine = found.late_rank == late
            if rank == late or not mine.any():
                continue
            starts = by_rank[rank].calls.start_us[found.index[mine]]
            total += iv.length(iv.union(starts, starts + found.wait_us[mine])) / 1e3
        held[late] = total / max(len(order) - 1, 1) / steps
    return held


@dataclass(frozen=True)
class Excess:
    """What a rank spends per step beyond the other ranks (ms per step; see the module)."""

    extra_work_ms: float
    slower_ms: float
    untraced_ms: float
    #: L's time over the others' on the ops both call alike (None: no such op)
    slowdown: float | None
    extra_calls_per_step: float
    #: The op (name) whose extra calls take the most time, and that time per step
    top_extra_op: str | None
    top_extra_op_ms: float
    compute_ms: float               # its op time per step
    others_compute_ms: float        # the others' (median over ranks)
    untraced_rank_ms: float         # its idle time per step
    others_untraced_ms: float       # the others' (median over ranks)


def turn_excess(ranks: Sequence[RankResult], late: Lateness, min_wait_ms: float
                ) -> tuple[float, float]:
    """Where the others waited at least ``min_wait_ms`` for a rank, what that rank spent
    beyond them (their median) in that step, mean over those steps (ms): its untraced time
    (idle, no op running: a pause, a sleep, data made outside any op) and its op time (the
    same or more work taking longer)."""
    untraced, work = [], []
    by_rank = {r.rank: r.parts for r in ranks}
    for s, rank in enumerate(late.late_rank):
        mine = by_rank.get(rank) if rank is not None else None
        others = [p for r, p in by_rank.items() if r != rank and p is not None]
        if mine is None or not others or late.others_wait_ms(s) < min_wait_ms:
            continue
        step = [late.steps[s]]
        untraced.append(float(_per_step(mine, step, True)[0]) - float(
            np.median([_per_step(p, step, True)[0] for p in others])))
        work.append(float(_per_step(mine, step, False)[0]) - float(
            np.median([_per_step(p, step, False)[0] for p in others])))
    return (float(np.mean(untraced)) if untraced else 0.0,
            float(np.mean(work)) if work else 0.0)


def _per_step(parts: RankParts, steps: list[str], idle: bool) -> np.ndarray:
    """Per step (``steps``, by name): the op time (``idle`` False) or the idle time, ms."""
    rows = [k for k, key in enumerate(parts.parts)
            if (key == IDLE if idle else key.group == "compute")]
    total_us: np.ndarray = parts.part_us[np.ix_(rows, _columns(parts, steps))].sum(axis=0)
    return total_us / 1e3


def _ops(parts: RankParts) -> dict[tuple[str, str, str], tuple[float, float]]:
    """Per op (its part, name and shape): self time (ms) and calls, per step."""
    steps = max(len(parts.step_names), 1)
    ops: dict[tuple[str, str, str], tuple[float, float]] = {}
    for item in parts.items:
        key = parts.parts[item.part]
        if key.group != "compute":
            continue
        ident = (key.label, item.name, item.shape)
        ms, calls = ops.get(ident, (0.0, 0.0))
        ops[ident] = (ms + item.us / 1e3 / steps, calls + item.calls / steps)
    return ops


def excess(ranks: Sequence[RankResult], late: int, steps: list[str]) -> Excess | None:
    """What rank ``late`` spends per step beyond the others (their median), over ``steps``."""
    mine = next((r.parts for r in ranks if r.rank == late), None)
    others = [r.parts for r in ranks if r.rank != late and r.parts is not None]
    if mine is None or not others or not steps:
        return None
    compute = _per_step(mine, steps, idle=False)
    others_compute = np.median([_per_step(p, steps, idle=False) for p in others], axis=0)
    idle = _per_step(mine, steps, idle=True)
    others_idle = np.median([_per_step(p, steps, idle=True) for p in others], axis=0)
    own, theirs = _ops(mine), [_ops(p) for p in others]
    extra_work = slower = extra_calls = matched_mine = matched_theirs = 0.0
    extra_by_name: dict[str, float] = {}
    for ident in sorted(set(own).union(*theirs)):
        ms, calls = own.get(ident, (0.0, 0.0))
        other_ms = float(np.median([t.get(ident, (0.0, 0.0))[0] for t in theirs]))
        other_calls = float(np.median([t.get(ident, (0.0, 0.0))[1] for t in theirs]))
        per_call = other_ms / other_calls if other_calls else (ms / calls if calls else 0.0)
        more = calls - other_calls
        alike = calls
        if abs(more) >= 0.5:        # not the same calls: work done, or not done
            extra_work += more * per_call
            extra_calls += more
            if more > 0:
                extra_by_name[ident[1]] = extra_by_name.get(ident[1], 0.0) + more * per_call
            alike = min(calls, other_calls)
        if alike and other_calls:
            slower += alike * (ms / calls - per_call)
            matched_mine += alike * ms / calls
            matched_theirs += alike * per_call
    top = max(extra_by_name.items(), key=lambda kv: kv[1], default=(None, 0.0))
    return Excess(
        extra_work_ms=extra_work, slower_ms=slower,
        untraced_ms=float(np.mean(idle - others_idle)),
        slowdown=matched_mine / matched_theirs if matched_theirs > 0 else None,
        extra_calls_per_step=extra_calls, top_extra_op=top[0], top_extra_op_ms=top[1],
        compute_ms=float(np.mean(compute)), others_compute_ms=float(np.mean(others_compute)),
        untraced_rank_ms=float(np.mean(idle)), others_untraced_ms=float(np.mean(others_idle)))
