"""``ddpprof variants``: the data-parallel variants ``record`` can run, from the registry."""

from __future__ import annotations

from dataclasses import dataclass

from ..report.output import Output, Outputs
from ..report.table import Column, Table
from ..variants import VARIANTS


@dataclass(frozen=True)
class VariantRow:
    name: str
    description: str
    distributed: bool           # one process per rank under a process group
    bucketed: bool              # --bucket-cap-mib changes what it does
    zero_stage: int             # what each rank holds a shard of (0: nothing)
    default_grad_accum: int


COLUMNS = [Column("name"), Column("description", max_width=70),
           Column("bucketed", wide=True), Column("zero_stage", wide=True),
           Column("distributed", wide=True), Column("default_grad_accum", wide=True)]


@dataclass(frozen=True)
class VariantsDocument:
    variants: list[VariantRow]
    schema: str = "ddpprof.variants"
    version: int = 1


def variants(outputs: Outputs) -> Output:
    outputs.check("variants")
    rows = [VariantRow(info.name, info.description, info.distributed, info.bucketed,
                       info.zero_stage, info.default_grad_accum) for info in VARIANTS.values()]
    return Output(VariantsDocument(rows), [Table(COLUMNS, rows)], title="ddpprof variants")


def help_text() -> list[str]:
    """One line per variant, for ``record --help``."""
    return [f"{info.name}: {info.description}" for info in VARIANTS.values()]
