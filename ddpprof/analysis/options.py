"""What the user asked of an analysis: one object, passed down unchanged (which profiled steps
it covers is :class:`ddpprof.trace.last_step.LastStep`)."""

from __future__ import annotations

from dataclasses import dataclass

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
