"""What a collective costs: the α–β model, fitted to measured calls. Pure: numbers in, numbers
out. (How much running beside compute slows a collective is the overlap tax,
``ddpprof.metrics.tax``; how much the run's load slowed its collectives against this model is
the replay's cost level, ``ddpprof.graph.edit.CollectiveCost``.)

The model is ``t = α + traffic / β``: ``α`` a per-call latency (µs), ``β`` the bandwidth on the
traffic each rank moves (bytes/µs, nccl-tests' bus bandwidth), ``traffic = factor(N) × S`` for a
call of S bytes on N ranks with nccl-tests' bus factors: 2(N−1)/N for an all-reduce, (N−1)/N for
a reduce-scatter or an all-gather, 1 for a broadcast. gloo (torch 2.13) runs a reduce-scatter
as an all-reduce of the whole input, so there it moves an all-reduce's traffic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .comm import BUS_FACTOR


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
    #: A measured curve, (traffic bytes, µs) by traffic, that the time follows where it
    #: reaches (:func:`measured_curve`); empty: the α–β line everywhere.
    curve: tuple[tuple[float, float], ...] = ()

    def time_us(self, size_bytes: float, world_size: int, kind: str = "all_reduce",
                backend: str | None = None) -> float:
        """A call's time: on the measured curve, interpolated between its points as a power
        law (linear in log–log); below its first point, that point's time (latency-bound);
        beyond its last, that time plus the extra traffic at β. Without a curve, α + traffic/β."""
        if world_size <= 1:
            return 0.0
        traffic = traffic_bytes(kind, size_bytes, world_size, backend)
        if len(self.curve) < 2:
            return self.alpha_us + traffic / self.beta_bytes_per_us
        (first, first_us), (last, last_us) = self.curve[0], self.curve[-1]
        if traffic <= first:
            return first_us
        if traffic >= last:
            return last_us + (traffic - last) / self.beta_bytes_per_us
        log_traffic, log_time = self._log_curve
        return float(np.exp(np.interp(np.log(traffic), log_traffic, log_time)))

    @cached_property
    def _log_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """The curve in logs, taken once: the replays price every collective with it."""
        return np.log([t for t, _ in self.curve]), np.log([u for _, u in self.curve])

    @property
    def half_bandwidth_traffic_bytes(self) -> float:
        """α·β: the traffic at which a call spends as long on latency as on moving bytes."""
        return self.alpha_us * self.beta_bytes_per_us


class FitError(ValueError):
    """The samples cannot give an α–β fit (one size, or time not growing with size): the
    message says which. A caller that was given the samples by the user (``calibrate``) turns
    it into its ``UsageError``; the others fall back."""


def fit_cost(traffic: np.ndarray, times_us: np.ndarray, source: str) -> CostModel:
    """``t = α + traffic/β`` by least squares on relative errors (each call weighs by 1/t, so
    a 4 KiB call counts as much as a 256 MiB one and α is not lost in the large calls' noise).
    α is kept ≥ 0: a negative intercept is refitted as ``t = traffic/β``. Needs calls of two
    sizes at least, and time growing with size (else :class:`FitError`)."""
    if traffic.size < 2 or np.unique(traffic).size < 2:
        raise FitError("the collectives have a single size, so latency and bandwidth cannot "
                       "be told apart")
    weight = 1 / times_us
    design = np.stack([weight, traffic * weight], axis=1)
    (alpha, inverse_beta), *_ = np.linalg.lstsq(design, np.ones_like(times_us), rcond=None)
    if alpha < 0:
        ratio = traffic * weight
        alpha, inverse_beta = 0.0, float(ratio.sum() / (ratio ** 2).sum())
    if inverse_beta <= 0:
        raise FitError("the collectives do not get slower with size (the fitted bandwidth is "
                       "not positive)")
    predicted = alpha + traffic * inverse_beta
    spread = float(np.sum((times_us - times_us.mean()) ** 2))
    r2 = 1 - float(np.sum((times_us - predicted) ** 2)) / spread if spread > 0 else None
    return CostModel(float(alpha), 1 / float(inverse_beta), r2, int(traffic.size), source)


def measured_curve(traffic: Sequence[float], times_us: Sequence[float]
                   ) -> tuple[tuple[float, float], ...]:
    """A sweep's medians as a curve that never falls with size: each point's time the least
    measured at its traffic or more (a machine's noise only adds time, and a larger message is
    not faster, so a spike at one size is noise, not cost). Empty with fewer than two points."""
    if len(traffic) < 2:
        return ()
    order = np.argsort(np.asarray(traffic, dtype=float))
    sizes = np.asarray(traffic, dtype=float)[order]
    times = np.asarray(times_us, dtype=float)[order]
    envelope = np.minimum.accumulate(times[::-1])[::-1]
    return tuple((float(t), float(u)) for t, u in zip(sizes, envelope, strict=True))
