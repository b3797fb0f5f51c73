"""What a replay at another bucket cap (``graph.edit``) needs of one thread's nodes beyond the
graph's edges: where the hooks fired with each gradient end (a bucket launches after them),
and where DDP's Reducer copies the reduced buckets back into the gradients (each copy after its
bucket's collective). Pure."""

from __future__ import annotations

import bisect

import numpy as np

from ..trace import classify
from ..trace.events import RankTrace
from .model import Node


def thread_marks(trace: RankTrace, nodes: list[Node], events: np.ndarray,
                 parents: dict[int, int], hi: float, copies: np.ndarray
                 ) -> tuple[dict[int, int], list[int]]:
    """For one thread: ``nodes``, its nodes in time order; ``events``, its events;
    ``parents``, the innermost span around each of its gradients' ``AccumulateGrad`` (positions
    into ``events``; others are passed over); ``hi``, the step's end; ``copies``, its events
    that copy a reduced gradient out of a bucket (``classify.copies_bucket_to_gradient``).

    * each gradient's *hooks' end*: the last node inside the autograd engine's span around it
      (``classify.evaluates_gradient``), where the hooks that span fires run (DDP's Reducer
      copies the gradient into its bucket, then launches the bucket if it was the last);
    * each copy, in time order, as the first node at or after its start (a copy too short to
      be a node of its own still orders the nodes after it).

    Both as positions into ``nodes``."""
    starts = [node.start_us for node in nodes]
    hooks_end: dict[int, int] = {}
    for child, parent in parents.items():
        i, outer = int(events[child]), int(events[parent])
        if i in trace.grad_bytes and classify.evaluates_gradient(
                trace.names[trace.name_id[outer]]):
            k = bisect.bisect_left(starts, min(float(trace.end_us[outer]), hi)) - 1
            if k >= 0:
                hooks_end[i] = k
    at = [bisect.bisect_left(starts, start) for start in np.sort(trace.start_us[copies]).tolist()]
    return hooks_end, [k for k in at if k < len(nodes)]
