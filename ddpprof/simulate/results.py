"""What a simulation gives: its predictions, the run as measured, and the whole of it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..metrics.cost import CostModel

if TYPE_CHECKING:   # the graphs' machinery is imported where a replay is made, not by analyze
    from ..graph.contended import Tax


@dataclass(frozen=True)
class Prediction:
    variant: str                       # what is replayed
    world_size: int
    bucket_cap_mib: float | None
    buckets: int                       # gradient collectives per step
    step_ms: float                     # unprofiled (see the module's docstring)
    exposed_comm_ms_per_step: float
    overlap_pct: float | None
    efficiency: float                  # single-process time / (N × step)
    recorded: bool                     # the run's own configuration


@dataclass(frozen=True)
class SimulateRow:
    """One prediction as ``ddpprof simulate`` prints it, beside what was measured at its
    configuration: the run's own median unprofiled step, or a ``sweep --json`` point at the
    run's world size; ``error_pct`` is (predicted − measured) / measured × 100."""

    variant: str
    world_size: int
    bucket_cap_mib: float | None
    buckets: int
    step_ms: float
    exposed_comm_ms_per_step: float
    overlap_pct: float | None
    efficiency: float
    recorded: bool
    measured_step_ms: float | None
    error_pct: float | None


@dataclass(frozen=True)
class Measured:
    """The run as recorded: its step (run.json's median unprofiled step, else, for a trace
    ddpprof did not record, ``analyze``'s step: the mean over ranks of the analyzed window over
    its steps) and, as ``analyze`` measures them (mean over ranks), overlap % and exposed
    communication per step."""

    step_ms: float | None
    overlap_pct: float | None
    exposed_comm_ms_per_step: float
    step_source: str = "run.json"


@dataclass
class Simulation:
    run: str
    variant: str | None
    trace_name: str
    world_size: int
    steps: list[str]                   # the ProfilerSteps replayed
    cost: CostModel
    tax: Tax                           # the overlap tax the replays apply
    tax_source: str
    cost_level: float                  # the run's transfers over the cost model's time
    overhead_ratio: float
    predictions: list[Prediction]
    measured: Measured
    edits: list[str] = field(default_factory=list)   # applied to every row
    rows: list[SimulateRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def own(self) -> Prediction | None:
        """The prediction of the run's own configuration."""
        return next((p for p in self.predictions if p.recorded
                     and p.world_size == self.world_size), None)


def median_error_pct(pairs: list[tuple[float, float]]) -> float | None:
    """Median of |predicted − measured| / measured over (predicted, measured) pairs, in %."""
    errors = [abs(p - m) / m * 100 for p, m in pairs if m]
    return statistics.median(errors) if errors else None


def best(predictions: list[Prediction]) -> dict[int, Prediction]:
    """The fastest bucket cap per world size (predictions with a cap only)."""
    result: dict[int, Prediction] = {}
    for p in predictions:
        if p.bucket_cap_mib is None:
            continue
        if p.world_size not in result or p.step_ms < result[p.world_size].step_ms:
            result[p.world_size] = p
    return result
