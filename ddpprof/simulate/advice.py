"""The simulator's advice on a run's bucket cap, for ``ddpprof.findings`` (never measures)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import UsageError
from .cost import CostModel, fit_cost, traffic_bytes

#: Caps the advice compares, in MiB.
ADVICE_CAPS_MB = (0.25, 0.5, 1, 2, 5, 10, 25, 50, 100)


def cap_advice(run_path: Path, current_cap_mb: float | None,
               fallback_cost: CostModel | None = None):
    """What the replay says of a run's bucket cap, for ``ddpprof.findings``: the best cap
    against the current one at the run's own world size, and the half-bandwidth size α·β (in
    message bytes). None where the run cannot be simulated without measuring anything."""
    from ..findings import CapAdvice
    from . import simulate_run

    caps = sorted({*ADVICE_CAPS_MB, *([current_cap_mb] if current_cap_mb else [])})
    try:
        simulation = simulate_run(run_path, caps, None, allow_sweep=False,
                                  fallback_cost=fallback_cost)
    except UsageError:
        return None
    world = simulation.world_size
    mine = [p for p in simulation.predictions if p.world_size == world
            and p.bucket_cap_mb is not None]
    if not mine:
        return None
    top = min(mine, key=lambda p: p.step_ms)
    current = next((p for p in mine if p.bucket_cap_mb == current_cap_mb), None)
    ring = 2 * (world - 1) / world if world > 1 else 1.0
    return CapAdvice(current_cap_mb=current_cap_mb, best_cap_mb=top.bucket_cap_mb,
                     current_step_ms=(current or top).step_ms, best_step_ms=top.step_ms,
                     half_bandwidth_bytes=simulation.cost.half_bandwidth_traffic_bytes / ring)


def pooled_cost(runs) -> dict[tuple, CostModel]:
    """A cost model per (backend, world size) fitted over the all-reduces of every run given
    (rank 0's calls), for runs whose own collectives are all of one size."""
    samples: dict[tuple, list[tuple[float, float]]] = {}
    for run in runs:
        rank = run.ranks[0]
        world = rank.world_size or run.manifest.config.world_size
        if not world or world < 2:
            continue
        key = (run.manifest.config.backend or rank.backend, world)
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
        except UsageError:
            continue
    return pooled


def cap_advice_for_runs(runs) -> dict:
    """``cap_advice`` for every local run whose gradients were bucketed into all-reduces; a
    run whose own collectives cannot be fitted borrows the fit over all the runs given."""
    advice = {}
    pooled = pooled_cost(runs)
    for run in runs:
        timeline = run.ranks[0].buckets
        cap = run.manifest.config.bucket_cap_mb
        if timeline is None or not timeline.buckets or not isinstance(run.folder, str | Path):
            continue
        if isinstance(run.folder, str) and "://" in run.folder:
            continue
        key = (run.manifest.config.backend or run.ranks[0].backend,
               run.ranks[0].world_size or run.manifest.config.world_size)
        found = cap_advice(Path(run.folder), cap if isinstance(cap, int | float) else None,
                           pooled.get(key))
        if found is not None:
            advice[run.name] = found
    return advice
