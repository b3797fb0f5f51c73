"""One rank's metrics, from its loaded trace: which events are analyzed, their breakdown, the
collectives, per-step rows and the timeline. Pure: no I/O.

GPU traces (any event with a device stream) are analyzed over device events as HTA 0.5.0
does; CPU traces over host lanes (see ``ddpprof.metrics.breakdown``).
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import TraceError
from ..metrics import intervals as iv
from ..metrics.breakdown import (
    Breakdown,
    device_breakdown,
    host_breakdown,
    hta_device_breakdown,
    hta_sort_dtype,
    overlap_pct,
)
from ..metrics.comm import CollectiveCalls, collective_stats
from ..metrics.dispatch import tiny_op_stretches
from ..metrics.groups import group_figures
from ..trace import classify
from ..trace.classify import Kind
from ..trace.events import RankTrace, launch_times
from ..trace.structure import StructuralComm, structural_comm
from . import tax
from .buckets import BucketTimeline, bucket_timeline
from .calls import collective_calls, issued_kinds
from .options import AnalysisOptions, LastStep
from .parts import device_parts, host_parts
from .results import CommBar, HostSignals, RankResult, StepRow, Timeline

#: Collectives that reduce gradients: what a bucket is launched as.
GRADIENT_REDUCTIONS = ("all_reduce", "reduce_scatter")
#: The timeline of one step keeps at most this many communication bars (a whole-trace window
#: can hold tens of thousands); the page says how many were left out.
MAX_TIMELINE_BARS = 2000


def event_times(trace: RankTrace, hta_rounding: bool) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every event in µs: as recorded, or, with ``hta_rounding`` and a trace
    whose timestamps are not all JSON integers (Kineto's ns output), rounded inward to whole
    µs as HTA 0.5.0 does by default (start up, end down; a sub-µs event can end before it
    starts)."""
    if hta_rounding and not trace.timestamps_are_integers:
        return np.ceil(trace.start_us), np.floor(trace.end_us)
    return trace.start_us, trace.end_us


def analyze_rank(trace: RankTrace, rank: int, last_step: LastStep,
                 options: AnalysisOptions) -> RankResult:
    """All metrics of one rank, covering what ``last_step`` says (decided by the run)."""
    stream = classify.streams(trace)
    steps, _ = classify.profiler_steps(trace, stream)
    analyzed = last_step.analyzed(steps)
    if classify.is_gpu_trace(stream):
        result = _DeviceAnalysis(trace, stream, last_step, analyzed, options).result(rank)
    else:
        result = _HostAnalysis(trace, stream, last_step, analyzed, options).result(rank)
    result.total_steps = int(steps.size)
    if trace.dropped_events:
        result.notes.append(f"{trace.dropped_events} complete events without a start or a "
                            "duration were skipped")
    return result


def _nothing_to_measure(trace: RankTrace) -> TraceError:
    if trace.n_events == 0:
        return TraceError(trace.path, "nothing to measure: no complete events (only metadata, "
                                      "counters or instants)")
    return TraceError(trace.path, "nothing to measure: no device kernels and no host ops "
                                  "with a duration")


class _DeviceAnalysis:
    def __init__(self, trace: RankTrace, stream: np.ndarray, last_step: LastStep,
                 analyzed: np.ndarray, options: AnalysisOptions) -> None:
        self.trace, self.stream, self.last_step = trace, stream, last_step
        self.analyzed, self.options = analyzed, options
        self.notes: list[str] = []
        self.start, self.end = event_times(trace, options.hta_compat)
        classifier = classify.KernelClassifier(options.comm_kernels, options.hta_compat)
        self.kinds = classify.kernel_kinds(trace, classifier)
        self.selected, self.host_kept = self._select()
        self.structural = StructuralComm(np.zeros(trace.n_events, dtype=bool))
        if options.structural_comm and not options.hta_compat:
            self.structural = structural_comm(trace, stream, self.kinds, self.selected)
            self.kinds[self.structural.mask] = Kind.COMMUNICATION
        self.order = self._hta_row_order()

    def _hta_row_order(self) -> np.ndarray:
        """The selected events in HTA's row order: launched device events, then the other
        events with a stream, each in file order (its ``pd.concat`` of the two filters).
        Only ``--hta-compat`` depends on it (see ``hta_merge``)."""
        if not self.last_step.filters:
            return np.flatnonzero(self.selected)
        device = classify.device_kernels(self.trace, self.stream)
        return np.concatenate([np.flatnonzero(self.selected & device),
                               np.flatnonzero(self.selected & ~device)])

    def _select(self) -> tuple[np.ndarray, np.ndarray]:
        """HTA 0.5.0's analyzed events. With 2+ ProfilerSteps named: host events that start
        before the last step starts (or, keeping it, by its end) and device events launched by
        one of them (same correlation id); otherwise every event. Either way only events with
        a stream count (``stream != -1``)."""
        trace, stream = self.trace, self.stream
        if not self.last_step.filters:
            return classify.on_device(stream), np.ones(trace.n_events, dtype=bool)
        device = classify.device_kernels(trace, stream)
        host = ~device
        step_spans = host & classify.is_step_span(trace)
        if not step_spans.any():   # steps named by device events only: no host step to cut at
            return classify.on_device(stream), np.ones(trace.n_events, dtype=bool)
        if self.last_step == LastStep.DROPPED:
            host_kept = host & (self.start < self.start[step_spans].max())
        else:
            host_kept = host & (self.start <= self.end[step_spans].max())
        device_kept = device & self._launched_by(host_kept, device)
        return (device_kept | host_kept) & classify.on_device(stream), host_kept

    def _launched_by(self, host_kept: np.ndarray, device: np.ndarray) -> np.ndarray:
        """Device events whose launching host event is kept: by correlation id (HTA's rule);
        for traces whose host events carry none (older Kineto), by ``External id``; failing
        both, by the device event's own start."""
        trace = self.trace
        host_ids = ~device & trace.has_correlation
        if host_ids.any():
            return np.isin(trace.correlation, trace.correlation[host_kept & host_ids])
        external = (trace.external_id >= 0) & ~device
        if external.any() and np.any(trace.external_id[device] >= 0):
            self.notes.append("host events carry no correlation ids: device events were "
                              "matched to their launching ops by External id")
            return np.isin(trace.external_id, trace.external_id[host_kept & external])
        self.notes.append("device events could not be matched to host launches: they were "
                          "selected by their own start time")
        limit = self.start[host_kept].max() if host_kept.any() else -np.inf
        return self.start <= limit

    def result(self, rank: int) -> RankResult:
        trace, sel, order = self.trace, self.selected, self.order
        if not order.size:
            if self.last_step.filters:
                raise TraceError(trace.path, "nothing in the analyzed window (no device events "
                                             "launched by the analyzed ProfilerSteps)")
            raise _nothing_to_measure(trace)
        host_comm_events = self._host_collectives()
        host_comm = iv.union(trace.start_us[host_comm_events], trace.end_us[host_comm_events])
        breakdown = self._breakdown_of(sel, host_comm)
        if breakdown.window_us <= 0:
            raise TraceError(trace.path, "nothing in the analyzed window (the analyzed device "
                                         "events take no time)")
        if breakdown.non_compute_us < 0:
            self.notes.append("HTA's rounding makes non-compute time negative on this trace "
                              "(HTA 0.5.0 itself fails an assertion here); the default, "
                              "unrounded numbers are the true ones")
        call_events = sel & (self.kinds == Kind.COMMUNICATION) | host_comm_events
        calls = self._calls(call_events)
        # The parts (for diff) are the largest piece of work here, mostly numpy that leaves
        # the interpreter's lock: a second thread computes them meanwhile.
        with ThreadPoolExecutor(1) as pool:
            parts = pool.submit(device_parts, trace, self.stream, self.start, self.end, sel,
                                self.kinds, self._launch_times, self._launch_positions,
                                self.analyzed, calls)
            is_compute = sel & (self.kinds == Kind.COMPUTE)
            compute = iv.union(self.start[is_compute], self.end[is_compute])
            if note := self.structural.note(trace, self.start, self.end):
                self.notes.append(note)
            self._note_classification(sel, host_comm_events)
            samples = tax.device_samples(trace, self.stream, is_compute, call_events, self.start,
                                         self._launch_positions if self.analyzed.size else
                                         np.zeros(trace.n_events, np.int64), compute)
            return RankResult(
                path=str(trace.path), rank=rank, world_size=trace.world_size,
                backend=trace.backend, kind="gpu", last_step=self.last_step,
                steps=max(int(self.analyzed.size), 1), total_steps=0, breakdown=breakdown,
                collectives=collective_stats(calls), overlap_by_kind=_overlap_by_kind(
                    calls, compute), process_groups=group_figures(calls, compute), calls=calls,
                per_step=self._per_step(),
                timeline=self._timeline(compute) if self.options.timeline else None,
                buckets=self._buckets(), host=self._host_signals(sel, host_comm),
                notes=self.notes, tax_samples=samples, parts=parts.result())

    def _host_signals(self, sel: np.ndarray, host_comm: iv.Intervals) -> HostSignals:
        """Device idle time during which host ops or launch calls ran (the CPU could not keep
        the device fed), and time in the data loader, both inside the window."""
        trace = self.trace
        busy = iv.merge(iv.union(self.start[sel], self.end[sel]), host_comm)
        starts = np.concatenate([self.start[sel], host_comm[0]])
        ends = np.concatenate([self.end[sel], host_comm[1]])
        window = (np.array([starts.min()]), np.array([ends.max()]))   # as the breakdown's
        idle = iv.subtract(window, busy)
        issuing = (self.stream < 0) & classify.per_category(
            trace, lambda c: c in classify.HOST_ISSUE_CATEGORIES) & ~classify.is_step_span(trace)
        host = iv.union(trace.start_us[issuing], trace.end_us[issuing])
        return HostSignals(_dataloader_us(trace, window),
                           iv.length(iv.intersect(idle, host)))

    def _host_collectives(self) -> np.ndarray:
        """Collectives that run on the host (gloo with CUDA tensors): communication with no
        kernel, which HTA cannot see. Not in ``--hta-compat``."""
        if self.options.hta_compat or not classify.host_backend_moves_device_data(
                self.trace.backend):
            return np.zeros(self.trace.n_events, dtype=bool)
        on_host = classify.per_name(self.trace, classify.runs_on_host)
        return on_host & (self.stream < 0) & self.host_kept & classify.per_category(
            self.trace, lambda c: c in classify.HOST_WORK_CATEGORIES)

    def _calls(self, events: np.ndarray) -> CollectiveCalls:
        return collective_calls(self.trace, np.flatnonzero(events), self.start, self.end,
                                self.structural.collective, with_groups=True,
                                by_structure=self.structural.mask)

    def _note_classification(self, sel: np.ndarray, host_comm: np.ndarray) -> None:
        trace = self.trace
        if host_comm.any():
            self.notes.append(f"{int(host_comm.sum())} collectives ran on the host (gloo): "
                              "counted as communication beside the device kernels")
        comm_kernels = sel & (self.kinds == Kind.COMMUNICATION)
        backend_spans = classify.per_name(trace, classify.names_device_backend_span)
        orphans = backend_spans & self.host_kept & (self.stream < 0)
        if not comm_kernels.any() and orphans.any() and (trace.world_size or 2) > 1:
            backend = classify.host_backend(trace.names[trace.name_id[np.argmax(orphans)]])
            self.notes.append(f"the trace has {int(orphans.sum())} {backend}:* host spans but "
                              "no communication kernels (a filtered or edited trace?): the "
                              "device breakdown has no communication")
        if not self.options.hta_compat:
            hta_comm = classify.per_name(trace, lambda n: bool(classify.HTA_COMM_KERNEL.match(n)))
            widened = comm_kernels & ~hta_comm & ~self.structural.mask
            if widened.any():
                time_ms = float(np.sum(self.end[widened] - self.start[widened])) / 1e3
                self.notes.append(f"{int(widened.sum())} kernels ({time_ms:.2f} ms) that HTA "
                                  "counts as compute are communication here (see "
                                  "COMM_KERNEL_PATTERNS); --hta-compat counts them as HTA does")
        names = {trace.names[i] for i in np.unique(trace.name_id[sel & (
            self.kinds != Kind.COMMUNICATION)])}
        suspected = classify.suspected_comm(names)
        if suspected:
            libraries = sorted(set(suspected.values()))
            sample = sorted(suspected)[0]
            self.notes.append(
                f"{len(suspected)} kernel names look like communication but are counted as "
                f"compute, as HTA does ({', '.join(libraries)}; e.g. {sample[:60]!r}); add "
                "--comm-kernel REGEX to count them as communication")

    @functools.cached_property
    def _launch_times(self) -> np.ndarray:
        return launch_times(self.trace, self.stream, self.start)

    @functools.cached_property
    def _launch_positions(self) -> np.ndarray:
        """For every event, the position in ``analyzed`` of the step its launching host event
        started in (device events are matched to host events by correlation id), else -1."""
        steps = self.analyzed
        if not steps.size:
            return np.full(self.start.size, -1)
        launch = self._launch_times
        step_start, step_end = self.start[steps], self.end[steps]
        position = np.searchsorted(step_start, launch, side="right") - 1
        inside = (position >= 0) & (launch < step_end[np.clip(position, 0, None)])
        return np.where(inside & ~np.isnan(launch), position, -1)

    def _per_step(self) -> list[StepRow]:
        if not self.options.per_step:
            return []
        sel = self.selected
        if self.analyzed.size == 0:
            return [StepRow("whole trace", self._breakdown_of(sel))]
        # the selected events in HTA's row order, grouped by the step that launched them (a
        # stable sort keeps that order within each step): one pass, whatever the step count
        rows = self.order[sel[self.order]]
        position = self._launch_positions[rows]
        rows, position = rows[np.argsort(position, kind="stable")], np.sort(position)
        bounds = np.searchsorted(position, np.arange(self.analyzed.size + 1))
        return [StepRow(self.trace.names[self.trace.name_id[step]],
                        self._breakdown_of_rows(rows[bounds[k]:bounds[k + 1]]))
                for k, step in enumerate(self.analyzed.tolist())]

    def _breakdown_of(self, mask: np.ndarray, host_comm: iv.Intervals = iv.EMPTY) -> Breakdown:
        """The breakdown of the events in ``mask`` (taken in HTA's row order)."""
        return self._breakdown_of_rows(self.order[mask[self.order]], host_comm)

    def _breakdown_of_rows(self, rows: np.ndarray, host_comm: iv.Intervals = iv.EMPTY
                           ) -> Breakdown:
        """The breakdown of the events ``rows`` (indices, in HTA's row order)."""
        is_compute = self.kinds[rows] == Kind.COMPUTE
        is_comm = self.kinds[rows] == Kind.COMMUNICATION
        if self.options.hta_compat:
            dtype = hta_sort_dtype(*self.trace.ts_range, self.trace.ts_missing) if not (
                self.trace.timestamps_are_integers) else None
            return hta_device_breakdown(self.start[rows], self.end[rows], is_compute, is_comm,
                                        dtype)
        return device_breakdown(self.start[rows], self.end[rows], is_compute, is_comm,
                                host_comm)

    def _buckets(self) -> BucketTimeline | None:
        """The middle analyzed step's buckets: the all-reduce kernels it launched."""
        trace = self.trace
        if self.analyzed.size == 0:
            return None
        middle = self.analyzed[self.analyzed.size // 2]
        mine = self.selected & (self._launch_positions == self.analyzed.size // 2) & (
            self.kinds == Kind.COMMUNICATION)
        return _bucket_timeline(trace, middle, np.flatnonzero(mine), self.start, self.end)

    def _timeline(self, compute: iv.Intervals) -> Timeline | None:
        trace, sel = self.trace, self.selected
        if self.analyzed.size:
            middle = self.analyzed.size // 2
            mine = sel & (self._launch_positions == middle)
            label = trace.names[trace.name_id[self.analyzed[middle]]]
        else:
            mine, label = sel, "whole trace"
        if not mine.any():
            return None
        origin, finish = float(self.start[mine].min()), float(self.end[mine].max())
        comm_index = np.flatnonzero(mine & (self.kinds == Kind.COMMUNICATION))
        step_compute = iv.intersect(compute, (np.array([origin]), np.array([finish])))
        return _lanes(trace, label, origin, finish, step_compute, comm_index, self.start,
                      self.end)


class _HostAnalysis:
    def __init__(self, trace: RankTrace, stream: np.ndarray, last_step: LastStep,
                 analyzed: np.ndarray, options: AnalysisOptions) -> None:
        self.trace, self.last_step, self.analyzed, self.options = (
            trace, last_step, analyzed, options)
        self.lanes = classify.host_lanes(trace, stream)
        s, e = trace.start_us, trace.end_us     # the CPU path is never rounded
        self.waits = iv.union(s[self.lanes.waits], e[self.lanes.waits])
        self.compute = _compute_lane(trace, self.lanes)
        self.comm = iv.union(s[self.lanes.comm], e[self.lanes.comm])
        self._issued = issued_kinds(trace, np.flatnonzero(self.lanes.comm))

    def _window(self) -> iv.Intervals:
        trace = self.trace
        if self.analyzed.size:
            return iv.union(trace.start_us[self.analyzed], trace.end_us[self.analyzed])
        active = self.lanes.any
        if not active.any():
            raise _nothing_to_measure(trace)
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
            collectives=collective_stats(calls), overlap_by_kind=_overlap_by_kind(calls, compute),
            process_groups=group_figures(calls, compute),
            calls=calls, per_step=self._per_step(window),
            timeline=self._timeline(window) if self.options.timeline else None,
            buckets=self._buckets(), host=HostSignals(
                _dataloader_us(trace, window), None, iv.length(iv.intersect(tiny_op_stretches(
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
        step = self.analyzed[self.analyzed.size // 2]
        s = trace.start_us
        inside = self.lanes.comm & (s >= s[step]) & (s < trace.end_us[step])
        return _bucket_timeline(trace, step, np.flatnonzero(inside), s, trace.end_us,
                                self._issued)

    def _timeline(self, window: iv.Intervals) -> Timeline | None:
        trace = self.trace
        if self.analyzed.size:
            step = self.analyzed[self.analyzed.size // 2]
            lo, hi = float(trace.start_us[step]), float(trace.end_us[step])
            label = trace.names[trace.name_id[step]]
        else:
            lo, hi, label = float(window[0][0]), float(window[1][-1]), "whole trace"
        s, e = trace.start_us, trace.end_us
        inside = np.flatnonzero(self.lanes.comm & (s < hi) & (e > lo))
        step_compute = iv.intersect(self.compute, (np.array([lo]), np.array([hi])))
        return _lanes(trace, label, lo, hi, step_compute, inside, s, e)


def _dataloader_us(trace: RankTrace, window: iv.Intervals) -> float:
    loading = classify.per_name(trace, lambda n: bool(classify.DATALOADER.search(n)))
    return iv.length(iv.intersect(iv.union(trace.start_us[loading], trace.end_us[loading]),
                                  window))


def _bucket_timeline(trace: RankTrace, step: int, comm_index: np.ndarray, start: np.ndarray,
                     end: np.ndarray, kinds_by_event: dict[int, str] | None = None
                     ) -> BucketTimeline | None:
    """One step's gradient reductions (all-reduces, or ZeRO's reduce-scatters) as buckets,
    against its gradients' ``AccumulateGrad`` spans."""
    calls = collective_calls(trace, comm_index, start, end, kinds_by_event)
    kinds = {calls.kind[k] for k in range(calls.n)} & set(GRADIENT_REDUCTIONS)
    # one kind: a variant reduces gradients one way (FSDP's reduce-scatters, DDP's all-reduces)
    kind = next((k for k in GRADIENT_REDUCTIONS if k in kinds), None)
    reduces = [k for k in range(calls.n) if calls.kind[k] == kind]
    if not reduces:
        return None
    lo, hi = trace.start_us[step], trace.end_us[step]
    grads = np.array(sorted((i for i in trace.grad_bytes
                             if lo <= trace.start_us[i] < hi), key=lambda i: trace.end_us[i]),
                     dtype=np.int64)
    return bucket_timeline(
        trace.names[trace.name_id[step]], float(lo), trace.end_us[grads], trace.start_us[grads],
        [trace.grad_bytes[int(i)] for i in grads], calls.start_us[reduces],
        calls.end_us[reduces], [calls.size_bytes[k] for k in reduces])


def _compute_lane(trace: RankTrace, lanes: classify.HostLanes) -> iv.Intervals:
    """C = ⋃ over threads of (that thread's work spans minus its own wait spans): a thread
    blocked in a collective computes nothing meanwhile, while other threads may."""
    s, e, thread = trace.start_us, trace.end_us, trace.thread_id
    starts, ends = [], []
    for t in np.unique(thread[lanes.work]):
        mine = thread == t
        work = iv.subtract(iv.union(s[lanes.work & mine], e[lanes.work & mine]),
                           iv.union(s[lanes.waits & mine], e[lanes.waits & mine]))
        starts.append(work[0])
        ends.append(work[1])
    if not starts:
        return iv.EMPTY
    return iv.union(np.concatenate(starts), np.concatenate(ends))


def _overlap_by_kind(calls: CollectiveCalls, compute: iv.Intervals) -> dict[str, float | None]:
    """Per collective kind, the share of its time that compute hides."""
    result = {}
    for kind in sorted(set(calls.kind)):
        mine = np.array([k == kind for k in calls.kind])
        result[kind] = overlap_pct(compute, iv.union(calls.start_us[mine], calls.end_us[mine]))
    return result


def _lanes(trace: RankTrace, label: str, origin: float, finish: float, compute: iv.Intervals,
           comm_index: np.ndarray, start: np.ndarray, end: np.ndarray) -> Timeline:
    """One step as a picture: compute intervals and one bar per collective, in µs from the
    step's start."""
    calls = collective_calls(trace, comm_index, start, end)
    shown = min(calls.n, MAX_TIMELINE_BARS)
    bars = [CommBar(float(max(calls.start_us[k], origin) - origin),
                    float(min(calls.end_us[k], finish) - origin), calls.kind[k],
                    calls.size_bytes[k]) for k in range(shown)]
    return Timeline(step=label, window_us=finish - origin,
                    compute=[(float(a - origin), float(b - origin))
                             for a, b in zip(*compute, strict=True)],
                    comm=bars, truncated=calls.n - shown)
