"""``ddpprof variants``: the data-parallel variants ``record`` can run, from the registry."""

from __future__ import annotations

from dataclasses import dataclass

from ..render.output import Output, Outputs
from ..render.table import Column, Table
from ..variants import VARIANTS


@dataclass(frozen=True)
class VariantRow:
    name: str
    description: str
    distributed: bool           # one process per rank under a process group
    bucketed: bool              # --bucket-cap-mib changes what it does
    zero_stage: int             # what each rank holds a shard of (0: nothing)
    default_grad_accum: int
    gradient_collective: str | None  # what its gradient sync launches
    blocking: bool              # all its communication blocks, after backward
    gradient_sync: str          # how it syncs its gradients (the registry's GradientSync)


COLUMNS = [Column("name"), Column("description", max_width=70),
           *(Column(name, wide=True) for name in (
               "bucketed", "zero_stage", "distributed", "default_grad_accum",
               "gradient_collective", "blocking", "gradient_sync"))]


@dataclass(frozen=True)
class VariantsDocument:
    variants: list[VariantRow]
    schema: str = "ddpprof.variants"
    version: int = 3            # 2: gradient_collective, blocking, replay; 3: gradient_sync


def variants(outputs: Outputs) -> Output:
    outputs.check("variants")
    rows = [VariantRow(info.name, info.description, info.distributed, info.bucketed,
                       info.zero_stage, info.default_grad_accum,
                       info.gradient_collective if info.distributed else None,
                       info.blocking, info.gradient_sync) for info in VARIANTS.values()]
    return Output(VariantsDocument(rows), [Table(COLUMNS, rows)], title="ddpprof variants")


def help_text() -> list[str]:
    """One line per variant, for ``record --help``."""
    return [f"{info.name}: {info.description}" for info in VARIANTS.values()]
