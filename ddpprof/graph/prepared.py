"""What every step graph of one rank needs of its trace, computed once per trace: the masks of
what each event is, each kernel's launch, the analyzed steps, and which events each step holds
(found by index, so that building every step of a long trace costs time linear in the trace,
not in its events times its steps). Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace import classify, comm_spans
from ..trace.classify import KernelClassifier
from ..trace.events import RankTrace
from ..trace.last_step import LastStep
from ..trace.structure import launching_host_event, nested_in


@dataclass(frozen=True)
class StepEvents:
    """One step's events (indices, in file order): ``host``, the host spans that overlap it;
    ``kernels``, the device records launched in it; ``inherited``, device records that run in
    it but were launched before it began (or before the profiler started: no launch in the
    trace)."""

    host: np.ndarray
    kernels: np.ndarray
    inherited: np.ndarray


@dataclass
class Prepared:
    """What every step of one rank needs, computed once per trace."""

    trace: RankTrace
    stream: np.ndarray
    host: np.ndarray             # host spans that are work on a thread
    kernels: np.ndarray          # device records on a stream
    kinds: np.ndarray            # kernel kinds (classify.Kind)
    host_comm: np.ndarray        # backend collectives that run on the host (gloo)
    waits: np.ndarray            # spans waiting for a host collective (gloo)
    syncs: np.ndarray            # host calls that wait for the device (``cudaStreamSynchronize``)
    issuing: np.ndarray          # launches and c10d ops: host work, also on a CPU run
    #: Host ops nested in a backend collective on their thread (gloo's own copies): part of
    #: the collective; nested in a span of communication or of waiting for it (``c10d::``
    #: ops, waits): host work. ``analyze`` counts neither as compute (``host_lanes``).
    in_host_comm: np.ndarray
    in_host_wait: np.ndarray
    gpu: bool
    launch_of: dict[int, int]    # kernel event -> its launch event
    #: A kernel that a cross-stream event wait held -> the kernel it waited for (see
    #: :func:`_event_waits`).
    waits_for: dict[int, int]
    #: When each device record was launched (see :func:`_launch_times`); host events: their
    #: own start.
    launched_at: np.ndarray
    issued_by: dict[int, int]    # backend span -> the c10d op that issued it
    steps: list[tuple[int, str, float, float, int]]  # (number, name, start, end, thread)
    bucket_copies: np.ndarray    # DDP's copies of reduced gradients out of their buckets
    gradients: np.ndarray        # the gradients' AccumulateGrad events
    by_step: list[StepEvents]    # each of ``steps``' events



def prepare(trace: RankTrace, keep_last_step: bool = False,
            classifier: KernelClassifier | None = None) -> Prepared:
    stream = classify.streams(trace)
    cats = classify.per_category
    host = (stream < 0) & cats(trace, lambda c: c in classify.HOST_ISSUE_CATEGORIES) & \
        ~classify.is_step_span(trace)
    kernels = classify.device_kernels(trace, stream) & (stream >= 0)
    kinds = classify.kernel_kinds(trace, classifier or KernelClassifier())
    host_comm = host & classify.per_name(trace, classify.runs_on_host)
    work = cats(trace, lambda c: c in classify.HOST_WORK_CATEGORIES)
    waits = host & work & classify.per_name(trace, lambda n: bool(classify.BLOCKING_WAIT.search(n)))
    syncs = host & ~work & classify.per_name(trace, classify.synchronizes_device)
    c10d = host & classify.per_name(trace, lambda n: bool(comm_spans.C10D_COLLECTIVE.match(n)))
    comm_or_wait = host & classify.per_name(trace, lambda n: bool(comm_spans.HOST_COMM.search(n)))
    issuing = c10d | (host & ~work) | comm_or_wait
    launcher = launching_host_event(trace, stream)
    launched = np.flatnonzero(kernels & (launcher >= 0))
    launch_of = dict(zip(launched.tolist(), launcher[launched].tolist(), strict=True))
    launched_at = _launch_times(trace, stream, kernels, launched, launcher)
    gpu = bool(kernels.any())
    # (on a GPU every host piece is host work: only a CPU run's ops can be compute)
    cpu_ops = np.zeros_like(host) if gpu else host
    in_host_comm = nested_in(trace, host_comm, cpu_ops)
    in_host_wait = nested_in(trace, comm_or_wait, cpu_ops)
    # an op on the span's own thread needs no edge of its own
    issued_by = {span: op for span, op in classify.issuing_ops(
        trace, np.flatnonzero(host_comm)).items()
        if trace.thread_id[span] != trace.thread_id[op]}
    index, numbers = classify.profiler_steps(trace, stream)
    last = LastStep.decide(classify.step_names(trace), keep_last_step)
    index, numbers = last.analyzed(index), last.analyzed(numbers)
    steps = [(int(n), trace.names[trace.name_id[i]], float(trace.start_us[i]),
              float(trace.end_us[i]), int(trace.thread_id[i]))
             for i, n in zip(index, numbers, strict=True)]
    if not steps and trace.n_events:
        busiest = int(np.bincount(trace.thread_id[host]).argmax()) if host.any() else 0
        steps = [(-1, "whole trace", float(trace.start_us.min()), float(trace.end_us.max()),
                  busiest)]
    gradients = np.zeros(trace.n_events, dtype=bool)
    gradients[list(trace.grad_bytes)] = True
    return Prepared(trace, stream, host, kernels, kinds, host_comm, waits, syncs, issuing,
                    in_host_comm, in_host_wait, gpu, launch_of,
                    _event_waits(trace, stream, launched, launcher), launched_at, issued_by, steps,
                    classify.per_name(trace, classify.copies_bucket_to_gradient), gradients,
                    _events_by_step(trace, steps, host, kernels, launched_at))


def _launch_times(trace: RankTrace, stream: np.ndarray, kernels: np.ndarray,
                  launched: np.ndarray, launcher: np.ndarray) -> np.ndarray:
    """When each device record was launched: its launch's start. A record with no launch in
    the trace (the profiler missed it, or it was launched before the profiler started) runs
    after the record before it on its stream, so it was launched no earlier: it takes that
    record's launch time; -inf where no launched record precedes it on its stream. A trace
    in which no record is matched to a launch keeps each record at its own start."""
    at = trace.start_us.copy()
    if not launched.size:
        return at
    at[kernels] = np.nan
    at[launched] = trace.start_us[launcher[launched]]
    device = np.flatnonzero(kernels)
    device = device[np.lexsort((trace.start_us[device], stream[device]))]
    for lane in np.unique(stream[device]).tolist():
        mine = device[stream[device] == lane]
        known = ~np.isnan(at[mine])
        # forward fill: each record takes the launch time of the last launched one before it
        last = np.maximum.accumulate(np.where(known, np.arange(mine.size), -1))
        filled = np.where(last >= 0, at[mine[np.clip(last, 0, None)]], -np.inf)
        at[mine] = np.where(known, at[mine], filled)
    return at


def _event_waits(trace: RankTrace, stream: np.ndarray, kernels: np.ndarray,
                 launcher: np.ndarray) -> dict[int, int]:
    """Cross-stream waits read from the host's calls: after ``cudaStreamWaitEvent`` on a
    thread, the next kernel that thread launches (on stream S) waits for the event, recorded
    (``cudaEventRecord``, the latest before the wait on that thread; else the wait itself)
    after the last kernel launched, by any thread, on a stream other than S. Kineto records
    neither call's stream: the waiting stream is that of the next launch, the recorded one
    is taken as any other."""
    waits = np.flatnonzero(classify.per_name(trace, classify.waits_on_event) & (stream < 0))
    if not waits.size or not kernels.size:
        return {}
    records = np.flatnonzero(classify.per_name(trace, classify.records_event) & (stream < 0))
    launch_start = trace.start_us[launcher[kernels]]
    order = np.argsort(launch_start, kind="stable")
    kernels, launch_start = kernels[order], launch_start[order]
    kernel_stream = stream[kernels]
    launch_thread = trace.thread_id[launcher[kernels]]
    by_thread = {int(t): np.flatnonzero(launch_thread == t) for t in np.unique(launch_thread)}
    record_at: dict[int, np.ndarray] = {}
    for thread in np.unique(trace.thread_id[records]).tolist():
        mine = records[trace.thread_id[records] == thread]
        record_at[thread] = np.sort(trace.start_us[mine])
    found: dict[int, int] = {}
    last_other: dict[int, np.ndarray] = {}
    for wait in waits.tolist():
        thread, at = int(trace.thread_id[wait]), float(trace.start_us[wait])
        mine = by_thread.get(thread)
        if mine is None:
            continue
        k = int(np.searchsorted(launch_start[mine], at, side="right"))
        if k == mine.size:
            continue
        waiter = int(mine[k])
        marks = record_at.get(thread, np.empty(0))
        r = int(np.searchsorted(marks, at, side="left"))
        mark = float(marks[r - 1]) if r else at
        j = int(np.searchsorted(launch_start, mark, side="left")) - 1
        waiting = int(kernel_stream[waiter])
        if waiting not in last_other:   # per position: the last launch to another stream
            last_other[waiting] = np.maximum.accumulate(np.where(
                kernel_stream != waiting, np.arange(kernel_stream.size), -1))
        j = int(last_other[waiting][j]) if j >= 0 else -1
        if j >= 0:
            found.setdefault(int(kernels[waiter]), int(kernels[j]))
    return found


def _events_by_step(trace: RankTrace, steps: list[tuple[int, str, float, float, int]],
                    host: np.ndarray, kernels: np.ndarray, launched_at: np.ndarray
                    ) -> list[StepEvents]:
    """Each step's events, found by binary search over the steps (ordered and disjoint)."""
    if not steps:
        return []
    lo = np.array([s[2] for s in steps])
    hi = np.array([s[3] for s in steps])
    host_index, host_step = _overlapping(trace, np.flatnonzero(host), lo, hi)
    device = np.flatnonzero(kernels)
    step_of = np.searchsorted(lo, launched_at[device], side="right") - 1
    own = (step_of >= 0) & (launched_at[device] < hi[np.clip(step_of, 0, None)])
    # a step's device work may run long after its host step: what it inherited is what ran
    # before its own work ended, not only what ran during the host step
    device_end = hi.copy()
    np.maximum.at(device_end, step_of[own], trace.end_us[device[own]])
    device_index, device_step = _overlapping(trace, device, lo, np.maximum.accumulate(
        device_end))
    earlier = launched_at[device_index] < lo[device_step]
    return _split_by_step(len(steps), (host_index, host_step), (device[own], step_of[own]),
                          (device_index[earlier], device_step[earlier]))


def _overlapping(trace: RankTrace, events: np.ndarray, lo: np.ndarray, hi: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Every (event, step) pair of ``events`` that overlap a step (``start < hi`` and
    ``end > lo``): an event spanning several steps is in each."""
    start, end = trace.start_us[events], trace.end_us[events]
    first = np.searchsorted(hi, start, side="right")
    last = np.searchsorted(lo, end, side="left") - 1
    count = np.maximum(last - first + 1, 0)
    index = np.repeat(events, count)
    offsets = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return index, np.repeat(first, count) + offsets


def _split_by_step(n: int, *pairs: tuple[np.ndarray, np.ndarray]) -> list[StepEvents]:
    """``pairs`` of (events, their steps) cut into per-step arrays with one sort each."""
    columns = []
    for index, step in pairs:
        order = np.lexsort((index, step))
        index, step = index[order], step[order]
        bounds = np.searchsorted(step, np.arange(n + 1))
        columns.append([index[bounds[k]:bounds[k + 1]] for k in range(n)])
    return [StepEvents(*(column[k] for column in columns)) for k in range(n)]
