"""A simulation as text, rows and a JSON document (``ddpprof simulate``'s output)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec

from ..core.errors import UsageError
from ..core.json_input import read_json_bytes
from ..core.units import KIB, MIB
from ..metrics import sanity
from ..run.manifest import RunManifest, validation_problem
from ..variants import DEFAULT_BUCKET_CAP_MIB
from .results import Measured, SimulateRow, Simulation, best, median_error_pct


class CostDocument(msgspec.Struct, kw_only=True):
    alpha_us: float
    beta_gbps: float                    # bus bandwidth the model tends to for large calls
    r2: float | None
    samples: int
    source: str


class TaxDocument(msgspec.Struct, kw_only=True):
    """The overlap tax the replays applied (fractions: 0.2 is 20% longer when overlapped from
    start to end), and where it came from."""

    compute: dict[str, float]
    communication: float
    source: str


class SimulateDocument(msgspec.Struct, kw_only=True):
    """``ddpprof simulate --json``: schema ``ddpprof.simulate``, version 5 (``overlap_tax``,
    ``cost_level`` and ``edits`` for ``contention``; 4: ``steps``; 3: rows name the cap
    ``bucket_cap_mib``)."""

    schema: str = "ddpprof.simulate"
    version: int = 5
    run: str
    variant: str | None
    world_size: int
    #: The ProfilerSteps replayed: the analyzed window's (``analyze``'s) that every rank has
    steps: list[str]
    rows: list[SimulateRow]
    cost: CostDocument
    cost_level: float
    overlap_tax: TaxDocument
    edits: list[str]
    measured: Measured
    profiler_overhead_ratio: float
    notes: list[str]


def rows(simulation: Simulation, sweep_points: dict[float, float]) -> list[SimulateRow]:
    table = []
    for p in simulation.predictions:
        measured = None
        if p.world_size == simulation.world_size:
            if p.recorded:
                measured = simulation.measured.step_ms
            elif p.bucket_cap_mib is not None:
                measured = sweep_points.get(p.bucket_cap_mib)
        table.append(SimulateRow(
            variant=p.variant, world_size=p.world_size, bucket_cap_mib=p.bucket_cap_mib,
            buckets=p.buckets, step_ms=p.step_ms,
            exposed_comm_ms_per_step=p.exposed_comm_ms_per_step,
            overlap_pct=p.overlap_pct, efficiency=p.efficiency, recorded=p.recorded,
            measured_step_ms=measured,
            error_pct=100 * (p.step_ms - measured) / measured if measured else None))
    return table


def summary_lines(simulation: Simulation) -> list[str]:
    """How the simulation was set up: cost model, level, overlap tax, steps, edits, notes."""
    cost, tax = simulation.cost, simulation.tax
    fit = f", R² = {cost.r2:.3f}" if cost.r2 is not None else ""
    if cost.curve:
        fit += (f"; between {cost.curve[0][0] / KIB:,.0f} KiB and {cost.curve[-1][0] / MIB:,.0f}"
                " MiB of traffic, the sweep's measured times")
    compute = ", ".join(f"{name} {100 * value:.1f}%" for name, value in tax.compute.items())
    if sanity.bandwidth("β", cost.beta_bytes_per_us / 1e3) is not None:
        model = f"cost model: {cost.source} (the run's own configuration only)"
    else:
        model = (f"cost model: α = {cost.alpha_us:.1f} µs, β = "
                 f"{cost.beta_bytes_per_us / 1e3:.3f} GB/s bus bandwidth ({cost.source}{fit}); "
                 f"the run's transfers took {simulation.cost_level:.2f}x its time (each step is "
                 "replayed at its own level)")
    ranks = f"{simulation.world_size} rank" + ("s" if simulation.world_size != 1 else "")
    lines = [
        model,
        f"overlap tax ({simulation.tax_source}): compute beside a collective {compute} longer; "
        f"a collective beside compute {100 * tax.communication:.1f}% longer",
        f"step graphs from {_steps_text(simulation.steps)} ({len(simulation.steps)} step"
        f"{'s' if len(simulation.steps) != 1 else ''}, {ranks}); profiler overhead "
        f"{simulation.overhead_ratio:.3f}x divided out"]
    if simulation.edits:
        lines.append(f"every row with: {', '.join(simulation.edits)}")
    return lines + [f"note: {note}" for note in simulation.notes]


def _steps_text(steps: list[str]) -> str:
    """``ProfilerStep#1`` or ``ProfilerStep#1 to ProfilerStep#3``."""
    return steps[0] if len(steps) == 1 else f"{steps[0]} to {steps[-1]}"


def verdict_lines(simulation: Simulation) -> list[str]:
    """The run's own configuration against its measurement, and the best cap per world
    size."""
    lines = []
    own, measured = simulation.own, simulation.measured
    if own is not None:
        error = f" ({100 * (own.step_ms / measured.step_ms - 1):+.1f}%)" \
            if measured.step_ms else ""
        overlap = "n/a" if own.overlap_pct is None else f"{own.overlap_pct:.1f}%"
        seen = "n/a" if measured.overlap_pct is None else f"{measured.overlap_pct:.1f}%"
        label = "" if own.variant == "as recorded" else f" ({own.variant})"
        lines.append(f"as recorded{label}: predicted {own.step_ms:.2f} ms per step, "
                     f"measured {_ms(measured.step_ms)}{error}"
                     f"{f' ({measured.step_source})' if measured.step_ms else ''}; "
                     f"overlap predicted {overlap}, measured {seen} (trace)")
    for n, top in best(simulation.predictions).items():
        default = next((p for p in simulation.predictions if p.world_size == n
                        and p.bucket_cap_mib == DEFAULT_BUCKET_CAP_MIB
                        and p.variant == top.variant), None)
        gap = (f"; the default {DEFAULT_BUCKET_CAP_MIB:g} MiB is "
               f"{100 * (default.step_ms / top.step_ms - 1):.1f}% slower" if default else "")
        lines.append(f"world size {n}: best predicted bucket {top.bucket_cap_mib:g} MiB "
                     f"({top.variant}), {top.step_ms:.2f} ms{gap}")
    # the points measured elsewhere (--measured): the recorded one is told above
    others = [(r.step_ms, r.measured_step_ms) for r in simulation.rows
              if r.measured_step_ms and not r.recorded]
    median = median_error_pct(others)
    if median is not None:
        lines.append(f"measured points ({len(others)}, the recorded one aside): median "
                     f"|error| {median:.1f}%")
    return lines


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} ms"


def to_json_document(simulation: Simulation) -> SimulateDocument:
    cost, tax = simulation.cost, simulation.tax
    return SimulateDocument(
        run=simulation.run, variant=simulation.variant, world_size=simulation.world_size,
        steps=simulation.steps, rows=simulation.rows,
        cost=CostDocument(alpha_us=cost.alpha_us, beta_gbps=cost.beta_bytes_per_us / 1e3,
                          r2=cost.r2, samples=cost.samples, source=cost.source),
        cost_level=simulation.cost_level,
        overlap_tax=TaxDocument(compute=dict(tax.compute), communication=tax.communication,
                                source=simulation.tax_source),
        edits=simulation.edits, measured=simulation.measured,
        profiler_overhead_ratio=simulation.overhead_ratio, notes=simulation.notes)


class _MeasuredRow(msgspec.Struct):
    variant: str | None = None
    bucket_cap_mib: Annotated[float, msgspec.Meta(ge=0, le=1e9)] | None = None
    bucket_cap_mb: Annotated[float, msgspec.Meta(ge=0, le=1e9)] | None = None   # version 1
    step_ms: Annotated[float, msgspec.Meta(ge=0, le=1e9)] | None = None


class _SweepFile(msgspec.Struct):
    schema: str
    rows: list[_MeasuredRow]


def measured_steps(path: Path, manifest: RunManifest) -> dict[float, float]:
    """Measured step ms by bucket size from a ``sweep --json`` file: the rows of the run's own
    variant (what its re-bucketed replays predict). Every problem with the file is one
    ``UsageError`` naming it (and the row and field)."""
    data = read_json_bytes(path)
    try:
        document = msgspec.json.decode(data, type=_SweepFile)
    except msgspec.ValidationError as error:
        raise UsageError(f"{path}: not a `ddpprof sweep --json` file "
                         f"({validation_problem(error)})") from None
    except msgspec.DecodeError as error:
        raise UsageError(f"{path}: not JSON ({error})") from None
    if document.schema != "ddpprof.sweep":
        raise UsageError(f"{path}: not a `ddpprof sweep --json` file (schema "
                         f"{document.schema!r})")
    variant = manifest.config.variant if manifest.config else None
    points: dict[float, float] = {}
    for index, row in enumerate(document.rows):
        cap = row.bucket_cap_mib if row.bucket_cap_mib is not None else row.bucket_cap_mb
        if row.step_ms is None:
            continue
        if cap is None or not (0 < cap < float("inf")) or not 0 < row.step_ms < float("inf"):
            raise UsageError(f"{path}: rows[{index}]: needs a positive bucket_cap_mib and "
                             "step_ms")
        if row.variant == variant:
            points[cap] = row.step_ms
    return points
