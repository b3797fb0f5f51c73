"""What the user asked of an analysis: one object, passed down unchanged; and which profiled
steps an analysis covers (:class:`LastStep`), the one rule ``analyze``, ``simulate``,
``critical-path`` and the recorded memory peaks share."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

import numpy as np

#: A run's steps in the order they ran: step numbers or event indices (arrays), or records.
Steps = TypeVar("Steps", np.ndarray, list[Any])


#: The most steps whose graphs ``simulate`` and the bucket-cap advice replay: evenly spread
#: over the analyzed window (a replay costs tens of ms a step; a long trace has thousands).
REPLAYED_STEPS = 16
#: The steps whose graphs ``analyze``'s bucket-cap advice replays: the window's middle step
#: (a step of a large trace takes a few hundred ms to build and replay; ``simulate`` replays
#: more).
ADVISED_STEPS = 1


@dataclass(frozen=True)
class AnalysisOptions:
    keep_last_step: bool = False       # analyze the last ProfilerStep too (HTA drops it)
    per_step: bool = False             # a breakdown per ProfilerStep
    timeline: bool = False             # one step's lanes per rank, for the HTML report
    hta_compat: bool = False           # HTA 0.5.0's defaults: ns rounding, NCCL-only comm
    comm_kernels: tuple[str, ...] = ()  # extra kernel-name regexes that mean communication
    structural_comm: bool = True       # kernels found to be communication by structure count
    engine: str = "native"             # "hta": HTA itself computes the GPU shares
    jobs: int | None = None            # ranks analyzed at once (default: the cores)
    scheduler: str | None = None       # a Dask scheduler's address: analyze there
    #: Also each rank's share of its steps' dependency graphs: always (``step_graphs``:
    #: ``critical-path``, ``simulate``), or where ddpprof recorded the run and its gradients
    #: were reduced in buckets (``replay_graphs``: ``analyze``'s bucket-cap advice); made where
    #: the trace is read, so that the trace is read once.
    replay_graphs: bool = False
    step_graphs: bool = False
    #: With ``step_graphs``, at most this many steps' graphs (None: every step's).
    max_graph_steps: int | None = None


class LastStep(StrEnum):
    """The analyzed window: which events a rank's analysis covers, decided per run as HTA
    0.5.0 does. When the run's traces name two or more ProfilerSteps, the last one is dropped
    (it often holds the profiler's own teardown) unless ``--keep-last-step``; with one step or
    none the whole trace is the window. :meth:`decide` says which, :meth:`analyzed` which
    steps that is."""

    DROPPED = "dropped"                # 2+ ProfilerSteps named: all but the last
    KEPT = "kept"                      # 2+ named and --keep-last-step: all of them
    ONE_STEP = "only one step"         # HTA applies no filter: the whole trace on GPU
    NO_STEPS = "no ProfilerStep"       # the whole trace, as one step

    @classmethod
    def decide(cls, step_names: set[str], keep_last_step: bool) -> LastStep:
        if len(step_names) >= 2:
            return cls.KEPT if keep_last_step else cls.DROPPED
        return cls.ONE_STEP if step_names else cls.NO_STEPS

    def analyzed(self, steps: Steps) -> Steps:
        """The steps of the window, of a run's ``steps`` in the order they ran: all but the
        last when dropped, none without ProfilerSteps, else all."""
        if self == LastStep.DROPPED:
            return steps[:-1]
        return steps[:0] if self == LastStep.NO_STEPS else steps

    @property
    def filters(self) -> bool:
        return self in (LastStep.DROPPED, LastStep.KEPT)
