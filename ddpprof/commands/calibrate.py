"""``ddpprof calibrate``: the all-reduce sweep and its fit, written to OUT/calibration.json."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.errors import RunFailed, UsageError
from ..render.output import Output, Outputs
from ..render.table import Table
from ..report.pages import calibration_page
from ..simulate import calibrate as calibration
from . import require_record_extra


@dataclass(frozen=True)
class CalibrateOptions:
    """``ddpprof calibrate``'s options, as parsed (``ddpprof.cli``)."""

    backend: str
    nprocs: tuple[int, ...]
    nnodes: int
    node_rank: int
    rdzv_endpoint: str | None
    timeout_s: float
    min_bytes: int
    max_bytes: int
    step_factor: float
    warmup_iters: int
    iters: int
    tax_from: Path | None
    out: Path


def calibrate(chosen: CalibrateOptions, outputs: Outputs) -> Output:
    nprocs, node_rank, out, tax_from = (chosen.nprocs, chosen.node_rank, chosen.out,
                                        chosen.tax_from)
    require_record_extra("calibrate")

    if len(nprocs) != 1:
        raise UsageError("--nproc: a calibration measures one world size; give one value")
    outputs.check("calibration", folders=[out])
    tax = calibration.tax_from(tax_from) if tax_from is not None else None
    sweep = calibration.Sweep(
        backend=chosen.backend, nproc=nprocs[0], nnodes=chosen.nnodes, node_rank=node_rank,
        rdzv_endpoint=chosen.rdzv_endpoint, timeout_s=chosen.timeout_s,
        sizes_bytes=calibration.sweep_sizes(chosen.min_bytes, chosen.max_bytes,
                                            chosen.step_factor),
        warmup_iters=chosen.warmup_iters, iters=chosen.iters)
    result = calibration.calibrate(sweep, out, outputs.quiet, tax)
    target = out / calibration.CALIBRATION_NAME
    if not result.points:  # another node's launcher: node 0 writes the file
        return Output(result, notes=[f"node {node_rank}: sweep done; node 0 writes {target}"],
                      title="ddpprof calibrate", ran=True)
    if result.fit is None:
        raise RunFailed(f"{target}: the sweep ran, but {result.error}; measure a wider range "
                        "of sizes (--max-bytes)")
    rows = calibration.point_rows(result)
    table = Table(calibration.COLUMNS, rows)
    summary = calibration.describe(result)

    def page() -> str:
        return calibration_page(summary, table, rows)

    return Output(result, [table], notes=[summary, f"written: {target}"], page=page,
                  page_name="calibration", title="ddpprof calibrate", ran=True)
