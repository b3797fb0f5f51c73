"""Which profiled steps an analysis covers (:class:`LastStep`): the one rule ``analyze``,
``simulate``, ``critical-path`` and the recorded memory peaks share."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

import numpy as np

#: A run's steps in the order they ran: step numbers or event indices (arrays), or records.
Steps = TypeVar("Steps", np.ndarray, list[Any])


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
