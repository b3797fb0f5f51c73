"""Per-bucket attribution: for one step of one rank, when each gradient bucket became ready,
when its all-reduce ran, and how much of it stuck out after backward. Pure: no I/O.

A bucket is one reduction of gradients: an all-reduce (DDP), or a reduce-scatter (ZeRO, FSDP);
"all-reduce" below stands for either. For one step:

* ``ready``: when its last gradient was accumulated: that gradient's ``AccumulateGrad`` end,
  or, when the all-reduce was launched from inside the accumulation (a post-accumulate hook,
  as DDP's Reducer and the hook variants do), the launch itself;
* ``launched`` and ``done``: the all-reduce's start and end (its kernel on GPU, its gloo span
  on CPU);
* ``exposed``: the part of ``[launched, done)`` after backward's last gradient was accumulated.

Which gradients make up which bucket comes from ``run.json`` (``buckets``) when the recording
says; otherwise it is inferred: gradients in the order they became ready are matched to the
all-reduces in launch order by their sizes (consecutive runs of gradients whose bytes add up
to the all-reduce's), or one gradient per all-reduce of its size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BucketRow:
    index: int
    size_bytes: int | None
    gradients: int | None          # how many gradients it holds (None: could not tell)
    params: list[str] | None       # their names, when the recording wrote them
    ready_ms: float | None         # all times from the step's start
    launched_ms: float
    done_ms: float
    exposed_ms: float


@dataclass(frozen=True)
class BucketTimeline:
    step: str
    first_gradient_ms: float | None    # the step's first gradient accumulated
    backward_end_ms: float | None      # its last: backward is done
    buckets: list[BucketRow]


def _match_gradients(grad_bytes: list[int], bucket_bytes: list[int | None]
                     ) -> list[list[int]] | None:
    """Indices of the gradients (ready order) in each bucket (launch order), or None."""
    sizes = [b for b in bucket_bytes if b is not None]
    if not grad_bytes or len(sizes) < len(bucket_bytes):
        return None
    groups: list[list[int]] = []
    start = 0
    for size in sizes:
        total, end = 0, start
        while end < len(grad_bytes) and total < size:
            total += grad_bytes[end]
            end += 1
        if total != size:
            break
        groups.append(list(range(start, end)))
        start = end
    else:
        return groups
    # one gradient per all-reduce (the per-parameter variants reduce in registration order)
    unused = list(range(len(grad_bytes)))
    groups = []
    for size in sizes:
        match = next((i for i in unused if grad_bytes[i] == size), None)
        if match is None:
            return None
        unused.remove(match)
        groups.append([match])
    return groups


def bucket_timeline(step: str, step_start_us: float, grad_ready_us: np.ndarray,
                    grad_start_us: np.ndarray, grad_bytes: list[int],
                    launch_us: np.ndarray, done_us: np.ndarray,
                    bucket_bytes: list[int | None],
                    recorded: list[list[str]] | None = None) -> BucketTimeline:
    """The buckets of one step. ``grad_*``: the step's ``AccumulateGrad`` spans in order of
    their end; ``launch_us``/``done_us``/``bucket_bytes``: its all-reduces in launch order;
    ``recorded``: parameter names per bucket from the recording, when it wrote them."""
    backward_end = float(grad_ready_us.max()) if grad_ready_us.size else None
    groups = _match_gradients(grad_bytes, bucket_bytes)
    rows = []
    for k, (launched, done) in enumerate(zip(launch_us, done_us, strict=True)):
        ready = None
        if grad_ready_us.size:
            members = groups[k] if groups else None
            if members:
                last = max(members, key=lambda i: grad_ready_us[i])
                ready = min(float(grad_ready_us[last]), float(launched)) if (
                    grad_start_us[last] <= launched) else float(grad_ready_us[last])
            else:
                before = grad_start_us <= launched
                if before.any():
                    ready = min(float(grad_ready_us[before].max()), float(launched))
        exposed = max(0.0, float(done) - max(float(launched), backward_end)) if (
            backward_end is not None) else float(done - launched)
        names = recorded[k] if recorded and k < len(recorded) else None
        rows.append(BucketRow(
            index=k, size_bytes=bucket_bytes[k],
            gradients=len(names) if names else (len(groups[k]) if groups else None),
            params=names, ready_ms=None if ready is None else (ready - step_start_us) / 1e3,
            launched_ms=(float(launched) - step_start_us) / 1e3,
            done_ms=(float(done) - step_start_us) / 1e3, exposed_ms=exposed / 1e3))
    first = float(grad_ready_us.min()) if grad_ready_us.size else None
    return BucketTimeline(step, None if first is None else (first - step_start_us) / 1e3,
                          None if backward_end is None else (backward_end - step_start_us) / 1e3,
                          rows)
