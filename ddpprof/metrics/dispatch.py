"""Stretches of tiny ops: where a host thread spends its time dispatching ops that each do
little work. Pure numpy.

A *stretch* is a run of at least ``MIN_RUN`` consecutive ops of one thread, each shorter than
``SHORT_OP_US``, each starting within ``MAX_GAP_US`` of the end of those before it; its time
runs from its first op's start to its last op's end, the gaps between them included (the
Python and dispatch time between ops, which no op's span covers)."""

from __future__ import annotations

import numpy as np

from . import intervals as iv

SHORT_OP_US = 20.0
MAX_GAP_US = 50.0
MIN_RUN = 20


def tiny_op_stretches(start: np.ndarray, end: np.ndarray, thread: np.ndarray
                      ) -> iv.Intervals:
    """The stretches of tiny ops (see the module) among ops ``[start, end)`` of threads
    ``thread``, as disjoint intervals."""
    short = (end - start) < SHORT_OP_US
    starts: list[float] = []
    ends: list[float] = []
    for t in np.unique(thread[short]):
        mine = np.flatnonzero(short & (thread == t))
        order = mine[np.argsort(start[mine], kind="stable")]
        s, e = start[order], np.maximum.accumulate(end[order])
        # a new run where an op starts more than MAX_GAP_US after every op before it ended
        breaks = np.flatnonzero(s[1:] > e[:-1] + MAX_GAP_US) + 1
        for lo, hi in zip(np.r_[0, breaks], np.r_[breaks, s.size], strict=True):
            if hi - lo >= MIN_RUN:
                starts.append(float(s[lo]))
                ends.append(float(e[hi - 1]))
    if not starts:
        return iv.EMPTY
    return iv.union(np.array(starts), np.array(ends))
