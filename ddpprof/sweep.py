"""``ddpprof sweep``: record and analyze the bucketed variants over a range of bucket sizes.

Seed 002's trade-off, measured: small buckets start communicating early but pay the per-call
latency many times; big ones pay it once but start late and overlap little. Step time against
bucket size is a valley.
"""

from __future__ import annotations

from typing import Any

from .analysis import analyze_run, run_row
from .errors import UsageError
from .progress import Progress
from .record.launcher import Recording, record
from .trace.discover import RunInput, is_trace_file

BUCKETED = ("bucket_ddp_async", "pytorch_ddp")
DEFAULT_BUCKET_CAP_MB = 25.0


def sweep(variants: list[str], sizes_mb: list[float], base: Recording) -> list[dict[str, Any]]:
    """One profiled run per (bucket size, variant), the variants interleaved at each size; a row
    of measurements for each."""
    others = [v for v in variants if v not in BUCKETED]
    if others:
        raise UsageError(f"variant {others[0]!r} has no buckets to size "
                         f"(sweep {', '.join(BUCKETED)})")
    rows = []
    progress = Progress(quiet=base.quiet, total=len(sizes_mb) * len(variants))
    for size in sizes_mb:
        for variant in variants:
            recording = Recording([variant], base.config.replace(bucket_cap_mb=size),
                                  out=base.out, name=f"{variant}-cap{size:g}", quiet=True)
            progress.start(f"{variant} at {size:g} MiB", recording.run_dir(variant),
                           base.config.world_size)
            [outcome] = record(recording)
            speed = outcome.manifest.throughput
            progress.finish(outcome.status, speed.samples_per_s if speed else None,
                            outcome.error)
            row: dict[str, Any] = {"variant": variant, "bucket_cap_mb": size,
                                   "run": outcome.run_dir.name, "status": outcome.status}
            if outcome.status == "complete":
                traces = sorted(p for p in outcome.run_dir.iterdir() if is_trace_file(p))
                [analyzed_run] = analyze_run(RunInput(outcome.run_dir.name, outcome.run_dir,
                                                      traces))
                analyzed = run_row(analyzed_run).to_dict()
                assert speed is not None and speed.median_step_s is not None
                row.update(step_ms=speed.median_step_s * 1e3,
                           samples_per_s=speed.samples_per_s,
                           overlap_pct=analyzed["overlap_pct"],
                           all_reduce_calls_per_step=analyzed["all_reduce_calls_per_step"],
                           exposed_comm_ms_per_step=analyzed["exposed_comm_ms_per_step"],
                           buckets=outcome.manifest.config.allreduces_per_sync)
            else:
                row["error"] = outcome.error
            rows.append(row)
    return rows


def best_sizes(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per variant, the bucket size with the shortest measured step."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row.get("step_ms") is not None and (row["variant"] not in best
                                               or row["step_ms"] < best[row["variant"]]["step_ms"]):
            best[row["variant"]] = row
    return {variant: row["bucket_cap_mb"] for variant, row in best.items()}


