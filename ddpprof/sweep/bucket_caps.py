"""``ddpprof sweep``: record and analyze the bucketed variants over a range of bucket sizes.

The bucket-size valley: small buckets start communicating early but pay the per-call latency
many times; big ones pay it once but start late and overlap little. Step time against bucket
size is a valley.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis import analyze_run, run_row
from ..core.errors import UsageError
from ..core.progress import Progress
from ..core.storage import Location
from ..record.launcher import Recording, record
from ..render.table import Column, columns
from ..run.discover import RunInput, is_trace_file
from ..variants import BUCKETED_VARIANT_NAMES, VARIANTS


@dataclass(frozen=True)
class SweepRow:
    """One run: a variant at one bucket cap. Step time is the median of the run's unprofiled
    steps (run.json); overlap, calls and exposed communication come from its profiled steps
    (``ddpprof analyze``'s definitions). The gradient collective is the variant's (the
    registry's ``gradient_collective``: all-reduce, or ZeRO's reduce-scatter)."""

    variant: str
    model: str
    nproc: int
    bucket_cap_mib: float
    run: str                                # its folder under --out
    status: str
    gradient_collective: str | None = None  # what a bucket is reduced by
    buckets: int | None = None              # gradient collectives per sync (run.json)
    step_ms: float | None = None
    samples_per_s: float | None = None
    overlap_pct: float | None = None
    gradient_calls_per_step: float | None = None
    exposed_comm_ms_per_step: float | None = None
    error: str | None = None


COLUMNS: list[Column] = [
    *columns("variant", "bucket_cap_mib", "status", "buckets", "step_ms", "overlap_pct",
             "gradient_calls_per_step", "exposed_comm_ms_per_step"),
    *columns(wide=("gradient_collective", "model", "nproc", "samples_per_s", "run", "error"))]


@dataclass(frozen=True)
class SweepDocument:
    """``ddpprof sweep --json`` (``simulate --measured`` reads it)."""

    models: list[str]
    nprocs: list[int]
    global_batch: int
    rows: list[SweepRow]
    schema: str = "ddpprof.sweep"
    #: 3: ``gradient_collective`` and ``gradient_calls_per_step`` (the variant's own
    #: collective) for 2's ``all_reduce_calls_per_step``
    version: int = 3


def check_variants(variants: list[str]) -> None:
    """Only variants with buckets (the registry's ``bucketed``) have a cap to sweep."""
    others = [v for v in variants if v not in BUCKETED_VARIANT_NAMES]
    if others:
        raise UsageError(f"--variant {others[0]}: it has no buckets to size (sweep "
                         f"{', '.join(BUCKETED_VARIANT_NAMES)})")


def sweep(base: Recording) -> list[SweepRow]:
    """One profiled run per variant under each of ``base.configs`` (models, ranks and bucket
    sizes; the variants interleaved at each), named as ``record`` names them
    (``ddpprof.record.grid``); a row of measurements for each."""
    check_variants(base.variants)
    planned = base.runs()
    rows = []
    progress = Progress(quiet=base.quiet, total=len(planned))
    for run in planned:
        config, size = run.config, run.config.bucket_cap_mib
        recording = Recording([run.variant], config, out=base.out, name=run.label, quiet=True)
        progress.start(f"{run.label} at {size:g} MiB", recording.run_dir(run.variant),
                       config.world_size)
        [outcome] = record(recording)
        speed = outcome.manifest.throughput
        progress.finish(outcome.status, speed.samples_per_s if speed else None, outcome.error)
        name, where = outcome.run_dir.name, (run.variant, config.model, config.nproc, size)
        if outcome.status != "complete" or speed is None or speed.median_step_s is None:
            rows.append(SweepRow(*where, name, outcome.status,
                                 error=outcome.error or "no step was timed"))
            continue
        traces: list[Location] = sorted(p for p in outcome.run_dir.iterdir() if is_trace_file(p))
        [analyzed] = analyze_run(RunInput(name, outcome.run_dir, traces))
        metrics = run_row(analyzed).metrics
        kind = VARIANTS[run.variant].gradient_collective
        measured = outcome.manifest.measured
        launched = (measured.collectives_per_sync if measured else None) or {}
        rows.append(SweepRow(
            *where, name, outcome.status, gradient_collective=kind, buckets=launched.get(kind),
            step_ms=speed.median_step_s * 1e3, samples_per_s=speed.samples_per_s,
            overlap_pct=metrics.overlap_pct,
            gradient_calls_per_step=metrics.collectives[kind].calls_per_step,
            exposed_comm_ms_per_step=metrics.exposed_comm_ms_per_step))
    return rows


def series(row: SweepRow, rows: list[SweepRow]) -> str:
    """The valley a row belongs to: its variant, with the model and ranks when they vary."""
    label = row.variant
    if len({r.model for r in rows}) > 1:
        label += f" {row.model}"
    if len({r.nproc for r in rows}) > 1:
        label += f" x{row.nproc}"
    return label


def best_sizes(rows: list[SweepRow]) -> dict[str, float]:
    """Per valley (``series``), the bucket size with the shortest measured step."""
    best: dict[str, SweepRow] = {}
    for row in rows:
        if row.step_ms is None:
            continue
        known = best.get(key := series(row, rows))
        if known is None or known.step_ms is None or row.step_ms < known.step_ms:
            best[key] = row
    return {key: row.bucket_cap_mib for key, row in best.items()}
