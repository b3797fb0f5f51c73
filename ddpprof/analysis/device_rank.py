"""One GPU rank's metrics: the device events HTA 0.5.0 analyzes (device records launched by
the analyzed steps), their breakdown, collectives, per-step rows, buckets and timeline.
Pure."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..core.errors import TraceError
from ..metrics import intervals as iv
from ..metrics.breakdown import (
    Breakdown,
    DeviceSets,
    device_breakdown,
    device_sets,
    hta_device_breakdown,
    hta_sort_dtype,
)
from ..metrics.comm import CollectiveCalls, collective_stats
from ..metrics.groups import group_figures
from ..metrics.middle import middle_index
from ..trace import classify
from ..trace.calls import collective_calls
from ..trace.classify import Kind
from ..trace.events import RankTrace, launch_times
from ..trace.last_step import LastStep
from ..trace.structure import StructuralComm, launching_host_event, structural_comm
from . import tax
from .buckets import BucketTimeline
from .options import AnalysisOptions
from .parts import device_parts, device_step_bounds
from .rank_common import (
    dataloader_us,
    event_times,
    nothing_to_measure,
    overlap_by_kind,
    step_buckets,
    timeline_lanes,
)
from .results import HostSignals, RankResult, StepRow, Timeline


class DeviceAnalysis:
    def __init__(self, trace: RankTrace, stream: np.ndarray, last_step: LastStep,
                 steps: np.ndarray, analyzed: np.ndarray, options: AnalysisOptions) -> None:
        """``steps``: the trace's host ProfilerSteps (``classify.profiler_steps``),
        ``analyzed``: those ``last_step`` keeps."""
        self.trace, self.stream, self.last_step = trace, stream, last_step
        self.steps, self.analyzed, self.options = steps, analyzed, options
        self.notes: list[str] = []
        self.start, self.end = event_times(trace, options.hta_compat)
        classifier = classify.KernelClassifier(options.comm_kernels, options.hta_compat)
        self.kinds = classify.kernel_kinds(trace, classifier)
        self.selected, self.host_kept = self._select()
        self.structural = StructuralComm(np.zeros(trace.n_events, dtype=bool))
        if options.structural_comm and not options.hta_compat:
            self.structural = structural_comm(trace, stream, self.kinds, self.selected,
                                              self._launcher)
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
        """The analyzed events. With 2+ ProfilerSteps named: host events that start before
        the last host ProfilerStep starts (or, keeping it, by its end) and device events
        launched by one of them (same correlation id); otherwise every event. Either way only
        device records count (``stream != -1``). HTA 0.5.0 (``--hta-compat``) cuts at the
        latest start of any ProfilerStep span, its device-side copy (``gpu_user_annotation``,
        which starts when the device reaches the step) included."""
        trace, stream = self.trace, self.stream
        if not self.last_step.filters:
            return classify.on_device(stream), np.ones(trace.n_events, dtype=bool)
        device = classify.device_kernels(trace, stream)
        host = ~device
        if self.options.hta_compat:
            step_spans = host & classify.is_step_span(trace)
        else:
            step_spans = np.zeros(trace.n_events, dtype=bool)
            step_spans[self.steps] = True
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
            raise nothing_to_measure(trace)
        host_comm_events = self._host_collectives()
        host_comm = iv.union(trace.start_us[host_comm_events], trace.end_us[host_comm_events])
        # the breakdown's interval sets, measured once: the host signals and the compute
        # beside the collectives are of the same events (not --hta-compat's arithmetic)
        sets = None if self.options.hta_compat else self._sets_of_rows(
            self.order[sel[self.order]], host_comm)
        breakdown = sets.breakdown() if sets is not None else self._breakdown_of(sel, host_comm)
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
            compute = sets.compute if sets is not None else iv.union(
                self.start[is_compute], self.end[is_compute])
            if note := self.structural.note(trace, self.start, self.end):
                self.notes.append(note)
            self._note_classification(sel, host_comm_events)
            self._note_device_steps()
            samples = tax.device_samples(trace, self.stream, is_compute, call_events, self.start,
                                         self._launch_positions if self.analyzed.size else
                                         np.zeros(trace.n_events, np.int64), compute)
            return RankResult(
                path=str(trace.path), rank=rank, world_size=trace.world_size,
                backend=trace.backend, kind="gpu", last_step=self.last_step,
                steps=max(int(self.analyzed.size), 1), total_steps=0, breakdown=breakdown,
                collectives=collective_stats(calls), overlap_by_kind=overlap_by_kind(
                    calls, compute), process_groups=group_figures(calls, compute), calls=calls,
                per_step=self._per_step(),
                timeline=self._timeline(compute) if self.options.timeline else None,
                buckets=self._buckets(), host=self._host_signals(sel, host_comm, sets),
                notes=self.notes, tax_samples=samples, parts=parts.result())

    def _host_signals(self, sel: np.ndarray, host_comm: iv.Intervals,
                      sets: DeviceSets | None) -> HostSignals:
        """Device idle time during which host ops or launch calls ran (the CPU could not keep
        the device fed), and time in the data loader, both inside the window (``sets``: the
        breakdown's, where it made them)."""
        trace = self.trace
        if sets is None:        # --hta-compat: its breakdown is HTA's arithmetic, not sets
            sets = self._sets_of_rows(np.flatnonzero(sel), host_comm)
            assert sets is not None     # result() has made sure of some event
        busy = sets.busy
        window = (np.array([sets.first_us]), np.array([sets.last_us]))   # as the breakdown's
        idle = iv.subtract(window, busy)
        issuing = (self.stream < 0) & classify.per_category(
            trace, lambda c: c in classify.HOST_ISSUE_CATEGORIES) & ~classify.is_step_span(trace)
        host = iv.union(trace.start_us[issuing], trace.end_us[issuing])
        return HostSignals(dataloader_us(trace, window),
                           iv.length(iv.intersect(idle, host)))

    def _host_collectives(self) -> np.ndarray:
        """Collectives that run on the host (gloo with CUDA tensors): communication with no
        kernel, which HTA cannot see. Not in ``--hta-compat``."""
        if self.options.hta_compat or not classify.host_backend_moves_device_data(
                self.trace.backend):
            return np.zeros(self.trace.n_events, dtype=bool)
        on_host = classify.per_name(self.trace, classify.runs_on_host)
        result: np.ndarray = on_host & (self.stream < 0) & self.host_kept & classify.per_category(
            self.trace, lambda c: c in classify.HOST_WORK_CATEGORIES)
        return result

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
        # the names present, counted rather than sorted (an event per name is enough)
        names = {trace.names[i] for i in np.flatnonzero(np.bincount(trace.name_id[sel & (
            self.kinds != Kind.COMMUNICATION)], minlength=len(trace.names))).tolist()}
        suspected = classify.suspected_comm(names)
        if suspected:
            libraries = sorted(set(suspected.values()))
            sample = sorted(suspected)[0]
            self.notes.append(
                f"{len(suspected)} kernel names look like communication but are counted as "
                f"compute, as HTA does ({', '.join(libraries)}; e.g. {sample[:60]!r}); add "
                "--comm-kernel REGEX to count them as communication")

    @functools.cached_property
    def _launcher(self) -> np.ndarray:
        """Each event's launching host event (``structure.launching_host_event``), else -1."""
        return launching_host_event(self.trace, self.stream)

    @functools.cached_property
    def _launch_times(self) -> np.ndarray:
        return launch_times(self.stream, self.start, self._launcher)

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
        if not self.options.hta_compat:
            return self._per_device_step()
        # the selected events in HTA's row order, grouped by the step that launched them (a
        # stable sort keeps that order within each step): one pass, whatever the step count
        rows = self.order[sel[self.order]]
        position = self._launch_positions[rows]
        rows, position = rows[np.argsort(position, kind="stable")], np.sort(position)
        bounds = np.searchsorted(position, np.arange(self.analyzed.size + 1))
        return [StepRow(self.trace.names[self.trace.name_id[step]],
                        self._breakdown_of_rows(rows[bounds[k]:bounds[k + 1]]))
                for k, step in enumerate(self.analyzed.tolist())]

    def _per_device_step(self) -> list[StepRow]:
        """Each step's share of the device timeline: from where the first device record it
        launched started to where the next step's did (``parts.device_step_bounds``), every
        analyzed device record clipped to it. The steps tile the analyzed window."""
        sel, start, end = self.selected, self.start, self.end
        rows = np.flatnonzero(sel)
        bounds = device_step_bounds(start, sel & (self.stream >= 0), self._launch_positions,
                                    int(self.analyzed.size), float(start[rows].min()),
                                    float(end[rows].max()))
        found = []
        for k, step in enumerate(self.analyzed.tolist()):
            a, b = float(bounds[k]), float(bounds[k + 1])
            inside = rows[(start[rows] < b) & (end[rows] > a)]
            found.append(StepRow(self.trace.names[self.trace.name_id[step]], device_breakdown(
                np.clip(start[inside], a, b), np.clip(end[inside], a, b),
                self.kinds[inside] == Kind.COMPUTE, self.kinds[inside] == Kind.COMMUNICATION,
                window=(a, b))))
        return found

    def _note_device_steps(self) -> None:
        """Device records launched by nothing in the trace, and the GPU-side copies of the
        ProfilerSteps, if any: how they compare with where each step began on the device."""
        trace, stream = self.trace, self.stream
        device = classify.device_kernels(trace, stream)
        launched = self._launcher >= 0
        unlaunched = device & ~launched & ~classify.per_name(
            trace, lambda n: n in classify.GPU_SYNC_NAMES)
        if unlaunched.any() and launched.any() and self.last_step.filters:
            comm = int(np.count_nonzero(unlaunched & (self.kinds == Kind.COMMUNICATION)))
            self.notes.append(f"{int(unlaunched.sum())} device records ({comm} communication "
                              "kernels) have no launch in the trace (launched before the "
                              "profiler started, or missed by it): they belong to no analyzed "
                              "step and are matched with no other rank's calls")
        copies = classify.device_step_copies(trace)
        if copies.size and self.analyzed.size and not self.options.hta_compat:
            rows = np.flatnonzero(self.selected)
            bounds = device_step_bounds(self.start, self.selected & (stream >= 0),
                                        self._launch_positions, int(self.analyzed.size),
                                        float(self.start[rows].min()),
                                        float(self.end[rows].max()))
            names = {trace.names[trace.name_id[i]]: float(trace.start_us[i]) for i in copies}
            lag = [names[name] - float(bounds[k]) for k, name in enumerate(
                trace.names[trace.name_id[i]] for i in self.analyzed.tolist()) if name in names]
            agree = sum(abs(x) < 1.0 for x in lag)
            if lag:
                self.notes.append(
                    "steps cut on the device where each step's first device record started; "
                    "the trace's GPU-side ProfilerStep copies (gpu_user_annotation) start "
                    + ("there on every step" if agree == len(lag) else
                       f"there on {agree} of {len(lag)} steps, up to {max(lag) / 1e3:.2f} ms "
                       "later on the others (they begin at the first kernel launched directly "
                       "in the step)"))

    def _breakdown_of(self, mask: np.ndarray, host_comm: iv.Intervals = iv.EMPTY) -> Breakdown:
        """The breakdown of the events in ``mask`` (taken in HTA's row order)."""
        return self._breakdown_of_rows(self.order[mask[self.order]], host_comm)

    def _sets_of_rows(self, rows: np.ndarray, host_comm: iv.Intervals) -> DeviceSets | None:
        return device_sets(self.start[rows], self.end[rows], self.kinds[rows] == Kind.COMPUTE,
                           self.kinds[rows] == Kind.COMMUNICATION, host_comm)

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
        middle = middle_index(self.analyzed.size)
        mine = self.selected & (self._launch_positions == middle) & (
            self.kinds == Kind.COMMUNICATION)
        return step_buckets(trace, self.analyzed[middle], np.flatnonzero(mine), self.start,
                            self.end)

    def _timeline(self, compute: iv.Intervals) -> Timeline | None:
        trace, sel = self.trace, self.selected
        if self.analyzed.size:
            middle = middle_index(self.analyzed.size)
            mine = sel & (self._launch_positions == middle)
            label = trace.names[trace.name_id[self.analyzed[middle]]]
        else:
            mine, label = sel, "whole trace"
        if not mine.any():
            return None
        origin, finish = float(self.start[mine].min()), float(self.end[mine].max())
        comm_index = np.flatnonzero(mine & (self.kinds == Kind.COMMUNICATION))
        step_compute = iv.intersect(compute, (np.array([origin]), np.array([finish])))
        return timeline_lanes(trace, label, origin, finish, step_compute, comm_index, self.start,
                      self.end)

