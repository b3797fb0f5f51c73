"""One rank's share of the overlap tax (``ddpprof.metrics.tax``): its compute ops, each
identified as the same op in every step, from its loaded trace. Pure: no I/O.

* CPU (host lanes): the work spans (``classify.host_lanes``' work) whose own time is at
  least :data:`MIN_OWN_SHARE` of them (their children cover less), on threads that run no
  backend collective (gloo's own threads are communication);
* GPU: the compute kernels (``classify.Kind.COMPUTE``) of the analyzed window.

An op's identity is (its thread or stream, its name, its position among the ops of that name
on that lane in its step): the k-th ``aten::mm`` of the training thread is the same layer's
product in every step.
"""

from __future__ import annotations

import numpy as np

from ..metrics import intervals as iv
from ..metrics.tax import WORK_CLASSES, OpSamples, RankTaxSamples
from ..metrics.tax_fit import row_ids
from ..trace import classify
from ..trace.events import RankTrace

#: A span counts as an op of its own when its children cover less than a tenth of it (a
#: matrix product's tiny ``aten::resolve_conj``; not a module's span around its ops).
MIN_OWN_SHARE = 0.9


def step_positions(step_start: np.ndarray, step_end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The position of the step (starts sorted) holding each time ``t``, else -1."""
    position = np.searchsorted(step_start, t, side="right") - 1
    inside = (position >= 0) & (t < step_end[np.clip(position, 0, None)])
    return np.where(inside, position, -1)


def own_share(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The share of each span that no other span of its thread nested in it covers (1 for a
    span with no children). Spans are taken as properly nested, the longer outer of two that
    start together."""
    own = np.ones(start.size)
    for t in np.unique(thread):
        mine = np.flatnonzero(thread == t)
        order = mine[np.lexsort((-end[mine], start[mine]))]
        s, e = start[order], end[order]
        # open spans when each starts: those before it in this order, less those ended by then
        depth = np.arange(order.size) - np.searchsorted(np.sort(e), s, side="right")
        for level in np.unique(depth).tolist():
            children = depth == level + 1
            if not children.any():
                continue
            at = depth == level
            inner = iv.covered(iv.union(s[children], e[children]), s[at], e[at])
            length = e[at] - s[at]
            own[order[at]] = np.where(length > 0, 1 - inner / np.where(length > 0, length, 1),
                                      1.0)
    return own


def host_samples(trace: RankTrace, lanes: classify.HostLanes, analyzed: np.ndarray,
                 compute: iv.Intervals, call_start: np.ndarray) -> RankTaxSamples:
    """A CPU trace's samples: its work spans of their own time on threads that run no
    backend collective, in the analyzed steps (``analyzed``: their events; none: the whole
    trace is one step)."""
    backend_threads = np.unique(trace.thread_id[lanes.comm])
    candidates = np.flatnonzero(lanes.work & ~np.isin(trace.thread_id, backend_threads))
    ops = candidates[own_share(trace.thread_id[candidates], trace.start_us[candidates],
                               trace.end_us[candidates]) >= MIN_OWN_SHARE]
    if analyzed.size:
        lo, hi = trace.start_us[analyzed], trace.end_us[analyzed]
        op_step = step_positions(lo, hi, trace.start_us[ops])
        call_step = step_positions(lo, hi, call_start)
    else:
        op_step, call_step = np.zeros(ops.size, np.int64), np.zeros(call_start.size, np.int64)
    return rank_samples(trace, ops, trace.thread_id[ops], op_step, compute, call_step)


def device_samples(trace: RankTrace, stream: np.ndarray, compute_kernels: np.ndarray,
                   calls: np.ndarray, start: np.ndarray, positions: np.ndarray,
                   compute: iv.Intervals) -> RankTaxSamples:
    """A GPU trace's samples: its compute kernels (``compute_kernels``, a mask), each in the
    step that launched it (``positions``: per event, -1 outside the analyzed steps); ``calls``
    the mask of its collective calls (taken in start order, as ``CollectiveCalls`` are)."""
    ops = np.flatnonzero(compute_kernels)
    index = np.flatnonzero(calls)
    index = index[np.argsort(start[index], kind="stable")]
    return rank_samples(trace, ops, stream[ops], positions[ops], compute, positions[index])


def rank_samples(trace: RankTrace, ops: np.ndarray, lane: np.ndarray, op_step: np.ndarray,
                 compute: iv.Intervals, call_step: np.ndarray) -> RankTaxSamples:
    """The samples of the events ``ops`` on lanes ``lane`` (thread ids, or streams), in the
    analyzed steps ``op_step`` (-1: outside, left out); ``compute`` the rank's compute lane,
    ``call_step`` the step of each of its collective calls."""
    inside = op_step >= 0
    ops, lane, op_step = ops[inside], lane[inside].astype(np.int64), op_step[inside]
    names = trace.name_id[ops].astype(np.int64)
    start, end = trace.start_us[ops], trace.end_us[ops]
    # the ordinal among the ops of one name on one lane in one step, in start order
    order = np.lexsort((start, names, lane, op_step))
    group = np.stack([op_step[order], lane[order], names[order]], axis=1)
    first = np.ones(order.size, dtype=bool)
    first[1:] = np.any(group[1:] != group[:-1], axis=1)
    run_start = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
    ordinal = np.empty(order.size, dtype=np.int64)
    ordinal[order] = np.arange(order.size) - run_start
    if ops.size:
        key = row_ids(lane, names, ordinal)
        used, inverse = np.unique(names, return_inverse=True)
        position = {name: k for k, name in enumerate(WORK_CLASSES)}
        work_class = np.array([position[classify.work_class(trace.names[i])] for i in used],
                              dtype=np.int64)[inverse.ravel()]
    else:
        key = work_class = np.empty(0, dtype=np.int64)
    return RankTaxSamples(OpSamples(key.astype(np.int64), work_class, op_step.astype(np.int64),
                                    start, end), compute, call_step.astype(np.int64))
