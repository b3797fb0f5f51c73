"""A simulation as text, rows and JSON (``ddpprof simulate``'s output)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..errors import UsageError
from ..manifest import RunManifest
from .results import Simulation, best, median_error_pct


def rows(simulation: Simulation, sweep_points: dict[float, float]) -> list[dict]:
    rows = []
    for p in simulation.predictions:
        measured = None
        if p.world_size == simulation.world_size:
            if p.recorded:
                measured = simulation.measured.step_ms
            elif p.bucket_cap_mb is not None:
                measured = sweep_points.get(p.bucket_cap_mb)
        row = {key: value for key, value in p.__dict__.items()}
        row["measured_step_ms"] = measured
        row["error_pct"] = 100 * (p.step_ms - measured) / measured if measured else None
        rows.append(row)
    return rows


def summary_lines(simulation: Simulation) -> list[str]:
    """How the simulation was set up: cost model, contention, step model, notes."""
    cost, contention = simulation.cost, simulation.contention
    fit = f", R² = {cost.r2:.3f}" if cost.r2 is not None else ""
    programs = simulation.programs
    part = lambda attribute: statistics.median(  # noqa: E731
        getattr(p, attribute) for p in programs) / 1e3
    lines = [
        f"cost model: α = {cost.alpha_us:.1f} µs, β = {cost.beta_bytes_per_us / 1e3:.3f} GB/s "
        f"bus bandwidth ({cost.source}{fit})",
        f"contention: compute {contention.compute_slowdown:.2f}x slower beside a collective; "
        f"collectives {contention.comm_alone:.2f}x the model alone, "
        f"{contention.comm_overlapped:.2f}x beside compute (over the run; each step is "
        "replayed with its own)",
        f"step model from {simulation.trace_name} (median of {len(programs)} profiled steps, "
        f"world size {simulation.world_size}): before backward {part('pre_us'):.2f} ms, "
        f"backward {part('backward_us'):.2f} ms ({len(programs[0].grads)} gradients), sync "
        f"{part('sync_us'):.2f} ms, optimizer {part('post_us'):.2f} ms; profiler overhead "
        f"{simulation.overhead_ratio:.3f}x divided out"]
    return lines + [f"note: {note}" for note in simulation.notes]


def verdict_lines(simulation: Simulation, default_cap_mb: float) -> list[str]:
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
                     f"measured {_ms(measured.step_ms)}{error}; overlap predicted {overlap}, "
                     f"measured {seen} (trace)")
    for n, top in best(simulation.predictions).items():
        default = next((p for p in simulation.predictions if p.world_size == n
                        and p.bucket_cap_mb == default_cap_mb and p.variant == top.variant),
                       None)
        gap = (f"; the default {default_cap_mb:g} MiB is "
               f"{100 * (default.step_ms / top.step_ms - 1):.1f}% slower" if default else "")
        lines.append(f"world size {n}: best predicted bucket {top.bucket_cap_mb:g} MiB "
                     f"({top.variant}), {top.step_ms:.2f} ms{gap}")
    error = median_error_pct([(r["step_ms"], r["measured_step_ms"]) for r in simulation.rows
                              if r["measured_step_ms"]])
    if error is not None:
        lines.append(f"measured points: median |error| {error:.1f}%")
    return lines


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} ms"


def to_json_document(simulation: Simulation) -> dict:
    """``simulate --json``: schema ``ddpprof.simulate``, version 2."""
    cost, contention = simulation.cost, simulation.contention
    return {"schema": "ddpprof.simulate", "version": 2, "run": simulation.run,
            "variant": simulation.variant, "world_size": simulation.world_size,
            "rows": simulation.rows,
            "cost": {"alpha_us": cost.alpha_us, "beta_gbps": cost.beta_bytes_per_us / 1e3,
                     "r2": cost.r2, "samples": cost.samples, "source": cost.source},
            "contention": {"compute_slowdown": contention.compute_slowdown,
                           "comm_alone": contention.comm_alone,
                           "comm_overlapped": contention.comm_overlapped},
            "measured": simulation.measured.__dict__,
            "profiler_overhead_ratio": simulation.overhead_ratio, "notes": simulation.notes}


def measured_steps(path: Path, manifest: RunManifest) -> dict[float, float]:
    """Measured step ms by bucket size from a sweep file: its bucket_ddp_async rows (what the
    replay models), else the run's own variant's."""
    try:
        rows = json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{path}: not a `ddpprof sweep --json` file ({error})") from None
    variants = {r.get("variant") for r in rows}
    variant = manifest.config.variant if manifest.config.variant in variants \
        else "bucket_ddp_async"
    return {float(r["bucket_cap_mb"]): r["step_ms"] for r in rows
            if r.get("step_ms") and r.get("variant") == variant}
