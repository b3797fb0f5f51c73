"""Where the simulator's cost model comes from.

First found of: ``--latency-us``/``--bandwidth-gbps``; ``--calibration FILE``; a complete
``calibration.json`` of the run's backend in the run folder or its parent; a fit over the
run's own collectives' transfers; a fallback (``analyze``'s fit over every run it read); else,
for a run ddpprof recorded on one node, an all-reduce sweep on this machine, written beside
the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UsageError
from ..metrics.cost import CostModel, fit_cost, traffic_bytes

if TYPE_CHECKING:
    from ..calibrate import Calibration


@dataclass(frozen=True)
class Costs:
    """Where the cost model may come from (``sources``): ``--bandwidth-gbps`` with
    ``--latency-us``, a given calibration, a sweep on this machine (``allow_sweep``), or
    ``fallback`` (``analyze``'s fit over the collectives of all the runs it read)."""

    bandwidth_gbps: float | None = None
    latency_us: float | None = None
    calibration: tuple[Path, Calibration] | None = None
    allow_sweep: bool = False
    fallback: CostModel | None = None
    on_note: Callable[[str], None] | None = None



def given_calibration(path: Path | None) -> tuple[Path, Calibration] | None:
    """``--calibration FILE``, read and checked before anything else is."""
    if path is None:
        return None
    from ..calibrate import read_calibration, usable

    calibration = read_calibration(path)
    if (problem := usable(calibration)) is not None:
        raise UsageError(f"{path}: {problem}; run ddpprof calibrate again")
    return path, calibration


@dataclass(frozen=True)
class Transfer:
    """A recorded collective's transfer, as the fit over the run's own collectives takes it:
    from when its last member arrived to its end, less the overlap tax (its time alone)."""

    kind: str
    size_bytes: int
    time_us: float


def cost_model(run_path: Path, transfers: Callable[[], list[Transfer]], gradient_bytes: int,
               world: int, backend: str | None, costs: Costs, notes: list[str],
               recorded_here: bool) -> tuple[CostModel, Calibration | None]:
    """The cost model, and the calibration it came from (if any). ``transfers`` gives the
    run's own, for a fit, asked only when no calibration is found."""
    if costs.bandwidth_gbps is not None:
        return CostModel(costs.latency_us or 0.0, costs.bandwidth_gbps * 1e3, None, 0,
                         "given: --latency-us, --bandwidth-gbps"), None
    from ..calibrate import CALIBRATION_NAME, read_calibration, usable

    if costs.calibration is not None:
        path, calibration = costs.calibration
        _check_calibration(calibration, path, world, backend, notes)
        return calibration.cost_model(f"calibration {path}"), calibration
    folder = Path(run_path) if Path(run_path).is_dir() else Path(run_path).parent
    for candidate in (folder / CALIBRATION_NAME, folder.parent / CALIBRATION_NAME):
        if not candidate.is_file():
            continue
        calibration = read_calibration(candidate)
        if usable(calibration) is None and _same_backend(calibration.backend, backend):
            _check_calibration(calibration, candidate, world, backend, notes)
            return calibration.cost_model(f"calibration {candidate}"), calibration
    samples = [(traffic_bytes(t.kind, t.size_bytes, world, backend), t.time_us)
               for t in transfers() if t.size_bytes and t.time_us > 0]
    problem = "the run has no collectives" if not samples else None
    if samples:
        try:
            return fit_cost(np.array([s for s, _ in samples], dtype=float),
                            np.array([t for _, t in samples]),
                            f"fit over the run's {len(samples)} collective transfers"), None
        except UsageError as error:
            problem = str(error)
    if costs.fallback is not None:
        notes.append(f"cost model: {problem}; {costs.fallback.source}")
        return costs.fallback, None
    # A sweep here stands for the run's own machine only for a run ddpprof recorded on one node
    # with a backend it can launch.
    local = recorded_here and backend in ("gloo", "nccl")
    if not (costs.allow_sweep and local):
        why = "" if not costs.allow_sweep else (
            " (and the run was not recorded by ddpprof on one node with gloo or nccl, so a "
            "sweep on this machine would not stand for it)")
        raise UsageError(f"no cost model: {problem}, and no calibration.json beside the run"
                         f"{why}; run ddpprof calibrate where it ran, or give --latency-us and "
                         "--bandwidth-gbps")
    return _sweep(folder, gradient_bytes, world, backend, problem, notes, costs.on_note)


def _same_backend(calibrated: str | None, run: str | None) -> bool:
    return calibrated is None or run is None or calibrated in run


def _check_calibration(calibration: Calibration, path: Path, world: int, backend: str | None,
                       notes: list[str]) -> None:
    if calibration.world_size not in (None, world) and world > 1:
        notes.append(f"{path}: measured on {calibration.world_size} ranks, the run has {world}; "
                     "the model is scaled by ring traffic")
    if not _same_backend(calibration.backend, backend):
        notes.append(f"{path}: measured with {calibration.backend}, the run used {backend}")


def _sweep(folder: Path, gradient_bytes: int, world: int, backend: str | None,
           problem: str | None,
           notes: list[str], on_note: Callable[[str], None] | None,
           ) -> tuple[CostModel, Calibration]:
    """No cost model to be had: measure all-reduce here, with the run's backend and world size
    (2 for a single-process run), from 4 KiB to the run's gradient bytes (a power of two)."""
    from ..calibrate import CALIBRATION_NAME, Sweep, calibrate, sweep_sizes

    ranks = max(world, 2)
    largest = 1 << int(np.ceil(np.log2(max(gradient_bytes, 64 * 1024))))
    message = (f"{problem}, and no calibration.json beside the run: measuring all-reduce on "
               f"this machine ({backend or 'gloo'}, {ranks} ranks, 4 KiB to {largest:,} bytes) "
               f"into {folder / CALIBRATION_NAME}")
    if on_note:
        on_note(message)
    notes.append("cost model: " + message)
    sweep = Sweep(backend=backend or "gloo", nproc=ranks,
                  sizes_bytes=sweep_sizes(4096, largest), warmup_iters=3, iters=10)
    calibration = calibrate(sweep, folder, quiet=True)
    return calibration.cost_model(
        f"calibration {folder / CALIBRATION_NAME} (measured now)"), calibration
