"""Collective statistics: calls, time, bytes and bandwidth, per collective kind."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: nccl-tests' bus-bandwidth factors (``doc/PERFORMANCE.md``): busbw = algbw × factor(n),
#: n ranks in the collective's own group.
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


@dataclass(frozen=True)
class CollectiveCalls:
    """One rank's collective calls in the analyzed window, one entry per call (arrays of equal
    length): what the statistics and the cross-rank matching are computed from."""

    kind: list[str]
    start_us: np.ndarray
    end_us: np.ndarray
    size_bytes: list[int | None]      # nccl-tests' "size": see :func:`message_bytes`
    group_size: list[int | None]
    group: list[str]                  # process group, or "" when the trace does not say
    sequence: list[int | None]

    @property
    def n(self) -> int:
        return len(self.kind)


def message_bytes(kind: str, in_bytes: int | None, out_bytes: int | None,
                  group_size: int | None) -> int | None:
    """The size nccl-tests reports for one call: the whole gathered buffer for all-gather
    (output, or input × group size), the input buffer for the others."""
    if kind == "all_gather":
        if out_bytes is not None:
            return out_bytes
        return in_bytes * group_size if in_bytes is not None and group_size else None
    return in_bytes


@dataclass(frozen=True)
class CollectiveStats:
    calls: int
    total_us: float
    bytes_per_call: float | None   # mean over calls; None when any call's size is unknown
    algbw_gbps: float | None       # bytes moved / time spent, in 1e9 bytes per second
    busbw_gbps: float | None       # algbw × bus factor of each call's group (nccl-tests)

    @property
    def mean_us(self) -> float:
        return self.total_us / self.calls if self.calls else 0.0


def collective_stats(calls: CollectiveCalls) -> dict[str, CollectiveStats]:
    """Aggregate calls by kind. Bandwidth is total bytes / total time of the calls, which
    weights each call by its duration, as one long transfer would; bus bandwidth scales each
    call's bytes by its own group's factor. Unknown where any call's size (or, for bus
    bandwidth, group size) is unknown."""
    durations = calls.end_us - calls.start_us
    stats = {}
    for kind in sorted(set(calls.kind)):
        picked = [i for i, k in enumerate(calls.kind) if k == kind]
        total_us = float(durations[picked].sum())
        sizes = [size for i in picked if (size := calls.size_bytes[i]) is not None]
        total_bytes = float(sum(sizes)) if len(sizes) == len(picked) else None
        algbw = total_bytes / total_us / 1e3 if total_bytes is not None and total_us > 0 else None
        factor = BUS_FACTOR.get(kind)
        groups = [g for i in picked if (g := calls.group_size[i]) is not None and g > 1]
        busbw = None
        if algbw is not None and factor and len(groups) == len(picked):
            bus_bytes = sum(s * factor(g) for s, g in zip(sizes, groups, strict=True))
            busbw = bus_bytes / total_us / 1e3
        stats[kind] = CollectiveStats(
            calls=len(picked), total_us=total_us,
            bytes_per_call=total_bytes / len(picked) if total_bytes is not None else None,
            algbw_gbps=algbw, busbw_gbps=busbw)
    return stats
