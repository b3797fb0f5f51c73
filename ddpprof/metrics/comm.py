"""Collective statistics: calls, time, bytes and bandwidth, per collective kind."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

_T = TypeVar("_T")

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
class GroupRef:
    """The process group a collective call went over, as far as the trace tells."""

    key: str                          # its identity across ranks: c10d's name, "" when unnamed
    name: str                         # what it is reported under (``classify.group_label``)
    description: str | None = None    # c10d's description ("mesh_dp")
    ranks: tuple[int, ...] | None = None
    #: Where the group came from: "trace arguments" (``record_param_comms``), "ddpprof::group
    #: spans", "FSDP and functional-collective spans", or "none" (the default group).
    source: str = "none"


DEFAULT_GROUP = GroupRef("", "default")


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
    #: Each call's process group (``GroupRef.key`` is ``group``); empty: all default.
    groups: list[GroupRef] = field(default_factory=list)
    #: All-to-all(v): the elements sent to each peer, where the trace records them.
    in_splits: list[tuple[int, ...] | None] = field(default_factory=list)
    out_bytes: list[int | None] = field(default_factory=list)   # each call's output buffer
    #: The device stream each call ran on (-1: on the host) and when it was ready to run:
    #: its launch for a kernel, else its start. Empty: not known (no queue is measured).
    stream: list[int] = field(default_factory=list)
    ready_us: list[float] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.kind)

    def group_of(self, i: int) -> GroupRef:
        return self.groups[i] if self.groups else DEFAULT_GROUP

    def group_labels(self) -> list[str]:
        """Each call's group as parts and tables name it: its name (``dp``: one name for
        the same mesh dimension on every rank, where c10d numbers each rank's group apart),
        "" for the default group."""
        return ["" if self.group_of(i) is DEFAULT_GROUP or self.group_of(i).name == "default"
                else self.group_of(i).name for i in range(self.n)]

    def subset(self, pick: np.ndarray) -> CollectiveCalls:
        """The calls at indices ``pick``, in that order."""
        pick = np.asarray(pick, dtype=np.int64)
        chosen = pick.tolist()

        def take(values: list[_T]) -> list[_T]:
            return [values[i] for i in chosen] if values else []

        return CollectiveCalls(take(self.kind), self.start_us[pick], self.end_us[pick],
                               take(self.size_bytes), take(self.group_size), take(self.group),
                               take(self.sequence), take(self.groups), take(self.in_splits),
                               take(self.out_bytes), take(self.stream), take(self.ready_us))


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
        total_bytes, algbw, busbw = bandwidth(calls, picked, total_us)
        stats[kind] = CollectiveStats(
            calls=len(picked), total_us=total_us,
            bytes_per_call=total_bytes / len(picked) if total_bytes is not None else None,
            algbw_gbps=algbw, busbw_gbps=busbw)
    return stats


def bandwidth(calls: CollectiveCalls, picked: list[int], total_us: float
              ) -> tuple[float | None, float | None, float | None]:
    """Total bytes of the calls ``picked``, their algorithm bandwidth (bytes / ``total_us``,
    the sum of their durations, in GB/s) and bus bandwidth (each call's bytes × the bus factor
    of its kind at its own group's size, over the same time). Each None where some call's
    size (or, for bus bandwidth, kind factor or group size above 1) is unknown."""
    sizes = [s for i in picked if (s := calls.size_bytes[i]) is not None]
    if not picked or len(sizes) < len(picked):
        return None, None, None
    total_bytes = float(sum(sizes))
    algbw = total_bytes / total_us / 1e3 if total_us > 0 else None
    factors = [f for i in picked if (f := BUS_FACTOR.get(calls.kind[i])) is not None]
    groups = [g for i in picked if (g := calls.group_size[i]) is not None and g > 1]
    busbw = None
    if algbw is not None and len(factors) == len(groups) == len(picked):
        bus_bytes = sum(s * f(g) for s, f, g in zip(sizes, factors, groups, strict=True))
        busbw = bus_bytes / total_us / 1e3
    return total_bytes, algbw, busbw
