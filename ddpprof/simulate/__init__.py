"""``ddpprof simulate``: a recorded run's steps replayed as dependency graphs across its ranks
(``ddpprof.graph``), edited: another bucket cap, another world size, faster work or network,
a rank delayed. Definitions in ``docs/simulate.md``.

The run is analyzed as ``analyze`` does (each trace read once): that gives each analyzed
step's graph across the ranks and the run's overlap tax (``metrics.tax``). Each step is
replayed (``steps``) with the cost model (``sources``) at the step's cost level, under the
tax, for the run's own configuration (no edit: the recorded step exactly) and for every
(world size, cap) asked; each figure is the median over the steps. ``output`` writes it out;
``advice`` answers ``ddpprof.findings``.

**Profiler overhead**, the same on both sides: the graphs are profiled steps, so a replay
predicts a profiled step; it is divided by the run's measured ``profiler_overhead_ratio``
(median profiled step over median unprofiled step, which also carries any change of the
machine's load between them, so a ratio below 1 is kept) and compared with the run's median
unprofiled step.

**What a cap applies to**: the variants whose gradients go in buckets (the registry's
``gradient_sync`` ``buckets`` and ``sharded_buckets``); for the others, world sizes only.

The names below are loaded on first use (from ``run``, ``advice``, ...): ``analyze`` imports
``advice`` alone, without the graph machinery a replay needs (about 20 ms of every analyze).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..metrics.cost import CostModel, fit_cost
    from .advice import ADVICE_CAPS_MB, cap_advice, cap_advice_for_runs
    from .output import summary_lines, to_json_document, verdict_lines
    from .results import Prediction, Simulation, best, median_error_pct
    from .run import simulate, simulate_run
    from .sources import Costs
    from .steps import registration_positions

#: Where each public name lives.
_HOMES = {
    "ADVICE_CAPS_MB": "advice", "cap_advice": "advice", "cap_advice_for_runs": "advice",
    "CostModel": "..metrics.cost", "fit_cost": "..metrics.cost",
    "summary_lines": "output", "to_json_document": "output", "verdict_lines": "output",
    "Prediction": "results", "Simulation": "results", "best": "results",
    "median_error_pct": "results", "simulate": "run", "simulate_run": "run",
    "Costs": "sources", "registration_positions": "steps",
}
__all__ = ["ADVICE_CAPS_MB", "CostModel", "Costs", "Prediction", "Simulation", "best",
           "cap_advice", "cap_advice_for_runs", "fit_cost", "median_error_pct",
           "registration_positions", "simulate", "simulate_run", "summary_lines",
           "to_json_document", "verdict_lines"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home if home.startswith(".") else f".{home}",
                                           __name__), name)
