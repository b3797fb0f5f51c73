"""``ddpprof hang``: read a hung run's Flight Recorder dumps (or any folder of them), match the
ranks' collectives, and say which collective hung, which ranks are the culprits and where in
the code; exit 0 with a diagnosis, 1 when the dumps show no hang (or the run completed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core import progress
from ..hang import diagnose, files, read_dumps, report
from ..hang.result import HangDocument
from ..record.flight_recorder import FR_DIR
from ..render.output import Output, Outputs
from ..run.manifest import read_run_manifest


@dataclass(frozen=True)
class HangOptions:
    """``ddpprof hang``'s options, as parsed (``ddpprof.cli``)."""

    path: Path


def hang(chosen: HangOptions, outputs: Outputs) -> Output:
    path = chosen.path
    completed = _completed_without_dumps(path)
    if completed is not None:
        outputs.check("hang")
        return _output(completed)
    found = files.find(path)
    outputs.check("hang", files=list(found.files.values()), what="a dump being read")
    with progress.ranks(outputs.quiet) as (_, on_dump):
        dump_set = read_dumps(path, found, on_dump)
    return _output(diagnose(dump_set))


def _output(document: HangDocument) -> Output:
    return Output(document, [report.table(document)], report.sections(document),
                  intro=[report.headline(document)], title="ddpprof hang",
                  exit_code=0 if document.hang is not None else 1)


def _completed_without_dumps(path: Path) -> HangDocument | None:
    """A run folder whose run completed and left no dumps: no hang to diagnose."""
    if not path.is_dir() or (path / FR_DIR).exists():
        return None
    manifest = read_run_manifest(path)
    if manifest is None or manifest.status != "complete":
        return None
    world = manifest.config.world_size if manifest.config else 0
    return HangDocument(source=str(path), verdict="no_hang", world_size=world, hang=None,
                        others=[], deadlock=None, next_steps=[], dumps=[], missing_dumps=[],
                        unreadable={}, groups=[], run_status="complete",
                        notes=["the run completed: no rank left a Flight Recorder dump"])
