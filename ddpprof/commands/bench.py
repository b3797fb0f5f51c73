"""``ddpprof bench``: the scaling table over models, variants and process counts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..bench import scaling as benching
from ..metrics import sanity
from ..record.launcher import Recording, validate
from ..render.output import Output, Outputs
from ..render.table import Table
from ..report.console import FLAGGED
from ..report.pages import bench_page
from ..run.config import RunConfig
from . import require_record_extra

if TYPE_CHECKING:
    from ..bench.scaling import BenchRow


@dataclass(frozen=True)
class BenchOptions:
    """``ddpprof bench``'s options, as parsed (``ddpprof.cli``)."""

    models: tuple[str, ...]
    variants: tuple[str, ...]
    nprocs: tuple[int, ...]
    repeats: int
    steps: int
    global_batch: int
    backend: str
    warmup_steps: int
    overhead: bool
    out: Path


def bench(chosen: BenchOptions, outputs: Outputs) -> Output:
    models, variants, nprocs = list(chosen.models), list(chosen.variants), list(chosen.nprocs)
    repeats, warmup_steps, out = chosen.repeats, chosen.warmup_steps, chosen.out
    steps, global_batch, backend = chosen.steps, chosen.global_batch, chosen.backend
    require_record_extra("bench")
    benching.check_variants(variants)
    outputs.check("bench", runs_under=[out])
    base = Recording(variants, RunConfig(model=models[0], nproc=max(nprocs), steps=steps,
                                         global_batch=global_batch, backend=backend,
                                         profile=False), out=out, quiet=outputs.quiet)
    for model in models:  # every configuration is checked before the first run
        validate(Recording(variants, base.config.replace(model=model), out=out))
    rows = benching.bench(models, variants, nprocs, base, repeats, warmup_steps,
                          chosen.overhead)
    document = benching.BenchDocument(repeats, warmup_steps, global_batch, steps, rows)
    shown, notes = checked_speedups(rows)
    table = Table(benching.COLUMNS, shown)

    def page() -> str:
        return bench_page(document, table)

    return Output(document, [table], page=page, page_name="bench", title="ddpprof bench",
                  notes=notes, ran=True)


def checked_speedups(rows: list[BenchRow]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows as the table shows them: a speedup beyond the process count (and its
    efficiency) as ``console.FLAGGED``, with a note saying why (``ddpprof.metrics.sanity``); the
    JSON keeps the numbers."""
    shown, notes = [], []
    for row in rows:
        line = asdict(row)
        flag = sanity.speedup("speedup", row.speedup, row.nproc)
        if flag is not None:
            line.update(speedup=FLAGGED, efficiency=FLAGGED)
            notes.append(flag.note(f"{row.model} {row.variant} x{row.nproc}"))
        shown.append(line)
    return shown, notes
