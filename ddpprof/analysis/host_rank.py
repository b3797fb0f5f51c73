"""One CPU (gloo) rank's metrics, over host lanes: compute, communication and waits per
thread inside the analyzed ProfilerSteps. Pure."""

from __future__ import annotations

import numpy as np

from ..core.errors import TraceError
from ..metrics import intervals as iv
from ..metrics.breakdown import (
    host_breakdown,
)
from ..metrics.comm import collective_stats
from ..metrics.dispatch import tiny_op_stretches
from ..metrics.groups import group_figures
from ..metrics.middle import middle_index
from ..trace import classify
from ..trace.calls import collective_calls, issued_kinds
from ..trace.events import RankTrace
from ..trace.last_step import LastStep
from . import tax
from .buckets import BucketTimeline
from .options import AnalysisOptions
from .parts import host_parts
from .rank_common import (
    compute_lane,
    dataloader_us,
    nothing_to_measure,
    overlap_by_kind,
    step_buckets,
    timeline_lanes,
)
from .results import HostSignals, RankResult, StepRow, Timeline


class HostAnalysis:
    def __init__(self, trace: RankTrace, stream: np.ndarray, last_step: LastStep,
                 analyzed: np.ndarray, options: AnalysisOptions) -> None:
        self.trace, self.last_step, self.analyzed, self.options = (
            trace, last_step, analyzed, options)
        self.lanes = classify.host_lanes(trace, stream)
        s, e = trace.start_us, trace.end_us     # the CPU path is never rounded
        self.waits = iv.union(s[self.lanes.waits], e[self.lanes.waits])
        self.compute = compute_lane(trace, self.lanes)
        self.comm = iv.union(s[self.lanes.comm], e[self.lanes.comm])
        self._issued = issued_kinds(trace, np.flatnonzero(self.lanes.comm))

    def _window(self) -> iv.Intervals:
        trace = self.trace
        if self.analyzed.size:
            return iv.union(trace.start_us[self.analyzed], trace.end_us[self.analyzed])
        active = self.lanes.any
        if not active.any():
            raise nothing_to_measure(trace)
        return iv.union(np.array([trace.start_us[active].min()]),
                        np.array([trace.end_us[active].max()]))

    def result(self, rank: int) -> RankResult:
        trace = self.trace
        window = self._window()
        activity = iv.merge(iv.merge(self.compute, self.waits), self.comm)
        if window[0].size == 0 or iv.length(iv.intersect(activity, window)) == 0:
            raise TraceError(trace.path, "nothing in the analyzed window (no events inside the "
                                         "analyzed ProfilerSteps)")
        breakdown = host_breakdown(window, self.compute, self.comm, self.waits)
        s = trace.start_us
        in_window = self.lanes.comm & (s >= window[0][0]) & (s < window[1][-1])
        calls = collective_calls(trace, np.flatnonzero(in_window), trace.start_us,
                                 trace.end_us, self._issued, with_groups=True)
        compute = iv.intersect(self.compute, window)
        return RankResult(
            path=str(trace.path), rank=rank, world_size=trace.world_size,
            backend=trace.backend, kind="cpu", last_step=self.last_step,
            steps=max(int(self.analyzed.size), 1), total_steps=0, breakdown=breakdown,
            collectives=collective_stats(calls), overlap_by_kind=overlap_by_kind(calls, compute),
            process_groups=group_figures(calls, compute),
            calls=calls, per_step=self._per_step(window),
            timeline=self._timeline(window) if self.options.timeline else None,
            buckets=self._buckets(), host=HostSignals(
                dataloader_us(trace, window), None, iv.length(iv.intersect(tiny_op_stretches(
                    trace.start_us[self.lanes.work], trace.end_us[self.lanes.work],
                    trace.thread_id[self.lanes.work]), window))),
            tax_samples=tax.host_samples(trace, self.lanes, self.analyzed, compute,
                                         calls.start_us),
            parts=host_parts(trace, self.lanes, window, self.analyzed, calls))

    def _per_step(self, window: iv.Intervals) -> list[StepRow]:
        if not self.options.per_step:
            return []
        trace = self.trace
        if self.analyzed.size == 0:
            return [StepRow("whole trace", host_breakdown(window, self.compute, self.comm,
                                                          self.waits))]
        rows = []
        for step in self.analyzed.tolist():
            # each lane cut to the step first: a step's cost does not grow with the trace
            lo, hi = float(trace.start_us[step]), float(trace.end_us[step])
            rows.append(StepRow(trace.names[trace.name_id[step]], host_breakdown(
                iv.union(np.array([lo]), np.array([hi])), iv.window(self.compute, lo, hi),
                iv.window(self.comm, lo, hi), iv.window(self.waits, lo, hi))))
        return rows

    def _buckets(self) -> BucketTimeline | None:
        """The middle analyzed step's buckets: the collective spans that start in it."""
        trace = self.trace
        if self.analyzed.size == 0:
            return None
        step = self.analyzed[middle_index(self.analyzed.size)]
        s = trace.start_us
        inside = self.lanes.comm & (s >= s[step]) & (s < trace.end_us[step])
        return step_buckets(trace, step, np.flatnonzero(inside), s, trace.end_us,
                                self._issued)

    def _timeline(self, window: iv.Intervals) -> Timeline | None:
        trace = self.trace
        if self.analyzed.size:
            step = self.analyzed[middle_index(self.analyzed.size)]
            lo, hi = float(trace.start_us[step]), float(trace.end_us[step])
            label = trace.names[trace.name_id[step]]
        else:
            lo, hi, label = float(window[0][0]), float(window[1][-1]), "whole trace"
        s, e = trace.start_us, trace.end_us
        inside = np.flatnonzero(self.lanes.comm & (s < hi) & (e > lo))
        step_compute = iv.intersect(self.compute, (np.array([lo]), np.array([hi])))
        return timeline_lanes(trace, label, lo, hi, step_compute, inside, s, e)

