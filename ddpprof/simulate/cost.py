"""What a collective costs: the α–β model, fitted to measured calls, and how much running beside
compute slows communication and communication slows compute. Pure: numbers in, numbers out.

The model is ``t = α + traffic / β``: ``α`` a per-call latency (µs), ``β`` the bandwidth on the
traffic each rank moves (bytes/µs, nccl-tests' bus bandwidth), ``traffic = factor(N) × S`` for a
call of S bytes on N ranks with nccl-tests' bus factors: 2(N−1)/N for an all-reduce, (N−1)/N for
a reduce-scatter or an all-gather, 1 for a broadcast. gloo (torch 2.13) runs a reduce-scatter
as an all-reduce of the whole input, so there it moves an all-reduce's traffic.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..metrics.comm import BUS_FACTOR


def traffic_bytes(kind: str, size_bytes: float, world_size: int,
                  backend: str | None = None) -> float:
    """The bytes each rank moves for one call of ``size_bytes`` (nccl-tests' size: the whole
    gathered buffer for an all-gather, the input for the others)."""
    if world_size <= 1:
        return 0.0
    if kind == "reduce_scatter" and (backend or "").endswith("gloo"):
        kind = "all_reduce"
    return BUS_FACTOR.get(kind, BUS_FACTOR["all_reduce"])(world_size) * size_bytes


@dataclass(frozen=True)
class CostModel:
    alpha_us: float                    # per-call latency
    beta_bytes_per_us: float           # bandwidth on the traffic each rank moves (busbw)
    r2: float | None                   # fit quality over the samples; None when given
    samples: int                       # calls (or sweep sizes) it was fitted on
    source: str = "given"              # where α and β come from, in words

    def time_us(self, size_bytes: float, world_size: int, kind: str = "all_reduce",
                backend: str | None = None) -> float:
        if world_size <= 1:
            return 0.0
        return self.alpha_us + traffic_bytes(kind, size_bytes, world_size, backend) / \
            self.beta_bytes_per_us

    @property
    def half_bandwidth_traffic_bytes(self) -> float:
        """α·β: the traffic at which a call spends as long on latency as on moving bytes."""
        return self.alpha_us * self.beta_bytes_per_us


def fit_cost(traffic: np.ndarray, times_us: np.ndarray, source: str) -> CostModel:
    """``t = α + traffic/β`` by least squares on relative errors (each call weighs by 1/t, so
    a 4 KiB call counts as much as a 256 MiB one and α is not lost in the large calls' noise).
    α is kept ≥ 0: a negative intercept is refitted as ``t = traffic/β``. Needs calls of two
    sizes at least, and time growing with size."""
    if traffic.size < 2 or np.unique(traffic).size < 2:
        raise UsageError("the collectives have a single size, so latency and bandwidth cannot "
                         "be told apart")
    weight = 1 / times_us
    design = np.stack([weight, traffic * weight], axis=1)
    (alpha, inverse_beta), *_ = np.linalg.lstsq(design, np.ones_like(times_us), rcond=None)
    if alpha < 0:
        ratio = traffic * weight
        alpha, inverse_beta = 0.0, float(ratio.sum() / (ratio ** 2).sum())
    if inverse_beta <= 0:
        raise UsageError("the collectives do not get slower with size (the fitted bandwidth is "
                         "not positive)")
    predicted = alpha + traffic * inverse_beta
    spread = float(np.sum((times_us - times_us.mean()) ** 2))
    r2 = 1 - float(np.sum((times_us - predicted) ** 2)) / spread if spread > 0 else None
    return CostModel(float(alpha), 1 / float(inverse_beta), r2, int(traffic.size), source)


@dataclass(frozen=True)
class Contention:
    """How the two lanes slow each other down, as factors on time (1 = no effect).

    * ``compute_slowdown`` σ: compute runs σ times slower while a collective is in flight;
    * ``comm_alone`` ρₐ and ``comm_overlapped`` ρₒ: a collective takes ρ × the cost model's
      time while the training thread is blocked or idle (ρₐ) or computing (ρₒ).
    """

    compute_slowdown: float = 1.0
    comm_alone: float = 1.0
    comm_overlapped: float = 1.0


def compute_slowdown(keys: list[Hashable], durations_us: np.ndarray, in_flight: np.ndarray,
                     ) -> tuple[float | None, int]:
    """σ from ops seen both with and without a collective in flight: for each key (the same
    op: its name and shapes, or a matrix product's FLOPs) that ran at least once each way
    (``in_flight`` ≥ 0.9 of it, or ≤ 0.1), the ratio of its median durations; σ is the
    duration-weighted geometric mean of those ratios, and the number of keys it rests on.
    None without such a key."""
    logs, weights = [], []
    by_key: dict[Hashable, tuple[list[float], list[float]]] = {}
    for key, duration, share in zip(keys, durations_us, in_flight, strict=True):
        if share >= 0.9:
            by_key.setdefault(key, ([], []))[1].append(duration)
        elif share <= 0.1:
            by_key.setdefault(key, ([], []))[0].append(duration)
    for alone, overlapped in by_key.values():
        if alone and overlapped:
            logs.append(np.log(np.median(overlapped) / np.median(alone)))
            weights.append(np.median(alone) * (len(alone) + len(overlapped)))
    if not logs:
        return None, 0
    return float(np.exp(np.average(logs, weights=weights))), len(logs)


def comm_slowdowns(modelled_us: np.ndarray, measured_us: np.ndarray, overlapped: np.ndarray,
                   ) -> tuple[float | None, float | None]:
    """ρₐ and ρₒ from calls whose model time is ``modelled_us``, measured ``measured_us``, with
    ``overlapped`` the share of each that ran beside compute: least squares of measured =
    modelled × (ρₐ(1 − f) + ρₒ f) on the times themselves, so that the factors reproduce the
    communication time the calls add up to (long calls weigh most). A factor the calls cannot
    tell (no call mostly alone, or none mostly overlapped) is None."""
    if modelled_us.size == 0:
        return None, None
    mostly_alone, mostly_overlapped = overlapped <= 0.5, overlapped > 0.5
    if mostly_alone.any() and mostly_overlapped.any():
        design = np.stack([modelled_us * (1 - overlapped), modelled_us * overlapped], axis=1)
        (alone, beside), *_ = np.linalg.lstsq(design, measured_us, rcond=None)
        if alone > 0 and beside > 0:
            return float(alone), float(beside)
    total = float(measured_us.sum() / modelled_us.sum())
    return (total, None) if mostly_alone.sum() >= mostly_overlapped.sum() else (None, total)
