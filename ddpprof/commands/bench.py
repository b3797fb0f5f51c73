"""``ddpprof bench``: the scaling table over models, variants and process counts."""

from __future__ import annotations

from pathlib import Path

from ..record.config import RunConfig
from ..report.output import Output, Outputs
from ..report.table import Table
from . import require_record_extra


def bench(models: list[str], variants: list[str], nprocs: list[int], repeats: int,
          steps: int, global_batch: int, backend: str, warmup_steps: int, overhead: bool,
          out: Path, outputs: Outputs) -> Output:
    require_record_extra("bench")
    from .. import bench as benching
    from ..record.launcher import Recording, validate

    benching.check_variants(variants)
    outputs.check("bench", runs_under=[out])
    base = Recording(variants, RunConfig(model=models[0], nproc=max(nprocs), steps=steps,
                                         global_batch=global_batch, backend=backend,
                                         profile=False), out=out, quiet=outputs.quiet)
    for model in models:  # every configuration is checked before the first run
        validate(Recording(variants, base.config.replace(model=model), out=out))
    rows = benching.bench(models, variants, nprocs, base, repeats, warmup_steps, overhead)
    document = benching.BenchDocument(repeats, warmup_steps, global_batch, steps, rows)
    table = Table(benching.COLUMNS, rows)

    def page() -> str:
        from ..report.pages import bench_page

        return bench_page(document, table)

    return Output(document, [table], page=page, page_name="bench", title="ddpprof bench",
                  ran=True)
