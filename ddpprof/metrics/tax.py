"""The overlap tax: how much compute slows while a collective runs beside it, and how much a
collective slows while compute runs beside it. Pure numpy; defined in ``docs/metrics.md``.

Both compare *the same work* alone and overlapped, over a run's analyzed steps and ranks:

* **Compute tax** τ_c of a work class (``classify.work_class``: ``gemm``, ``other``): the
  same op is the same (rank, thread or stream, name, k-th of that name on that lane in its
  step), at least :data:`MIN_WORK_US` long. For each occurrence, d its duration and f the share
  of it during which a collective of its rank was *transferring* (from when the last member of
  its group arrived to its end: ``metrics.waits``' transfer; before that the collective only
  waits). With a's and b's fixed effects for the op and for the (rank, step) it ran in (the
  machine's load changes from step to step),
  ``log d = a(op) + b(rank, step) + γ · f``, fitted by least squares over the ops seen both
  mostly alone (f < ½) and mostly overlapped (f ≥ ½); ``τ_c = e^γ − 1``: an op overlapped from
  start to end takes ``1 + τ_c`` times as long as alone.
* **Communication tax** τ_m: the same with collectives for ops, identified by (rank, kind,
  bytes), d the transfer's duration and f the share of it during which its rank computed
  (``analyze``'s compute lane). ``1 − 1/(1 + τ_m)`` is the bandwidth lost beside compute.

Per collective size, the compute tax takes one γ per size class of the collective beside the
op (regressors: the share of the op beside collectives of that class) and the communication
tax is fitted per size class of the collective. Each tax comes with a 95% interval: the 2.5th
and 97.5th percentiles over ``tax_fit.BOOTSTRAP`` refits on (rank, step) clusters drawn with
replacement (a fixed seed: the same trace gives the same interval).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

import msgspec
import numpy as np
from threadpoolctl import threadpool_limits

from ..core.processes import usable_cores
from ..core.units import KIB, MIB
from . import intervals as iv
from .comm import CollectiveCalls
from .cost import FitError, fit_cost, traffic_bytes
from .tax_fit import Fit, Samples, row_ids

#: Work classes of the compute tax, in ``classify.work_class``'s order.
WORK_CLASSES = ("gemm", "other")
ALL = "all"
#: Collective size classes: upper edges in bytes, and their labels.
SIZE_EDGES = (64 * KIB, 1 * MIB, 16 * MIB)
SIZE_LABELS = ("< 64 KiB", "64 KiB - 1 MiB", "1 - 16 MiB", ">= 16 MiB")
#: Ops and transfers shorter than this (µs) are left out: timer and scheduling noise.
MIN_WORK_US = 50.0
#: An occurrence is mostly overlapped at this share or more, else mostly alone.
OVERLAPPED = 0.5
#: The tax is fitted on at most this many (rank, step) clusters, evenly spaced over the run:
#: the fit has one dummy per cluster, so its least squares grow with the square of their
#: number, and a few dozen steps tell the tax (a long trace would otherwise take minutes).
MAX_CLUSTERS = 32
#: ... and on at most this many occurrences, evenly spaced (each bootstrap refit is a least
#: squares over all of them).
MAX_SAMPLES = 4096
#: Ops that ran only alone (or only overlapped) still tell each step's load: this many of the
#: longest are kept beside those that tell the tax.
REFERENCE_KEYS = 200


def size_class(size_bytes: np.ndarray) -> np.ndarray:
    """Index into :data:`SIZE_LABELS` of each size (unknown sizes, NaN, in the smallest)."""
    result: np.ndarray = np.searchsorted(np.array(SIZE_EDGES, dtype=np.float64),
                           np.nan_to_num(size_bytes, nan=0.0), side="right")
    return result


@dataclass(frozen=True)
class OpSamples:
    """One rank's compute ops, in one step each (arrays of equal length)."""

    key: np.ndarray          # int64: equal for the same op in every step (see the module)
    work_class: np.ndarray   # int64 index into WORK_CLASSES
    step: np.ndarray         # int64 position of its analyzed step
    start_us: np.ndarray
    end_us: np.ndarray


@dataclass(frozen=True)
class RankTaxSamples:
    """What one rank's trace gives the tax: its compute ops, its compute lane (for the
    collectives' share beside compute) and each collective call's analyzed step (the calls are
    the rank's ``CollectiveCalls``)."""

    ops: OpSamples
    compute: iv.Intervals
    call_step: np.ndarray    # int64, per call of the rank's CollectiveCalls; -1 outside steps


#: What a tax read back (a calibration's ``overlap_tax``) may be: ``100 (e^γ − 1)``, so never
#: below −100 %, and in no measurement a million times longer.
TaxPct = Annotated[float, msgspec.Meta(ge=-100, le=1e8)]
Count = Annotated[int, msgspec.Meta(ge=0)]


class TaxRow(msgspec.Struct, frozen=True):
    """One tax: ``side`` ``compute`` (ops beside a collective) or ``communication``
    (collectives beside compute), for a work class and a collective size class (``all``:
    pooled)."""

    side: str
    work_class: str
    size: str
    tax_pct: TaxPct | None       # 100 τ: % longer when overlapped from start to end
    low_pct: TaxPct | None       # 95% bootstrap interval
    high_pct: TaxPct | None
    keys: Count                  # ops (or collectives) seen both mostly alone and overlapped
    alone: Count                 # their occurrences mostly alone ...
    overlapped: Count            # ... and mostly overlapped


class OverlapTax(msgspec.Struct, frozen=True):
    rows: list[TaxRow]

    def row(self, side: str, work_class: str = ALL, size: str = ALL) -> TaxRow | None:
        return next((r for r in self.rows if (r.side, r.work_class, r.size) ==
                     (side, work_class, size)), None)

    def pct(self, side: str, work_class: str = ALL) -> float | None:
        row = self.row(side, work_class)
        return row.tax_pct if row is not None else None


def overlap_tax(ranks: list[tuple[RankTaxSamples, CollectiveCalls, np.ndarray]],
                backend: str | None = None) -> OverlapTax:
    """The overlap tax of a run from each rank's samples, collective calls, and the start of
    each call's transfer (the last member's arrival: ``metrics.waits``)."""
    with threadpool_limits(1, user_api="blas"):            # see _run
        op_parts, call_parts = _parts(ranks, backend)
        return OverlapTax(_run(_compute_fits(op_parts) + _comm_fits(call_parts)))


def _parts(ranks: list[tuple[RankTaxSamples, CollectiveCalls, np.ndarray]],
           backend: str | None) -> tuple[list[Any], list[Any]]:
    """Each rank's ops (their shares beside each size class of collective) and calls."""
    op_parts, call_parts = [], []
    for rank, (samples, calls, transfer_start) in enumerate(ranks):
        size = np.array([np.nan if s is None else s for s in calls.size_bytes], dtype=float)
        bins = size_class(size)
        by_bin = [iv.union(transfer_start[bins == b], calls.end_us[bins == b])
                  for b in range(len(SIZE_LABELS))]
        ops = samples.ops
        duration = ops.end_us - ops.start_us
        keep = duration >= MIN_WORK_US
        shares = np.stack([iv.covered(t, ops.start_us[keep], ops.end_us[keep])
                           for t in by_bin], axis=1) / duration[keep, None]
        op_parts.append((rank, ops.key[keep], ops.step[keep], ops.work_class[keep],
                         np.log(duration[keep]), np.minimum(shares, 1.0)))
        call_parts.append(_call_part(rank, samples, calls, transfer_start, size, bins, backend))
    return op_parts, call_parts


def default_threads() -> int:
    """The fits' threads: the cores this process may run on, at most 4 (their least squares
    and eigendecompositions leave the interpreter's lock)."""
    return min(4, usable_cores())


_THREADS = default_threads()


def _run(fits: list[Callable[[], list[TaxRow]]]) -> list[TaxRow]:
    """Each fit's rows, in order, the fits on :data:`_THREADS` threads. The caller holds BLAS
    to one thread: so that the figures do not depend on the number of cores (a BLAS product
    cut across threads rounds differently), and because BLAS's own threads, on matrices this
    small, only get in the way of these."""
    with ThreadPoolExecutor(_THREADS) as pool:
        return [row for done in [pool.submit(fit) for fit in fits] for row in done.result()]


def shared_time(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each interval's length with the time it shared counted by how many shared it:
    ``∫ dt / n(t)``, n(t) the intervals running at t (one rank's transfers sharing its
    bandwidth: what each would have taken alone)."""
    points = np.unique(np.concatenate([start, end]))
    if points.size < 2:
        alone_us: np.ndarray = end - start
        return alone_us
    middle = (points[:-1] + points[1:]) / 2
    running = (np.searchsorted(np.sort(start), middle, side="right")
               - np.searchsorted(np.sort(end), middle, side="right"))
    alone = np.concatenate([[0.0], np.cumsum(np.diff(points) / np.maximum(running, 1))])
    result: np.ndarray = np.interp(end, points, alone) - np.interp(start, points, alone)
    return result


def _call_part(rank: int, samples: RankTaxSamples, calls: CollectiveCalls,
               transfer_start: np.ndarray, size: np.ndarray, bins: np.ndarray,
               backend: str | None) -> tuple[Any, ...]:
    """One rank's collectives: each one's transfer as if alone on the rank's bandwidth, the
    share of it beside compute, and the bytes it moved."""
    transfer = shared_time(transfer_start, calls.end_us)
    keep = (calls.end_us - transfer_start >= MIN_WORK_US) & (samples.call_step >= 0) & (
        ~np.isnan(size)) & (transfer > 0)
    beside = iv.covered(samples.compute, transfer_start[keep], calls.end_us[keep]) / (
        calls.end_us[keep] - transfer_start[keep])
    # (the bytes each rank moves; a one-rank trace's collectives as if on two)
    traffic = np.array([traffic_bytes(kind, s, max(n or 2, 2), backend) for kind, s, n, k in
                        zip(calls.kind, size, calls.group_size, keep, strict=True) if k],
                       dtype=float)
    return (rank, samples.call_step[keep], bins[keep], np.log(transfer[keep]),
            np.minimum(beside, 1.0), traffic)


def _joined(parts: list[Any]) -> tuple[np.ndarray, ...]:
    """The ranks' parts as one set of arrays, keys and clusters made distinct per rank."""
    if not parts:
        nothing = np.empty(0, dtype=np.int64)
        return nothing, nothing, nothing, np.empty(0), np.empty((0, len(SIZE_LABELS)))
    rank = np.concatenate([np.full(len(p[4]), p[0], dtype=np.int64) for p in parts])
    key = row_ids(rank, np.concatenate([np.asarray(p[1], dtype=np.int64) for p in parts]))
    cluster = row_ids(rank, np.concatenate([np.asarray(p[2], dtype=np.int64) for p in parts]))
    group = np.concatenate([np.asarray(p[3], dtype=np.int64) for p in parts])
    log_duration = np.concatenate([p[4] for p in parts])
    shares = np.concatenate([p[5] for p in parts])
    return key, cluster, group, log_duration, shares


def _compute_fits(parts: list[Any]) -> list[Callable[[], list[TaxRow]]]:
    key, cluster, work_class, log_duration, shares = _joined(parts)
    everything = Samples(log_duration, key, cluster, shares)
    # the ops that tell each step's load, whatever their class; they tell no class's tax
    chosen = _reference(everything, _varying(_pooled(everything)))
    reference = Samples(log_duration[chosen], key[chosen], cluster[chosen],
                        np.zeros_like(shares[chosen]))
    pooled_reference = _pooled(reference)
    fits: list[Callable[[], list[TaxRow]]] = []
    for position, name in [(-1, ALL), *enumerate(WORK_CLASSES)]:
        mine = work_class == position if position >= 0 else np.ones(key.size, dtype=bool)
        samples = everything.subset(mine)
        fits.append(partial(_rows, "compute", name, [(ALL, 0)], _pooled(samples),
                            pooled_reference))
        # the size classes share one fit: one column each
        sizes = [(label, size) for size, label in enumerate(SIZE_LABELS)
                 if samples.shares[:, size].any()]
        if sizes:
            fits.append(partial(_rows, "compute", name, sizes, samples, reference))
    return fits


def _pooled(samples: Samples) -> Samples:
    """The samples with one share: beside any collective."""
    return Samples(samples.log_duration, samples.key, samples.cluster,
                   np.minimum(samples.shares.sum(axis=1, keepdims=True), 1.0))


def _comm_fits(parts: list[Any]) -> list[Callable[[], list[TaxRow]]]:
    """The communication tax: each collective's transfer against what the run's collectives
    that ran mostly alone take for its traffic (their α–β fit, ``metrics.cost``; with one
    size, in proportion to the bytes)."""
    if not parts or not sum(len(p[1]) for p in parts):
        return [partial(_no_tax, 0)]
    rank = np.concatenate([np.full(len(p[1]), p[0], dtype=np.int64) for p in parts])
    cluster = row_ids(rank, np.concatenate([np.asarray(p[1], dtype=np.int64) for p in parts]))
    bins = np.concatenate([p[2] for p in parts])
    log_time = np.concatenate([p[3] for p in parts])
    beside = np.concatenate([p[4] for p in parts])
    traffic = np.concatenate([p[5] for p in parts])
    alone = beside < OVERLAPPED
    expected = _alone_time(traffic, np.exp(log_time), alone)
    if expected is None:
        return [partial(_no_tax, int(beside.size))]
    # one key for all: the alone curve stands for "the same size alone"
    samples = Samples(log_time - np.log(expected), np.zeros(beside.size, dtype=np.int64),
                      cluster, beside[:, None])
    fits: list[Callable[[], list[TaxRow]]] = [
        partial(_rows, "communication", ALL, [(ALL, 0)], samples)]
    for size, label in enumerate(SIZE_LABELS):
        if (bins == size).any():
            fits.append(partial(_rows, "communication", ALL, [(label, 0)],
                                samples.subset(bins == size)))
    return fits


def _no_tax(overlapped: int) -> list[TaxRow]:
    return [TaxRow("communication", ALL, ALL, None, None, None, 0, 0, overlapped)]


def _alone_time(traffic: np.ndarray, time: np.ndarray, alone: np.ndarray
                ) -> np.ndarray | None:
    """What each traffic takes by the collectives that ran mostly alone: their α–β fit, else
    (one size, or time not growing with it) their time per byte; None without any."""
    if not alone.any():
        return None
    try:
        model = fit_cost(traffic[alone], time[alone], "alone")
        return model.alpha_us + traffic / model.beta_bytes_per_us
    except FitError:
        return traffic * float(time[alone].sum() / traffic[alone].sum())


def _rows(side: str, work_class: str, sizes: list[tuple[str, int]], samples: Samples,
          reference: Samples | None = None) -> list[TaxRow]:
    """The tax of each size class ``(label, column of samples.shares)`` of ``sizes``, its
    interval and its support, from one fit; the load of each (rank, step) told by
    ``reference`` (by default the samples' own other keys)."""
    varying = _varying(samples)
    total = np.minimum(samples.shares.sum(axis=1), 1.0)
    keys = int(np.unique(samples.key[varying]).size)
    alone = int((varying & (total < OVERLAPPED)).sum())
    overlapped = int((varying & (total >= OVERLAPPED)).sum())
    if reference is None:
        reference = samples.subset(_reference(samples, varying))
    told = samples.subset(varying)
    fit = Fit(_bounded(Samples(*(np.concatenate([a, b]) for a, b in zip(
        (told.log_duration, told.key, told.cluster, told.shares),
        (reference.log_duration, reference.key, reference.cluster, reference.shares),
        strict=True)))))
    columns = [column for _, column in sizes]
    gammas = fit.gamma(columns) if keys else [None] * len(columns)
    # (each column's interval is the same alone or beside the others: one decomposition)
    intervals = fit.interval(columns) if any(g is not None for g in gammas) else []
    return [TaxRow(side, work_class, size, None, None, None, keys, alone, overlapped)
            if gamma is None else
            TaxRow(side, work_class, size, _pct(gamma), *intervals[k], keys, alone, overlapped)
            for k, ((size, _), gamma) in enumerate(zip(sizes, gammas, strict=True))]


def _bounded(samples: Samples) -> Samples:
    """At most :data:`MAX_CLUSTERS` clusters' samples and :data:`MAX_SAMPLES` of them, each
    evenly spaced."""
    clusters = np.unique(samples.cluster)
    if clusters.size > MAX_CLUSTERS:
        kept = clusters[np.linspace(0, clusters.size - 1, MAX_CLUSTERS).round().astype(np.int64)]
        samples = samples.subset(np.isin(samples.cluster, kept))
    if samples.key.size > MAX_SAMPLES:
        samples = samples.subset(np.unique(np.linspace(
            0, samples.key.size - 1, MAX_SAMPLES).round().astype(np.int64)))
    return samples


def _pct(gamma: float) -> float:
    return 100.0 * float(np.expm1(gamma))


def _varying(samples: Samples) -> np.ndarray:
    """Which occurrences are of keys seen both mostly alone and mostly overlapped: those that
    tell the tax."""
    if samples.key.size == 0:
        return np.zeros(0, dtype=bool)
    total = np.minimum(samples.shares.sum(axis=1), 1.0)
    ids, inverse = np.unique(samples.key, return_inverse=True)
    alone = np.bincount(inverse, weights=total < OVERLAPPED, minlength=ids.size) > 0
    beside = np.bincount(inverse, weights=total >= OVERLAPPED, minlength=ids.size) > 0
    return (alone & beside)[inverse]


def _reference(samples: Samples, varying: np.ndarray) -> np.ndarray:
    """The occurrences of the other keys that tell each (rank, step)'s load: the
    :data:`REFERENCE_KEYS` longest keys seen in two steps or more."""
    others = ~varying
    if not others.any():
        return others
    key = samples.key[others]
    distinct = np.unique(row_ids(key, samples.cluster[others]), return_index=True)[1]
    keys, steps = np.unique(key[distinct], return_counts=True)   # steps each key is seen in
    candidates = keys[steps >= 2]
    if not candidates.size:
        return np.zeros(samples.key.size, dtype=bool)
    mine = others & np.isin(samples.key, candidates)
    ids, inverse = np.unique(samples.key[mine], return_inverse=True)
    length = np.bincount(inverse, weights=samples.log_duration[mine]) / np.bincount(inverse)
    chosen = ids[np.argsort(-length, kind="stable")[:REFERENCE_KEYS]]
    return mine & np.isin(samples.key, chosen)
