"""``ddpprof sweep``: the bucketed variants over a range of bucket sizes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..record import grid
from ..record.launcher import Recording
from ..render.output import Output, Outputs
from ..render.table import Table
from ..report.pages import sweep_page
from ..run.config import RunConfig
from ..sweep import bucket_caps as sweeping
from . import require_record_extra


@dataclass(frozen=True)
class SweepOptions:
    """``ddpprof sweep``'s options, as parsed (``ddpprof.cli``)."""

    variants: tuple[str, ...]
    bucket_caps_mib: tuple[float, ...]
    models: tuple[str, ...]
    nprocs: tuple[int, ...]
    steps: int
    global_batch: int
    backend: str
    out: Path


def sweep(chosen: SweepOptions, outputs: Outputs) -> Output:
    variants, models, nprocs = list(chosen.variants), list(chosen.models), list(chosen.nprocs)
    steps, global_batch, backend, out = (chosen.steps, chosen.global_batch, chosen.backend,
                                         chosen.out)
    require_record_extra("sweep")
    sweeping.check_variants(variants)
    outputs.check("sweep", runs_under=[out])
    base_config = RunConfig(model=models[0], nproc=nprocs[0], steps=steps,
                            global_batch=global_batch, backend=backend)
    base = Recording(variants, base_config, out=out, quiet=outputs.quiet,
                     configs=tuple(grid.configs(base_config, models, nprocs,
                                                    list(chosen.bucket_caps_mib))))
    rows = sweeping.sweep(base)
    document = sweeping.SweepDocument(models, nprocs, global_batch, rows)
    table = Table(sweeping.COLUMNS, rows)
    failed = [r for r in rows if r.status != "complete"]

    def page() -> str:
        return sweep_page(document, table)

    best = sweeping.best_sizes(rows)
    return Output(document, [table], notes=[f"{series}: fastest at {size:g} MiB"
                                            for series, size in best.items()],
                  page=page, page_name="sweep", title="ddpprof sweep", ran=True,
                  errors=[f"{len(failed)} of {len(rows)} runs failed: "
                          + "; ".join(f"{r.run} ({r.error})" for r in failed)] if failed else [],
                  exit_code=1 if failed else 0)
