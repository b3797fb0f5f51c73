"""The bounds every printed figure respects, in one place. A figure that breaks one is not
shown as a number: the report shows a note saying what is wrong and why instead (``Flag``),
and ``--json`` keeps the number with the note beside it.

Pure functions of numbers: each returns None when the figure may be shown, else a ``Flag``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Rounding room: a share computed as 100.0000001% is 100%.
EPSILON = 1e-6
#: A speedup may exceed the ranks by this much (caches, run-to-run noise) before it is
#: implausible: beyond it, the baseline is not comparable (it oversubscribed the cores, or
#: ran another batch).
SUPERLINEAR_SLACK = 0.05
#: Nothing takes less than no time: a tax (how much longer work takes when overlapped) is
#: at least -100%. No contention between two pieces of work slows one of them tenfold.
TAX_RANGE_PCT = (-100.0, 900.0)
#: A fitted cost model explaining less of the variance than this is not used to predict.
MIN_R2 = 0.5
#: Findings whose estimated gain (or cost) is below this share of the step are not listed
#: (``--json`` keeps them).
MIN_GAIN_PCT = 1.0


@dataclass(frozen=True)
class Flag:
    """A figure that may not be shown: its name, its value, and what is wrong and why."""

    name: str
    value: float | None
    problem: str

    def note(self, where: str = "") -> str:
        shown = "n/a" if self.value is None else f"{self.value:.4g}"
        return f"{where + ': ' if where else ''}{self.name} not shown ({shown}): {self.problem}"


def share(name: str, value: float | None) -> Flag | None:
    """A share of a whole (``*_pct`` of a window, of communication) is within [0, 100]."""
    if value is None:
        return None
    if not math.isfinite(value) or value < -EPSILON or value > 100 + EPSILON:
        return Flag(name, value, "a share of a whole lies within 0-100%")
    return None


def speedup(name: str, value: float | None, world_size: int | None) -> Flag | None:
    """A speedup over one process is at most the number of ranks (beyond
    :data:`SUPERLINEAR_SLACK`): past it, the two runs are not comparable."""
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0:
        return Flag(name, value, "a speedup is a positive number")
    if world_size and value > world_size * (1 + SUPERLINEAR_SLACK):
        ranks = f"{world_size} rank{'s' * (world_size != 1)}"
        return Flag(name, value, f"more than {ranks} can give: the one-process run it is "
                                 "measured against is not comparable (it may have "
                                 "oversubscribed the cores, or run another batch or model)")
    return None


def interval(name: str, low: float | None, estimate: float | None, high: float | None,
             bounds: tuple[float, float]) -> Flag | None:
    """An interval holds its estimate (low ≤ estimate ≤ high) and stays within the
    quantity's physical ``bounds``."""
    if estimate is None:
        return None
    if not math.isfinite(estimate) or not bounds[0] <= estimate <= bounds[1]:
        return Flag(name, estimate, f"outside the {bounds[0]:g} to {bounds[1]:g} it can be")
    if low is None or high is None:
        return None
    if not low - EPSILON <= estimate <= high + EPSILON:
        return Flag(name, estimate, f"its interval ({low:.4g} to {high:.4g}) does not hold it")
    if low < bounds[0] or high > bounds[1]:
        return Flag(name, estimate, f"its interval ({low:.4g} to {high:.4g}) reaches beyond "
                                    f"{bounds[0]:g} to {bounds[1]:g}: too few samples to tell")
    return None


def tax(name: str, low: float | None, estimate: float | None, high: float | None
        ) -> Flag | None:
    """An overlap tax, in %: :func:`interval` within :data:`TAX_RANGE_PCT`."""
    return interval(name, low, estimate, high, TAX_RANGE_PCT)


def fit(name: str, r2: float | None) -> Flag | None:
    """A fitted model explains at least :data:`MIN_R2` of the variance to be used."""
    if r2 is not None and (not math.isfinite(r2) or r2 < MIN_R2):
        return Flag(name, r2, f"a fit with R² below {MIN_R2:g} does not predict: it is not "
                              "used")
    return None


def bandwidth(name: str, gbps: float | None) -> Flag | None:
    """A bandwidth is finite and positive (an infinite one means nothing was measured)."""
    if gbps is not None and (not math.isfinite(gbps) or gbps <= 0):
        return Flag(name, gbps, "no collective was measured, so there is no bandwidth")
    return None


def transfer(name: str, transfer_ms: float | None, comm_ms: float | None) -> Flag | None:
    """The transfer part of communication is at most the communication."""
    if transfer_ms is None or comm_ms is None:
        return None
    if transfer_ms > comm_ms * (1 + EPSILON) + EPSILON:
        return Flag(name, transfer_ms, f"more than the {comm_ms:.4g} ms of communication it is "
                                       "part of (the ranks' clocks may disagree)")
    return None


def launch_point(pct: float | None) -> str:
    """Where in backward a collective was launched, in words: a share of backward's length,
    or after its end (a share past 100% is not a point within backward)."""
    if pct is None or not math.isfinite(pct):
        return "unknown"
    if pct > 100 + EPSILON:
        return "after backward's last gradient"
    return f"{max(pct, 0.0):.0f}% into backward"


def shown_gain(pct: float | None) -> bool:
    """Whether a finding's gain (or cost), % of the step, is worth listing."""
    return pct is not None and pct >= MIN_GAIN_PCT
