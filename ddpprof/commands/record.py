"""``ddpprof record``: every variant under every combination of the list options, through
torchrun (``ddpprof.record.launcher``; folder names in ``ddpprof.record.grid``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError, describe_os_error
from ..record import grid
from ..record.launcher import Recording, RunOutcome
from ..record.launcher import record as record_runs
from ..render.output import Output, Outputs
from ..render.table import Column, Table, columns
from ..run.config import RunConfig
from . import require_record_extra

if TYPE_CHECKING:
    from workloads.faults import FaultSpec


@dataclass(frozen=True)
class RecordRow:
    """One recorded run, from its run.json."""

    run: str
    variant: str
    status: str
    model: str | None
    ranks: int | None
    grad_accum: int | None
    bucket_cap_mib: float | None
    step_ms: float | None              # median unprofiled step
    samples_per_s: float | None
    allreduces_per_step: int | None
    folder: str
    error: str | None


COLUMNS: list[Column] = columns(
    "run", "variant", "status", "ranks", "step_ms", "samples_per_s", "allreduces_per_step",
    wide=("model", "grad_accum", "bucket_cap_mib", "folder", "error"))


@dataclass(frozen=True)
class RecordDocument:
    """``ddpprof record --json``: one row per run."""

    runs: list[RecordRow]
    schema: str = "ddpprof.record"
    version: int = 2


def row(outcome: RunOutcome) -> RecordRow:
    manifest, speed = outcome.manifest, outcome.manifest.throughput
    config = manifest.config
    assert config is not None  # record writes it before the launch
    return RecordRow(
        run=outcome.run_dir.name, variant=outcome.variant, status=outcome.status,
        model=config.model, ranks=config.world_size, grad_accum=config.grad_accum,
        bucket_cap_mib=config.bucket_cap_mib,
        step_ms=speed.median_step_s * 1e3 if speed and speed.median_step_s else None,
        samples_per_s=speed.samples_per_s if speed else None,
        allreduces_per_step=manifest.measured.allreduces_per_sync if manifest.measured
        else None, folder=str(outcome.run_dir), error=outcome.error)


@dataclass(frozen=True)
class RecordOptions:
    """``ddpprof record``'s options, as parsed (``ddpprof.cli``); ``config``: the run
    configuration's own options (``record.config.record_option_fields``), by field."""

    variants: tuple[str, ...]
    models: tuple[str, ...]
    nprocs: tuple[int, ...]
    bucket_caps_mib: tuple[float, ...]
    out: Path
    name: str | None
    faults: tuple[FaultSpec, ...]
    config: Mapping[str, Any]


def record(chosen: RecordOptions, outputs: Outputs) -> Output:
    require_record_extra("record")

    out = chosen.out
    base = RunConfig(**chosen.config)
    recording = Recording(list(chosen.variants), base, out, chosen.name, outputs.quiet,
                          configs=tuple(grid.configs(base, list(chosen.models),
                                                     list(chosen.nprocs),
                                                     list(chosen.bucket_caps_mib))),
                          faults=chosen.faults)
    outputs.check("record", folders=[*recording.targets(),
                                     *(recording.run_dir(r.label) for r in recording.runs())])
    try:
        outcomes = record_runs(recording)
    except OSError as error:
        # Runs that fail to write are marked and reported as runs; what escapes here failed
        # before anything was recorded (claiming or clearing the folders: a full disk).
        raise UsageError(describe_os_error(error.filename or out, error)) from None
    rows = [row(outcome) for outcome in outcomes]
    failed = [o for o in outcomes if o.status != "complete"]
    details = "; ".join(
        f"{o.run_dir.name} ({o.error}; log: {o.run_dir / (o.manifest.error.log or '')})"
        if o.manifest.error else f"{o.run_dir.name} ({o.error})" for o in failed)
    return Output(RecordDocument(rows), [Table(COLUMNS, rows)], title="ddpprof record",
                  errors=[f"{len(failed)} of {len(outcomes)} runs failed: {details}"]
                  if failed else [], exit_code=1 if failed else 0, ran=True)
