"""Where the simulator's cost model comes from.

First found of: ``--latency-us``/``--bandwidth-gbps``; ``--calibration FILE``; a complete
``calibration.json`` of the run's backend that ``ddpprof calibrate`` wrote in the run folder
or its parent; a fit over the run's own collectives' transfers (their sizes from the trace's
arguments); a fallback (``analyze``'s fit over every run it read). Nothing is measured or
written here: without any of them there is no cost model, and what needs one (other world
sizes, other bucket caps) is not predicted, with a line that says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import UsageError
from ..metrics import sanity
from ..metrics.cost import CostModel, FitError, fit_cost, traffic_bytes
from .calibrate import CALIBRATION_NAME, read_calibration, usable

if TYPE_CHECKING:
    from .calibrate import Calibration


@dataclass(frozen=True)
class Costs:
    """Where the cost model may come from (``sources``): ``--bandwidth-gbps`` with
    ``--latency-us``, a given calibration, or ``fallback`` (``analyze``'s fit over the
    collectives of all the runs it read)."""

    bandwidth_gbps: float | None = None
    latency_us: float | None = None
    calibration: tuple[Path, Calibration] | None = None
    fallback: CostModel | None = None



def given_calibration(path: Path | None) -> tuple[Path, Calibration] | None:
    """``--calibration FILE``, read and checked before anything else is."""
    if path is None:
        return None

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


def cost_model(run_path: Path, transfers: Callable[[], list[Transfer]], world: int,
               backend: str | None, costs: Costs, notes: list[str]
               ) -> tuple[CostModel, Calibration | None]:
    """The cost model, and the calibration it came from (if any). ``transfers`` gives the
    run's own, for a fit, asked only when no calibration is found. Raises ``UsageError``,
    saying why, when there is none."""
    if costs.bandwidth_gbps is not None:
        return CostModel(costs.latency_us or 0.0, costs.bandwidth_gbps * 1e3, None, 0,
                         "given: --latency-us, --bandwidth-gbps"), None

    if costs.calibration is not None:
        path, calibration = costs.calibration
        _check_calibration(calibration, path, world, backend, notes)
        return calibration.cost_model(f"calibration {path}"), calibration
    folder = Path(run_path) if Path(run_path).is_dir() else Path(run_path).parent
    passed_over = []
    for candidate in (folder / CALIBRATION_NAME, folder.parent / CALIBRATION_NAME):
        if not candidate.is_file():
            continue
        calibration = read_calibration(candidate)
        unusable = usable(calibration)
        if unusable is None and _same_backend(calibration.backend, backend):
            _check_calibration(calibration, candidate, world, backend, notes)
            return calibration.cost_model(f"calibration {candidate}"), calibration
        passed_over.append(f"{candidate} ({unusable})" if unusable is not None else
                           f"{candidate} (measured with {calibration.backend}, the run used "
                           f"{backend})")
    samples = [(traffic_bytes(t.kind, t.size_bytes, world, backend), t.time_us)
               for t in transfers() if t.size_bytes and t.time_us > 0]
    problem = ("the trace's collectives record no message sizes" if not samples else "")
    if samples:
        try:
            fitted = fit_cost(np.array([s for s, _ in samples], dtype=float),
                              np.array([t for _, t in samples]),
                              f"fit over the run's {len(samples)} collective transfers")
            flag = sanity.fit("the cost model", fitted.r2)
            if flag is None:
                return fitted, None
            problem = (f"the fit over the run's {len(samples)} collective transfers has R² = "
                       f"{fitted.r2:.3f}: {flag.problem}")
        except FitError as error:
            problem = str(error)
    if costs.fallback is not None:
        notes.append(f"cost model: {problem}; {costs.fallback.source}")
        return costs.fallback, None
    beside = (f"the calibration beside the run is passed over: {'; '.join(passed_over)}"
              if passed_over else "no calibration.json beside the run")
    raise UsageError(f"no cost model: {problem}, and {beside} (ddpprof calibrate where it "
                     "ran, or --latency-us and --bandwidth-gbps)")


def _same_backend(calibrated: str | None, run: str | None) -> bool:
    return calibrated is None or run is None or calibrated in run


def _check_calibration(calibration: Calibration, path: Path, world: int, backend: str | None,
                       notes: list[str]) -> None:
    if calibration.world_size not in (None, world) and world > 1:
        notes.append(f"{path}: measured on {calibration.world_size} ranks, the run has {world}; "
                     "the model is scaled by ring traffic")
    if not _same_backend(calibration.backend, backend):
        notes.append(f"{path}: measured with {calibration.backend}, the run used {backend}")
