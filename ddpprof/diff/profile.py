"""A run's steps as parts, and what is inside each part: the profile two runs are diffed on.

It is made from an analyzed run (:func:`run_profile`) or read back from the ``profile``
section of an ``analyze --json`` document (:func:`profile_of_row`), which holds it bounded
(:func:`profile_json`). Definitions in ``docs/diff.md``:

* each rank's steps are cut into parts (``ddpprof.analysis.parts``); the part of a collective
  spent before the last rank of its group arrived (``metrics.waits``) moves from its
  communication part to **waiting for rank N**, N being that last rank;
* a run's **step time** is the mean over ranks of each rank's mean analyzed step, and each
  part's time is the same mean, so the parts add up to the step;
* per step, the mean over ranks (the ranks' first common steps): the series the noise of a
  run's mean is estimated from.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

import msgspec
import numpy as np

from ..analysis.parts import PartKey, RankParts
from ..analysis.results import RankResult, RunResult
from ..errors import UsageError
from ..manifest import RunMeasurements, validation_problem
from ..metrics.comm import CollectiveCalls, collective_stats
from ..metrics.partition import cut, density_integral
from ..metrics.waits import CallWaits, call_waits
from ..record.config import RunConfig, decode_hook, encode_hook

#: Bounds of the ``profile`` section of ``analyze --json``: the items of each part (the rest
#: are summed), the steps of the per-step series, the ranks with a row of their own.
TOP_ITEMS = 10
MAX_STEPS = 512
MAX_RANKS = 512


class ProfileItem(msgspec.Struct, frozen=True):
    """A kernel or op inside a part: ms per step (mean over ranks) and calls per step."""

    part: int
    name: str
    shape: str
    ms_per_step: float
    calls_per_step: float


class CollectiveItem(msgspec.Struct, frozen=True):
    """One kind of collective in one process group (its name, ``dp``; "" for the default): calls
    and time per step, bytes per call and bus bandwidth (``metrics.comm``), mean over ranks."""

    kind: str
    process_group: str
    calls_per_step: float
    ms_per_step: float
    bytes_per_call: float | None
    busbw_gbps: float | None


class BucketItem(msgspec.Struct, frozen=True):
    """A gradient bucket of the middle analyzed step (``analysis.buckets``), mean over ranks:
    its size, its launch after the step's first gradient was ready (its place in backward),
    its all-reduce's length and its part after backward ended."""

    index: int
    size_bytes: int | None
    launch_in_backward_ms: float | None
    duration_ms: float
    exposed_ms: float


class RunProfile(msgspec.Struct, kw_only=True):
    """One run's steps as parts (times in ms, per step; see the module's docstring)."""

    run: str
    kind: str                                   # "gpu" or "cpu"
    ranks: list[int]
    step_ms: float                              # mean over ranks of each rank's mean step
    parts: list[PartKey]
    part_ms: list[float]                        # the same mean, per part: sums to step_ms
    steps: list[str]                            # the per-step series' steps
    step_series_ms: list[float]                 # per step, mean over ranks
    part_series_ms: list[list[float]]           # [part][step]
    rank_step_ms: list[float] | None = None     # per rank (in ``ranks`` order)
    rank_part_ms: list[list[float]] | None = None   # [part][rank]
    items: list[ProfileItem] = []
    items_left_out_ms: list[float] | None = None    # per part: items not listed (bounded)
    collectives: list[CollectiveItem] = []
    buckets: list[BucketItem] = []
    config: RunConfig | None = None             # run.json's, for a ddpprof recording
    measured: RunMeasurements | None = None     # run.json's, for a ddpprof recording
    unprofiled_step_ms: float | None = None     # run.json's median step without the profiler


def waiting_moved(rank: RankResult, own: RankParts, waits: CallWaits | None
                   ) -> tuple[list[PartKey], np.ndarray]:
    """Move each call's time before its last member arrived (its exposed share of it) from
    its communication part to "waiting for rank N"."""
    parts, part_us = own.parts, own.part_us
    if waits is None or not waits.index.size:
        return parts, part_us
    calls = rank.calls
    starts = calls.start_us[waits.index]
    piece, window, lo, hi = cut(starts, starts + waits.wait_us, own.window_start_us,
                                own.window_end_us)
    moved = density_integral(own.comm_density, lo, hi)
    index = {key: k for k, key in enumerate(parts)}
    late = [PartKey("waiting", f"rank {int(r)}") for r in waits.late_rank[piece]]
    for key in dict.fromkeys(late):
        if key not in index:
            index[key] = len(parts)
            parts = [*parts, key]
    grown = np.zeros((len(parts), part_us.shape[1]))
    grown[:part_us.shape[0]] = part_us
    source = own.call_part[waits.index[piece]]
    np.add.at(grown, (source, window), -moved)
    np.add.at(grown, (np.array([index[k] for k in late], dtype=np.int64), window), moved)
    return parts, grown


def _subset(calls: CollectiveCalls, keep: np.ndarray) -> CollectiveCalls:
    return calls.subset(np.flatnonzero(keep))


def _collectives(ranks: list[RankResult]) -> list[CollectiveItem]:
    found: dict[tuple[str, str], list[tuple[float, float, float | None, float | None]]] = {}
    for rank in ranks:
        steps = max(rank.steps, 1)
        labels = rank.calls.group_labels()
        groups = np.array(labels, dtype=object)
        for group in sorted(set(labels)):
            stats = collective_stats(_subset(rank.calls, groups == group))
            for kind, s in stats.items():
                found.setdefault((kind, group), []).append(
                    (s.calls / steps, s.total_us / 1e3 / steps, s.bytes_per_call, s.busbw_gbps))
    n = len(ranks)
    return [CollectiveItem(kind, group, sum(v[0] for v in rows) / n, sum(v[1] for v in rows) / n,
                           _mean_known(v[2] for v in rows), _mean_known(v[3] for v in rows))
            for (kind, group), rows in sorted(found.items())]


def _mean_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _buckets(ranks: list[RankResult]) -> list[BucketItem]:
    rows: dict[int, list[tuple[int | None, float | None, float, float]]] = {}
    for rank in ranks:
        timeline = rank.buckets
        if timeline is None:
            continue
        first = timeline.first_gradient_ms
        for b in timeline.buckets:
            rows.setdefault(b.index, []).append((
                b.size_bytes, None if first is None else b.launched_ms - first,
                b.done_ms - b.launched_ms, b.exposed_ms))
    return [BucketItem(index, values[0][0], _mean_known(v[1] for v in values),
                       statistics.fmean(v[2] for v in values),
                       statistics.fmean(v[3] for v in values))
            for index, values in sorted(rows.items())]


def run_profile(run: RunResult) -> RunProfile | None:
    """The profile of an analyzed run (None when no rank has parts)."""
    ranks = [r for r in run.ranks if r.parts is not None]
    own = [r.parts for r in run.ranks if r.parts is not None]
    if not ranks:
        return None
    waits = call_waits({r.rank: r.calls for r in ranks}) if len(ranks) >= 2 else {}
    keys: dict[PartKey, int] = {}
    per_rank = []
    for rank, rank_parts in zip(ranks, own, strict=True):
        parts, part_us = waiting_moved(rank, rank_parts, waits.get(rank.rank))
        for key in parts:
            keys.setdefault(key, len(keys))
        per_rank.append((parts, part_us))
    order = sorted(keys, key=lambda k: (_GROUP_ORDER.get(k.group, 9), k))
    n_parts, common = len(order), min(p.step_us.size for p in own)
    position = {key: k for k, key in enumerate(order)}
    means = np.zeros((n_parts, len(ranks)))
    series = np.zeros((n_parts, common))
    for column, (parts, part_us) in enumerate(per_rank):
        rows = np.array([position[k] for k in parts], dtype=np.int64)
        means[rows, column] = part_us.sum(axis=1) / part_us.shape[1]
        series[rows] += part_us[:, :common] / len(ranks)
    used = np.flatnonzero((means != 0).any(axis=1) | (series != 0).any(axis=1))
    order, means, series = [order[k] for k in used], means[used], series[used]
    position = {key: k for k, key in enumerate(order)}
    steps = [float(p.step_us.mean()) for p in own]
    items = _items(own, position)
    manifest, throughput = run.manifest, run.manifest.throughput
    recorded = manifest.status is not None     # a run.json that ddpprof wrote
    return RunProfile(
        run=run.name, kind=ranks[0].kind, ranks=[r.rank for r in ranks],
        step_ms=statistics.fmean(steps) / 1e3, parts=order,
        part_ms=(means.mean(axis=1) / 1e3).tolist(), steps=own[0].step_names[:common],
        step_series_ms=(series.sum(axis=0) / 1e3).tolist(),
        part_series_ms=(series / 1e3).tolist(),
        rank_step_ms=[s / 1e3 for s in steps], rank_part_ms=(means / 1e3).tolist(),
        items=items, collectives=_collectives(ranks), buckets=_buckets(ranks),
        config=manifest.config if recorded else None,
        measured=manifest.measured if recorded else None,
        unprofiled_step_ms=throughput.median_step_s * 1e3
        if throughput and throughput.median_step_s else None)


#: Parts in the order tables list them.
_GROUP_ORDER = {"compute": 0, "data loading": 1, "device": 2, "communication": 3,
                "waiting": 4, "host": 5, "host-bound": 6, "idle": 7}


def _items(ranks: list[RankParts], position: dict[PartKey, int]) -> list[ProfileItem]:
    """Items matched across ranks by part, name and shape: means over ranks of ms and calls
    per step (a rank without the item counts as 0)."""
    totals: dict[tuple[int, str, str], list[float]] = {}
    for rank in ranks:
        steps = rank.step_us.size
        for item in rank.items:
            part = position.get(rank.parts[item.part])
            if part is None:            # a part no rank spent time in
                continue
            key = (part, item.name, item.shape)
            entry = totals.setdefault(key, [0.0, 0.0])
            entry[0] += item.us / 1e3 / steps
            entry[1] += item.calls / steps
    n = len(ranks)
    return sorted((ProfileItem(part, name, shape, ms / n, calls / n)
                   for (part, name, shape), (ms, calls) in totals.items()),
                  key=lambda i: (i.part, -i.ms_per_step))


def profile_json(profile: RunProfile) -> dict[str, Any]:
    """The profile as ``analyze --json`` holds it: at most ``TOP_ITEMS`` items per part (the
    rest summed in ``items_left_out_ms``), ``MAX_STEPS`` steps of the series, and rows per
    rank for at most ``MAX_RANKS`` ranks."""
    kept, left_out = [], [0.0] * len(profile.parts)
    counts: dict[int, int] = {}
    for item in profile.items:          # sorted by part, then by time
        counts[item.part] = counts.get(item.part, 0) + 1
        if counts[item.part] <= TOP_ITEMS:
            kept.append(item)
        else:
            left_out[item.part] += item.ms_per_step
    few_ranks = len(profile.ranks) <= MAX_RANKS
    bounded = msgspec.structs.replace(
        profile, items=kept, items_left_out_ms=left_out, steps=profile.steps[:MAX_STEPS],
        step_series_ms=profile.step_series_ms[:MAX_STEPS],
        part_series_ms=[row[:MAX_STEPS] for row in profile.part_series_ms],
        rank_step_ms=profile.rank_step_ms if few_ranks else None,
        rank_part_ms=profile.rank_part_ms if few_ranks else None)
    return msgspec.to_builtins(bounded, enc_hook=encode_hook)


def profile_of_row(row: dict[str, Any], source: str) -> RunProfile | None:
    """The profile of one run of an ``analyze --json`` document (None: the document is older
    than the section)."""
    data = row.get("profile")
    if data is None:
        return None
    try:
        return msgspec.convert(data, RunProfile, dec_hook=decode_hook)
    except msgspec.ValidationError as error:
        raise UsageError(f"{source}: run {row.get('run')!r}: profile."
                         f"{validation_problem(error)}") from None
