"""The simulator's advice on a run's collectives, for ``ddpprof.advice`` (never measures):
the half-bandwidth size of the cost fitted to the run, and, for a run ddpprof recorded, the
replay of the graph of the middle step of the analyzed window at each bucket cap
(``simulate``), from what ``analyze``'s rank workers took of the traces
(``AnalysisOptions.replay_graphs``, ``ADVISED_STEPS``): no trace is read twice.

A trace ddpprof did not record gets no replay: its findings name the mechanism, never a cap
(``findings.bucket_cap_too_large``), so its graphs are not built (a few hundred ms of a large
trace's analysis)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import UsageError
from ..metrics.comm import BUS_FACTOR
from ..metrics.cost import CostModel, FitError, fit_cost, traffic_bytes
from .model import CapAdvice, CapReplay

if TYPE_CHECKING:
    from ..analysis.results import RunResult

#: Caps the advice compares, in MiB.
ADVICE_CAPS_MIB = (0.25, 0.5, 1, 2, 5, 10, 25, 50, 100)


def cap_advice(run: RunResult, fallback_cost: CostModel | None = None) -> CapAdvice | None:
    """What the simulator says of a run, for ``ddpprof.advice``: for a run ddpprof recorded,
    the replay's best cap against the current one at the run's own world size; for any run,
    the half-bandwidth size α·β (in message bytes). None where neither can be had without
    measuring anything."""
    if run.manifest.config is None:
        return _fitted_only(run, fallback_cost)
    # the replay's machinery: only for a run ddpprof recorded
    from ..simulate.run import simulate
    from ..simulate.sources import Costs

    if any(r.graph_steps is None for r in run.ranks) or "://" in run.folder:
        return None
    config = run.manifest.config
    current_cap_mib = config.bucket_cap_mib
    caps = sorted({*ADVICE_CAPS_MIB, *([current_cap_mib] if current_cap_mib else [])})
    try:
        simulation = simulate(Path(run.folder), run, caps, [], Costs(fallback=fallback_cost),
                              median_step_only=True)
    except UsageError:
        return None
    world = simulation.world_size
    mine = [(p.bucket_cap_mib, p) for p in simulation.predictions if p.world_size == world
            and p.bucket_cap_mib is not None]
    if not mine:
        return None
    best_cap, top = min(mine, key=lambda capped: capped[1].step_ms)
    current = next((p for cap, p in mine if cap == current_cap_mib), None)
    return CapAdvice(_half_bandwidth(simulation.cost, world),
                     CapReplay(current_cap_mib=current_cap_mib, best_cap_mib=best_cap,
                               current_step_ms=(current or top).step_ms,
                               best_step_ms=top.step_ms))


def _half_bandwidth(cost: CostModel, world: int) -> float | None:
    """The message size (bytes) at which an all-reduce spends as long on latency as on
    moving bytes: α·β in traffic, over the bus factor; None without a cost model that has
    both (no model: β infinite; no latency: α 0)."""
    factor = BUS_FACTOR["all_reduce"](world) if world > 1 else 1.0
    traffic = cost.half_bandwidth_traffic_bytes
    return traffic / factor if math.isfinite(traffic) and traffic > 0 else None


def _fitted_only(run: RunResult, fallback_cost: CostModel | None) -> CapAdvice | None:
    """A run ddpprof did not record: the half-bandwidth size of the cost fitted to rank 0's
    collective transfers over the analyzed window (from the last member's arrival to the
    end, each call's bytes at its own group's size), else of ``fallback_cost``."""
    rank = run.ranks[0]
    calls, world = rank.calls, _model_key(run)[1] or len(run.ranks)
    start = rank.transfer_start_us if rank.transfer_start_us is not None else calls.start_us
    samples = [(traffic_bytes(kind, size, group or world, rank.backend), float(end - begin))
               for kind, size, group, begin, end in zip(
                   calls.kind, calls.size_bytes, calls.group_size, start, calls.end_us,
                   strict=True) if size and end > begin]
    samples = [(traffic, time) for traffic, time in samples if traffic > 0]
    try:
        cost = fit_cost(np.array([t for t, _ in samples], dtype=float),
                        np.array([u for _, u in samples]), "fit over the run's transfers")
    except FitError:
        if fallback_cost is None:
            return None
        cost = fallback_cost
    return CapAdvice(_half_bandwidth(cost, world))


#: What runs must share to share a cost model: backend and world size.
ModelKey = tuple[str | None, int | None]


def _model_key(run: RunResult) -> ModelKey:
    """What runs must share to share a cost model: backend and world size."""
    rank, config = run.ranks[0], run.manifest.config
    return (rank.backend or (config.backend if config else None),
            rank.world_size or (config.world_size if config else None))


def pooled_cost(runs: list[RunResult]) -> dict[ModelKey, CostModel]:
    """A cost model per (backend, world size) fitted over the all-reduces of every run given
    (rank 0's calls), for runs whose own collectives are all of one size."""
    samples: dict[ModelKey, list[tuple[float, float]]] = {}
    for run in runs:
        rank = run.ranks[0]
        key = _model_key(run)
        world = key[1]
        if not world or world < 2:
            continue
        calls = rank.calls
        for k in range(calls.n):
            size = calls.size_bytes[k]
            duration = float(calls.end_us[k] - calls.start_us[k])
            if calls.kind[k] == "all_reduce" and size and duration > 0:
                samples.setdefault(key, []).append(
                    (traffic_bytes("all_reduce", size, world), duration))
    pooled = {}
    for key, pairs in samples.items():
        try:
            pooled[key] = fit_cost(np.array([s for s, _ in pairs]),
                                   np.array([t for _, t in pairs]),
                                   f"fit over the {len(pairs)} all-reduces of the runs "
                                   "analyzed together")
        except FitError:
            continue
    return pooled


def cap_advice_within(run: RunResult, runs: list[RunResult]) -> CapAdvice | None:
    """``cap_advice`` for ``run`` as :func:`cap_advice_for_runs` gives it when ``run`` is
    analyzed among ``runs`` (which hold it): its fit borrows theirs where its own fails."""
    return cap_advice(run, pooled_cost(runs).get(_model_key(run)))


def cap_advice_for_runs(runs: list[RunResult]) -> dict[str, CapAdvice]:
    """``cap_advice`` for every run: replayed where the analysis made its step graphs
    (``AnalysisOptions.replay_graphs``: ddpprof recorded it, from a local folder, and its
    gradients were bucketed), fitted only where ddpprof did not record it; a run whose own
    collectives cannot be fitted borrows the fit over all the runs given."""
    advice = {}
    pooled = pooled_cost(runs)
    for run in runs:
        found = cap_advice(run, pooled.get(_model_key(run)))
        if found is not None:
            advice[run.name] = found
    return advice
