"""Two sets of recordings (each one run, or repeats of one configuration) compared: the change
of the mean step split into the changes of its parts, each with its interval, the items that
moved inside the parts, the collectives and buckets, and the configuration's differences.
Pure: profiles in, typed results out. Definitions in ``docs/diff.md``."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import msgspec

from ..analysis.parts import PartKey
from ..analysis.profile import STEP, RunProfile, part_values
from ..run.config import encode_hook
from .noise import (
    DEFAULT_NOISE,
    RunNoise,
    Setup,
    Source,
    difference,
    interval,
    noise_source,
    side,
)

#: Items listed under each of the parts that moved the most: those that moved the most.
TOP_MOVED, TOP_PARTS = 5, 6
#: A pair's verdict where no noise estimate exists.
NO_VERDICT = "no verdict: one step a side and no repeats"
Key = TypeVar("Key", bound=Hashable)
Row = TypeVar("Row")


class Delta(msgspec.Struct, frozen=True):
    """One quantity (the step, or one part) before and after, in ms per step (means over each
    side's recordings), the change and its simultaneous interval (None: no noise estimate,
    so no verdict)."""

    part: PartKey
    label: str
    before_ms: float
    after_ms: float
    delta_ms: float
    low_ms: float | None
    high_ms: float | None
    significant: bool             # the interval holds no zero
    of_step_delta_pct: float | None = None  # the change as a share of the step's change
    rank: int | None = None       # where per-rank rows exist: the rank it moved most on
    rank_delta_ms: float | None = None

    @property
    def verdict(self) -> str:
        if self.low_ms is None:
            return "no verdict"
        return "changed" if self.significant else "within noise"

    @property
    def on_one_rank(self) -> bool:
        """The change sits mostly on one rank: its rank moved at least 1.5 × the mean."""
        return self.rank is not None and self.rank_delta_ms is not None and \
            abs(self.rank_delta_ms) >= 1.5 * abs(self.delta_ms) > 0


class ItemDelta(msgspec.Struct, frozen=True):
    """A kernel or op (name and shape) in one part, ms and calls per step before and after;
    None where the item was not among the listed ones of a bounded profile, its change then
    taken against the smallest item that side listed (``bound``: the change is at least that
    much when it grew, at most when it shrank)."""

    part: str
    name: str
    shape: str
    before_ms: float | None
    after_ms: float | None
    delta_ms: float
    before_calls: float | None
    after_calls: float | None
    bound: bool = False


class CollectiveDelta(msgspec.Struct, frozen=True):
    kind: str
    process_group: str
    before_calls: float | None
    after_calls: float | None
    before_ms: float | None
    after_ms: float | None
    before_bytes_per_call: float | None
    after_bytes_per_call: float | None
    before_busbw_gbps: float | None
    after_busbw_gbps: float | None


class BucketDelta(msgspec.Struct, frozen=True):
    index: int
    before_size_bytes: int | None
    after_size_bytes: int | None
    before_launch_ms: float | None     # after the step's first gradient was ready
    after_launch_ms: float | None
    launch_delta_ms: float | None
    before_exposed_ms: float | None
    after_exposed_ms: float | None
    exposed_delta_ms: float | None


class ConfigChange(msgspec.Struct, frozen=True):
    field: str
    before: str
    after: str


class PairDiff(msgspec.Struct, kw_only=True, frozen=True):
    """One pair of sides: what changed between them."""

    before: str                         # what the sides are called (the paths given)
    after: str
    before_runs: list[str]
    after_runs: list[str]
    kind: str
    config_changes: list[ConfigChange]
    step: Delta
    parts: list[Delta]                  # by size of the change, largest first
    unattributed_ms: float              # step change − Σ part changes (floating point)
    #: "significant change", "no significant change" or, with no noise estimate,
    #: ``NO_VERDICT``
    verdict: str
    noise_source: Source                # prior, repeats, steps or none (``diff.noise``)
    noise: str                          # where the intervals' noise came from, in words
    items: list[ItemDelta]
    collectives: list[CollectiveDelta]
    buckets: list[BucketDelta]
    notes: list[str] = []


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _rank_move(before: Sequence[RunProfile], after: Sequence[RunProfile], key: PartKey
               ) -> tuple[int | None, float | None]:
    """The rank whose share of ``key`` moved the most, from the per-rank rows (means over
    each side's recordings)."""
    def by_rank(profiles: Sequence[RunProfile]) -> dict[int, float] | None:
        rows: dict[int, list[float]] = {}
        for p in profiles:
            if p.rank_part_ms is None or p.rank_step_ms is None:
                return None
            values = p.rank_step_ms if key == STEP else (
                p.rank_part_ms[p.part_index[key]] if key in p.part_index
                else [0.0] * len(p.ranks))
            for rank, value in zip(p.ranks, values, strict=True):
                rows.setdefault(rank, []).append(value)
        return {rank: statistics.fmean(v) for rank, v in rows.items()}

    a, b = by_rank(before), by_rank(after)
    if a is None or b is None or len(set(a) | set(b)) < 2:
        return None, None
    moves = {rank: b.get(rank, 0.0) - a.get(rank, 0.0) for rank in set(a) | set(b)}
    rank = max(sorted(moves), key=lambda r: abs(moves[r]))
    return rank, moves[rank]


def _prior_note(profiles: Sequence[RunProfile], noise: RunNoise | None) -> str:
    """Why the prior holds for the recordings of both sides, or why not (the first recording
    not recorded like it)."""
    if noise is None:
        return "no run-to-run prior offered"
    if noise.recorded is None:
        return f"the run-to-run prior given ({noise.describe()})"
    for profile in profiles:
        if (setup := Setup.of(profile)) != noise.recorded:
            return (f"no run-to-run prior: run {profile.run} is {setup.describe()}, and the "
                    f"CPU prior holds only for runs recorded like its own "
                    f"({noise.recorded.describe()})")
    return (f"the run-to-run prior of runs recorded like these, {noise.recorded.describe()} "
            f"({noise.describe()})")


def noise_words(before: Sequence[RunProfile], after: Sequence[RunProfile],
                noise: RunNoise | None, source: Source) -> str:
    """Where a pair's noise came from, in words (``docs/diff.md#noise``)."""
    counts = f"{len(before)} and {len(after)} recordings"
    steps = [len(p.step_series_ms) for p in [*before, *after]]
    prior = _prior_note([*before, *after], noise)
    if source == "prior":
        repeats = " and the repeats' spread" if max(len(before), len(after)) >= 2 else ""
        return f"{counts}, {min(steps)}+ steps each: the steps' scatter{repeats} and {prior}"
    if source == "repeats":
        return (f"{counts}: the spread of the repeats' means (it holds the run-to-run noise "
                f"and the steps' scatter); {prior}")
    if source == "steps":
        a, b = len(before[0].step_series_ms), len(after[0].step_series_ms)
        lone = "" if min(a, b) >= 2 else (
            f"; the one step of {(before if a < 2 else after)[0].run} is taken to scatter as "
            "the other side's steps do")
        return (f"one recording a side, {a} and {b} steps: the steps' scatter only (Student's "
                f"t on the steps{lone}), run-to-run noise NOT included: record repeats to "
                f"include it; {prior}")
    return (f"none: one step a side and no repeats, so no noise estimate exists and no verdict "
            f"is made (record several steps or repeats); {prior}")


def diff_pair(before: Sequence[RunProfile], after: Sequence[RunProfile],
              significance: float = 0.95, noise: RunNoise | None = DEFAULT_NOISE,
              names: tuple[str, str] = ("A", "B")) -> PairDiff:
    """Compare two sides, each one recording or repeats of one configuration; ``names``:
    what to call the sides. ``noise``: the run-to-run prior (None: none offered), used where
    it holds for both sides; :func:`ddpprof.diff.noise.noise_source` says where the noise
    comes from."""
    keys = list(dict.fromkeys(k for p in [*before, *after] for k in p.parts))
    present = [k for k in keys if any(
        abs(part_values(side, k)[0][i]) > 0 for side in (before, after)
        for i in range(len(side)))]
    alpha = (1 - significance) / (1 + len(present))    # Bonferroni over step and parts
    source = noise_source(before, after, noise)
    prior = noise if source == "prior" else None

    def delta(key: PartKey, label: str) -> Delta:
        waiting = key.group == "waiting"
        a = side(*part_values(before, key), prior, waiting)
        b = side(*part_values(after, key), prior, waiting)
        found = difference(a, b, prior.prior_runs if prior else None)
        rank, moved = _rank_move(before, after, key)
        if found is None:               # source "none": no noise estimate
            return Delta(key, label, a.mean, b.mean, b.mean - a.mean, None, None, False,
                         rank=rank, rank_delta_ms=moved)
        span = interval(found, alpha)
        return Delta(key, label, a.mean, b.mean, span.delta, span.low, span.high,
                     span.significant, rank=rank, rank_delta_ms=moved)

    step = delta(STEP, "step")
    parts = []
    for key in present:
        part = delta(key, key.label)
        share = 100 * part.delta_ms / step.delta_ms if abs(step.delta_ms) > 1e-9 else None
        parts.append(msgspec.structs.replace(part, of_step_delta_pct=share))
    parts.sort(key=lambda d: -abs(d.delta_ms))
    changed = step.significant or any(p.significant for p in parts)
    verdict = NO_VERDICT if source == "none" else \
        "significant change" if changed else "no significant change"
    return PairDiff(
        before=names[0], after=names[1],
        before_runs=[p.run for p in before], after_runs=[p.run for p in after],
        kind=before[0].kind, config_changes=config_changes(before[0], after[0]), step=step,
        parts=parts, unattributed_ms=step.delta_ms - sum(p.delta_ms for p in parts),
        verdict=verdict, noise_source=source,
        noise=noise_words(before, after, noise, source),
        items=moved_items(before, after, parts), collectives=collective_deltas(before, after),
        buckets=bucket_deltas(before, after), notes=_unprofiled_note(before, after))


def _unprofiled_note(before: Sequence[RunProfile], after: Sequence[RunProfile]) -> list[str]:
    a = _mean([p.unprofiled_step_ms for p in before])
    b = _mean([p.unprofiled_step_ms for p in after])
    if a is None or b is None:
        return []
    return [f"without the profiler (run.json, median of the unprofiled steps): {a:.2f} ms → "
            f"{b:.2f} ms per step ({100 * (b / a - 1):+.1f}%)"]


def _side_items(profiles: Sequence[RunProfile]
                ) -> tuple[dict[tuple[PartKey, str, str], tuple[float, float]],
                           dict[PartKey, float]]:
    """Items by (part, name, shape): means over recordings; and, for the parts whose items a
    profile bounded, the smallest item listed (an item missing there is unknown, at most
    that, not absent)."""
    sums: dict[tuple[PartKey, str, str], list[float]] = {}
    smallest: dict[PartKey, float] = {}
    for p in profiles:
        listed: dict[PartKey, float] = {}
        for item in p.items:
            key = p.parts[item.part]
            entry = sums.setdefault((key, item.name, item.shape), [0.0, 0.0])
            entry[0] += item.ms_per_step
            entry[1] += item.calls_per_step
            listed[key] = min(listed.get(key, item.ms_per_step), item.ms_per_step)
        for k, left in enumerate(p.items_left_out_ms or []):
            if left > 0:
                key = p.parts[k]
                smallest[key] = max(smallest.get(key, 0.0), listed.get(key, left))
    n = len(profiles)
    return {key: (ms / n, calls / n) for key, (ms, calls) in sums.items()}, smallest


def moved_items(before: Sequence[RunProfile], after: Sequence[RunProfile],
                parts: Sequence[Delta]) -> list[ItemDelta]:
    """Under each of the ``TOP_PARTS`` parts that moved the most, in their order, the
    ``TOP_MOVED`` items that moved the most (those that did not move are left out). An item
    not listed by a bounded side is unknown there (None), and its change is bounded by the
    smallest item that side listed (``bound``)."""
    a, a_bounds = _side_items(before)
    b, b_bounds = _side_items(after)
    found = []
    for part in parts[:TOP_PARTS]:
        rows = []
        for key in [k for k in dict.fromkeys([*a, *b]) if k[0] == part.part]:
            values: list[tuple[float | None, float | None, bool]] = []
            for listed, bounds in ((a, a_bounds), (b, b_bounds)):
                if key in listed:
                    values.append((*listed[key], False))
                elif key[0] in bounds:
                    values.append((None, None, True))
                else:
                    values.append((0.0, 0.0, False))
            (before_ms, before_calls, a_unknown), (after_ms, after_calls, b_unknown) = values
            if a_unknown and b_unknown:
                continue
            moved = (after_ms if after_ms is not None else b_bounds[key[0]]) - (
                before_ms if before_ms is not None else a_bounds[key[0]])
            rows.append(ItemDelta(part.label, key[1], key[2], before_ms, after_ms, moved,
                                  before_calls, after_calls, bound=a_unknown or b_unknown))
        rows = [r for r in rows if r.delta_ms != 0]
        rows.sort(key=lambda r: -abs(r.delta_ms))
        found += rows[:TOP_MOVED]
    return found


def _matched(before: Sequence[RunProfile], after: Sequence[RunProfile],
             rows: Callable[[RunProfile], dict[Key, Row]]
             ) -> tuple[list[Key], dict[Key, list[Row]], dict[Key, list[Row]]]:
    def side(profiles: Sequence[RunProfile]) -> dict[Key, list[Row]]:
        merged: dict[Key, list[Row]] = {}
        for p in profiles:
            for key, row in rows(p).items():
                merged.setdefault(key, []).append(row)
        return merged

    a, b = side(before), side(after)
    return list(dict.fromkeys([*a, *b])), a, b


def _column(rows: Sequence[object] | None, name: str) -> float | None:
    return None if rows is None else _mean([getattr(r, name) for r in rows])


def collective_deltas(before: Sequence[RunProfile], after: Sequence[RunProfile]
                      ) -> list[CollectiveDelta]:
    keys, a, b = _matched(before, after, lambda p: {(c.kind, c.process_group): c
                                                    for c in p.collectives})
    return [CollectiveDelta(
        kind, group, _column(a.get((kind, group)), "calls_per_step"),
        _column(b.get((kind, group)), "calls_per_step"),
        _column(a.get((kind, group)), "ms_per_step"), _column(b.get((kind, group)), "ms_per_step"),
        _column(a.get((kind, group)), "bytes_per_call"),
        _column(b.get((kind, group)), "bytes_per_call"),
        _column(a.get((kind, group)), "busbw_gbps"), _column(b.get((kind, group)), "busbw_gbps"))
        for kind, group in keys]


def _minus(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def bucket_deltas(before: Sequence[RunProfile], after: Sequence[RunProfile]
                  ) -> list[BucketDelta]:
    keys, a, b = _matched(before, after, lambda p: {bucket.index: bucket for bucket in p.buckets})
    rows = []
    for index in sorted(keys):
        size_a, size_b = a.get(index), b.get(index)
        launch_a = _column(size_a, "launch_in_backward_ms")
        launch_b = _column(size_b, "launch_in_backward_ms")
        exposed_a, exposed_b = _column(size_a, "exposed_ms"), _column(size_b, "exposed_ms")
        rows.append(BucketDelta(
            index, size_a[0].size_bytes if size_a else None,
            size_b[0].size_bytes if size_b else None, launch_a, launch_b,
            _minus(launch_b, launch_a), exposed_a, exposed_b, _minus(exposed_b, exposed_a)))
    return rows


def config_changes(before: RunProfile, after: RunProfile) -> list[ConfigChange]:
    """Fields of run.json's ``config`` that differ, then of its ``measured`` (named
    ``measured.FIELD``: the torch version, the devices...), both recordings being ddpprof's."""
    changes = []
    for prefix, a_part, b_part in (("", before.config, after.config),
                                   ("measured.", before.measured, after.measured)):
        if a_part is None or b_part is None:
            continue
        a = msgspec.to_builtins(a_part, enc_hook=encode_hook)
        b = msgspec.to_builtins(b_part, enc_hook=encode_hook)
        changes += [ConfigChange(prefix + name, _text(a.get(name)), _text(b.get(name)))
                    for name in dict.fromkeys([*a, *b]) if a.get(name) != b.get(name)]
    return changes


def _text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(dict.fromkeys(map(str, value)))
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)
