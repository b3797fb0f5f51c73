"""One rank's metrics, from its loaded trace: which events are analyzed, their breakdown, the
collectives, per-step rows and the timeline. Pure: no I/O.

GPU traces (any device record) are analyzed over device events as HTA 0.5.0 does
(``device_rank``); CPU traces over host lanes (``host_rank``; see
``ddpprof.metrics.breakdown``).
"""

from __future__ import annotations

from ..trace import classify
from ..trace.events import RankTrace
from ..trace.last_step import LastStep
from ..trace.names import MAX_NAME_CHARS
from .device_rank import DeviceAnalysis
from .host_rank import HostAnalysis
from .options import AnalysisOptions
from .rank_common import event_times, trace_notes
from .results import RankResult

__all__ = ["analyze_rank", "event_times"]


def analyze_rank(trace: RankTrace, rank: int, last_step: LastStep,
                 options: AnalysisOptions) -> RankResult:
    """All metrics of one rank, covering what ``last_step`` says (decided by the run)."""
    stream = classify.streams(trace, options.hta_compat)
    steps, _ = classify.profiler_steps(trace, stream)
    analyzed = last_step.analyzed(steps)
    if classify.is_gpu_trace(stream):
        result = DeviceAnalysis(trace, stream, last_step, steps, analyzed, options).result(rank)
    else:
        result = HostAnalysis(trace, stream, last_step, analyzed, options).result(rank)
    result.total_steps = int(steps.size)
    result.notes.extend(trace_notes(trace, stream))
    if trace.dropped_events:
        result.notes.append(f"{trace.dropped_events} complete events without a start or a "
                            "duration were skipped")
    if trace.shortened_names:
        result.notes.append(f"{trace.shortened_names} event name(s) longer than "
                            f"{MAX_NAME_CHARS:,} characters shortened (their beginning, length "
                            "and a hash kept)")
    return result


