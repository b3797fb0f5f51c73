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

import functools
import statistics
from collections.abc import Iterable, Sequence
from typing import Annotated, Any

import msgspec
import numpy as np
from msgspec import Meta

from ..core.errors import UsageError
from ..core.limits import MAX_RANKS as WORLD_MAX
from ..metrics.comm import collective_stats
from ..metrics.partition import cut, density_integral
from ..metrics.waits import CallWaits, call_waits
from ..run.config import RunConfig, decode_hook, encode_hook, with_current_names
from ..run.manifest import RunMeasurements, validation_problem
from ..trace.names import MAX_NAME_CHARS
from .parts import PartKey, RankParts
from .results import RankResult, RunResult

#: Bounds of the ``profile`` section of ``analyze --json``: the items of each part (the rest
#: are summed), the steps of the per-step series, the ranks with a row of their own.
TOP_ITEMS = 10
MAX_STEPS = 512
MAX_RANKS = 512

# What a profile read back may hold (``profile_of_row``): finite numbers within physical
# bounds, so that the noise model's squares and sums stay finite. A step of at most 10⁹ ms
# (11 days); a part's time the same either way (a part may come out a hair below zero from
# floating point); calls per step, bytes per call and GB/s far beyond any machine's.
MAX_MS = 1e9
Ms = Annotated[float, Meta(ge=-MAX_MS, le=MAX_MS)]
StepMs = Annotated[float, Meta(ge=0, le=MAX_MS)]
PerStep = Annotated[float, Meta(ge=0, le=1e15)]
Bytes = Annotated[float, Meta(ge=0, le=1e18)]
Gbps = Annotated[float, Meta(ge=0, le=1e12)]
Index = Annotated[int, Meta(ge=0, le=2**31)]
Rank = Annotated[int, Meta(ge=0, lt=WORLD_MAX)]
Name = Annotated[str, Meta(max_length=MAX_NAME_CHARS)]


class ProfileItem(msgspec.Struct, frozen=True):
    """A kernel or op inside a part: ms per step (mean over ranks) and calls per step."""

    part: Index                         # in the profile's ``parts``
    name: Name
    shape: Name
    ms_per_step: Ms
    calls_per_step: PerStep


class CollectiveItem(msgspec.Struct, frozen=True):
    """One kind of collective in one process group (its name, ``dp``; "" for the default): calls
    and time per step, bytes per call and bus bandwidth (``metrics.comm``), mean over ranks."""

    kind: Name
    process_group: Name
    calls_per_step: PerStep
    ms_per_step: StepMs
    bytes_per_call: Bytes | None
    busbw_gbps: Gbps | None


class BucketItem(msgspec.Struct, frozen=True):
    """A gradient bucket of the middle analyzed step (``analysis.buckets``), mean over ranks:
    its size, its launch after the step's first gradient was ready (its place in backward),
    its all-reduce's length and its part after backward ended."""

    index: Index
    size_bytes: Annotated[int, Meta(ge=0, le=2**62)] | None
    launch_in_backward_ms: Ms | None
    duration_ms: StepMs
    exposed_ms: StepMs


class RunProfile(msgspec.Struct, kw_only=True, dict=True):
    """One run's steps as parts (times in ms, per step; see the module's docstring). Its
    lists agree (:meth:`__post_init__`): a value per part, per step, per rank, and items that
    name a part of ``parts``."""

    run: str
    kind: str                                   # "gpu" or "cpu"
    backend: Name | None = None                 # the traces' distributedInfo.backend
    ranks: list[Rank]
    step_ms: StepMs                             # mean over ranks of each rank's mean step
    parts: list[PartKey]
    part_ms: list[Ms]                           # the same mean, per part: sums to step_ms
    steps: list[Name]                           # the per-step series' steps
    step_series_ms: list[StepMs]                # per step, mean over ranks
    part_series_ms: list[list[Ms]]              # [part][step]
    rank_step_ms: list[StepMs] | None = None    # per rank (in ``ranks`` order)
    rank_part_ms: list[list[Ms]] | None = None  # [part][rank]
    items: list[ProfileItem] = []
    items_left_out_ms: list[Ms] | None = None   # per part: items not listed (bounded)
    collectives: list[CollectiveItem] = []
    buckets: list[BucketItem] = []
    config: RunConfig | None = None             # run.json's, for a ddpprof recording
    measured: RunMeasurements | None = None     # run.json's, for a ddpprof recording
    unprofiled_step_ms: StepMs | None = None    # run.json's median step without the profiler

    @functools.cached_property
    def part_index(self) -> dict[PartKey, int]:
        """Each part's position in ``parts`` (a run of many process groups has thousands of
        parts: looked up, never searched)."""
        return {key: k for k, key in enumerate(self.parts)}

    def __post_init__(self) -> None:
        """Refuse lists that do not agree (a ``ValueError``, which msgspec reports as a
        ``ValidationError`` of the document read back)."""
        parts, steps, ranks = len(self.parts), len(self.steps), len(self.ranks)
        _same_length("part_ms", self.part_ms, parts, "parts")
        _same_length("step_series_ms", self.step_series_ms, steps, "steps")
        _same_length("part_series_ms", self.part_series_ms, parts, "parts")
        for k, row in enumerate(self.part_series_ms):
            _same_length(f"part_series_ms[{k}]", row, steps, "steps")
        if self.rank_step_ms is not None:
            _same_length("rank_step_ms", self.rank_step_ms, ranks, "ranks")
        if self.rank_part_ms is not None:
            _same_length("rank_part_ms", self.rank_part_ms, parts, "parts")
            for k, row in enumerate(self.rank_part_ms):
                _same_length(f"rank_part_ms[{k}]", row, ranks, "ranks")
        if self.items_left_out_ms is not None:
            _same_length("items_left_out_ms", self.items_left_out_ms, parts, "parts")
        for k, item in enumerate(self.items):
            if item.part >= parts:
                raise ValueError(f"items[{k}].part: {item.part} is not a part (there are "
                                 f"{parts})")
        if len(set(self.ranks)) != ranks:
            raise ValueError("ranks: a rank is listed twice")
        if len(set(self.parts)) != parts:
            raise ValueError("parts: a part is listed twice")


def _same_length(field: str, values: list[Any], count: int, of: str) -> None:
    if len(values) != count:
        raise ValueError(f"{field}: {len(values)} values for {count} {of}")


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


def _collectives(ranks: list[RankResult]) -> list[CollectiveItem]:
    found: dict[tuple[str, str], list[tuple[float, float, float | None, float | None]]] = {}
    for rank in ranks:
        steps = max(rank.steps, 1)
        by_group: dict[str, list[int]] = {}     # one pass, however many groups
        for i, label in enumerate(rank.calls.group_labels()):
            by_group.setdefault(label, []).append(i)
        for group in sorted(by_group):
            stats = collective_stats(rank.calls.subset(np.array(by_group[group],
                                                                dtype=np.int64)))
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
        run=run.name, kind=ranks[0].kind, backend=next((r.backend for r in ranks if r.backend),
                                                     None),
        ranks=[r.rank for r in ranks],
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
    result: dict[str, Any] = msgspec.to_builtins(bounded, enc_hook=encode_hook)
    return result


def profile_of_row(row: dict[str, Any], source: str) -> RunProfile | None:
    """The profile of one run of an ``analyze --json`` document (None: the document is older
    than the section)."""
    data = row.get("profile")
    if data is None:
        return None
    try:
        if isinstance(data, dict) and "config" in data:     # named as before version 6
            data = {**data, "config": with_current_names(data["config"])}
        return msgspec.convert(data, RunProfile, dec_hook=decode_hook)
    except msgspec.ValidationError as error:
        raise UsageError(f"{source}: run {row.get('run')!r}: profile."
                         f"{validation_problem(error)}") from None


#: The step itself, as a part: ``part_values`` of it is the step time.
STEP = PartKey("step")


def part_values(profiles: Sequence[RunProfile], key: PartKey
                 ) -> tuple[list[float], list[list[float]], list[float]]:
    """Per recording: the part's mean, its per-step series and the mean step (0 where the
    recording has no such part)."""
    means, series = [], []
    for profile in profiles:
        if key == STEP:
            means.append(profile.step_ms)
            series.append(profile.step_series_ms)
        elif (k := profile.part_index.get(key)) is not None:
            means.append(profile.part_ms[k])
            series.append(profile.part_series_ms[k])
        else:
            means.append(0.0)
            series.append([0.0] * len(profile.step_series_ms))
    return means, series, [p.step_ms for p in profiles]
