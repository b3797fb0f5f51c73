"""``trace.structure.innermost`` (the span around an event, for communication found by
structure and the ops that issue kernels) against the plain walk it stands for, on generated
spans: nested, siblings, overlapping, zero-length, on several threads, and long runs of siblings
that force the walk past its vectorized steps."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpprof.trace.structure import innermost


def _walk(trace, spans, events):
    """The definition, event by event: on the event's thread, the latest-starting span that
    starts by the event's start, walking outward past those that ended before it."""
    index = np.flatnonzero(spans)
    index = index[np.lexsort((trace.start_us[index], trace.thread_id[index]))]
    found = []
    for event in events.tolist():
        t, mine = trace.start_us[event], trace.thread_id[event]
        candidates = [i for i in index.tolist()
                      if trace.thread_id[i] == mine and trace.start_us[i] <= t]
        while candidates and trace.end_us[candidates[-1]] < t:
            candidates.pop()
        found.append(candidates[-1] if candidates else -1)
    return np.array(found, dtype=np.int64)


@st.composite
def _traces(draw):
    n = draw(st.integers(1, 60))
    start = np.array(draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)), dtype=float)
    length = np.array(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)), dtype=float)
    if draw(st.booleans()):   # a long run of short siblings before late events
        extra = draw(st.integers(20, 80))
        start = np.concatenate([start, np.arange(extra, dtype=float) + 100])
        length = np.concatenate([length, np.full(extra, 0.5)])
        n += extra
    thread = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)),
                      dtype=np.int32)
    spans = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    events = np.array(draw(st.lists(st.integers(0, n - 1), max_size=30)), dtype=np.int64)
    trace = SimpleNamespace(start_us=start, end_us=start + length, thread_id=thread)
    return trace, spans, events


@settings(max_examples=300, deadline=None)
@given(_traces())
def test_innermost_is_the_walk_outward(case):
    trace, spans, events = case
    np.testing.assert_array_equal(innermost(trace, spans, events), _walk(trace, spans, events))


def test_innermost_by_hand():
    """Thread 0: A [0, 100) holds B [10, 20) and C [30, 40); thread 1: D [0, 100). An event at
    35 on thread 0 is in C; at 25, B has ended: A; at 150 nothing; at 35 on thread 1: D."""
    start = np.array([0, 10, 30, 0, 35, 25, 150, 35], dtype=float)
    end = np.array([100, 20, 40, 100, 36, 26, 151, 36], dtype=float)
    thread = np.array([0, 0, 0, 1, 0, 0, 0, 1], dtype=np.int32)
    spans = np.array([True] * 4 + [False] * 4)
    trace = SimpleNamespace(start_us=start, end_us=end, thread_id=thread)
    assert innermost(trace, spans, np.arange(4, 8)).tolist() == [2, 0, -1, 3]
