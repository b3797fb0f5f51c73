"""Collective statistics: calls, time, bytes and bandwidth, per collective type."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: nccl-tests' bus-bandwidth factors: busbw = algbw × factor(n), n ranks in the group.
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


@dataclass(frozen=True)
class CollectiveStats:
    calls: int
    total_us: float
    bytes_per_call: float | None   # mean over calls; None when any call's size is unknown
    algbw_gbps: float | None       # bytes moved / time spent, in 1e9 bytes per second
    busbw_gbps: float | None       # algbw × bus factor (nccl-tests convention)

    @property
    def mean_us(self) -> float:
        return self.total_us / self.calls if self.calls else 0.0


def collective_stats(collective: list[str], duration_us: np.ndarray,
                     size_bytes: list[int | None], group_size: int | None
                     ) -> dict[str, CollectiveStats]:
    """Aggregate calls by collective name. Bandwidth is total bytes / total time of the calls,
    which weights each call by its duration, as one long transfer would."""
    stats = {}
    for name in sorted(set(collective)):
        picked = [i for i, c in enumerate(collective) if c == name]
        total_us = float(duration_us[picked].sum())
        sizes = [size_bytes[i] for i in picked]
        known = all(s is not None for s in sizes)
        total_bytes = float(sum(sizes)) if known else None  # type: ignore[arg-type]
        algbw = total_bytes / total_us / 1e3 if known and total_us > 0 else None
        factor = BUS_FACTOR.get(name)
        busbw = (algbw * factor(group_size) if algbw is not None and factor and group_size
                 and group_size > 1 else None)
        stats[name] = CollectiveStats(
            calls=len(picked), total_us=total_us,
            bytes_per_call=total_bytes / len(picked) if known else None,
            algbw_gbps=algbw, busbw_gbps=busbw)
    return stats
