"""What both kinds of rank analysis share: the analyzed events' times, the data loader's
time, a step's buckets and timeline lanes, overlap per collective kind. Pure."""

from __future__ import annotations

import numpy as np

from ..core.errors import TraceError
from ..metrics import intervals as iv
from ..metrics.breakdown import (
    overlap_pct,
)
from ..metrics.comm import CollectiveCalls
from ..trace import classify
from ..trace.calls import collective_calls
from ..trace.events import RankTrace
from .buckets import BucketTimeline, bucket_timeline
from .results import CommBar, Timeline

GRADIENT_REDUCTIONS = ("all_reduce", "reduce_scatter")
#: The timeline of one step keeps at most this many communication bars (a whole-trace window
#: can hold tens of thousands); the page says how many were left out.
MAX_TIMELINE_BARS = 2000


def dataloader_us(trace: RankTrace, window: iv.Intervals) -> float:
    loading = classify.per_name(trace, lambda n: bool(classify.DATALOADER.search(n)))
    return iv.length(iv.intersect(iv.union(trace.start_us[loading], trace.end_us[loading]),
                                  window))


def step_buckets(trace: RankTrace, step: int, comm_index: np.ndarray, start: np.ndarray,
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


def compute_lane(trace: RankTrace, lanes: classify.HostLanes) -> iv.Intervals:
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


def overlap_by_kind(calls: CollectiveCalls, compute: iv.Intervals) -> dict[str, float | None]:
    """Per collective kind, the share of its time that compute hides."""
    result = {}
    for kind in sorted(set(calls.kind)):
        mine = np.array([k == kind for k in calls.kind])
        result[kind] = overlap_pct(compute, iv.union(calls.start_us[mine], calls.end_us[mine]))
    return result


def timeline_lanes(trace: RankTrace, label: str, origin: float, finish: float,
                   compute: iv.Intervals, comm_index: np.ndarray, start: np.ndarray,
                   end: np.ndarray) -> Timeline:
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


def event_times(trace: RankTrace, hta_rounding: bool) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every event in µs: as recorded, or, with ``hta_rounding`` and a trace
    whose timestamps are not all JSON integers (Kineto's ns output), rounded inward to whole
    µs as HTA 0.5.0 does by default (start up, end down; a sub-µs event can end before it
    starts)."""
    if hta_rounding and not trace.timestamps_are_integers:
        return np.ceil(trace.start_us), np.floor(trace.end_us)
    return trace.start_us, trace.end_us



def nothing_to_measure(trace: RankTrace) -> TraceError:
    if trace.n_events == 0:
        return TraceError(trace.path, "nothing to measure: no complete events (only metadata, "
                                      "counters or instants)")
    return TraceError(trace.path, "nothing to measure: no device kernels and no host ops "
                                  "with a duration")


def trace_notes(trace: RankTrace, stream: np.ndarray) -> list[str]:
    """What was assumed about a trace that is not what it seems: a Chrome trace that no
    PyTorch profiler wrote (no ``schemaVersion``, none of its categories), and a trace whose
    launches have no device activity recorded."""
    notes = []
    if not trace.has_schema_version and not classify.PROFILER_CATEGORIES & set(trace.category):
        notes.append("not a PyTorch profiler trace (no schemaVersion, no Kineto categories): "
                     "its complete events were read as host work on their threads, none as "
                     "device work; ddpprof's figures assume PyTorch's profiler")
    launches = classify.per_name(trace, classify.launches_device_work) & (stream < 0)
    if launches.any() and not (stream >= 0).any():
        notes.append(f"device activity not recorded ({int(launches.sum())} launches, no "
                     "kernel or copy on a device: profiled without the device activity?): the "
                     "figures are the host's")
    return notes
