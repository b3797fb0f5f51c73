"""What the user asked of an analysis: one object, passed down unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class AnalysisOptions:
    keep_last_step: bool = False       # analyze the last ProfilerStep too (HTA drops it)
    per_step: bool = False             # a breakdown per ProfilerStep
    timeline: bool = False             # one step's lanes per rank, for the HTML report
    hta_compat: bool = False           # HTA 0.5.0's defaults: ns rounding, NCCL-only comm
    comm_kernels: tuple[str, ...] = ()  # extra kernel-name regexes that mean communication
    engine: str = "native"             # "hta": HTA itself computes the GPU shares
    jobs: int | None = None            # ranks analyzed at once (default: the cores)
    scheduler: str | None = None       # a Dask scheduler's address: analyze there


class LastStep(StrEnum):
    """Which events a rank's analysis covers, decided per run as HTA 0.5.0 does."""

    DROPPED = "dropped"                # 2+ ProfilerSteps named: all but the last
    KEPT = "kept"                      # 2+ named and --keep-last-step: all of them
    ONE_STEP = "only one step"         # HTA applies no filter: the whole trace on GPU
    NO_STEPS = "no ProfilerStep"       # the whole trace, as one step

    @classmethod
    def decide(cls, step_names: set[str], keep_last_step: bool) -> LastStep:
        if len(step_names) >= 2:
            return cls.KEPT if keep_last_step else cls.DROPPED
        return cls.ONE_STEP if step_names else cls.NO_STEPS

    @property
    def filters(self) -> bool:
        return self in (LastStep.DROPPED, LastStep.KEPT)
