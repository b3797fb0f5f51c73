"""``ddpprof hang``: read a hung run's Flight Recorder dumps (or any folder of them), match the
ranks' collectives, and say which collective hung, which ranks are the culprits and where in
the code; exit 0 with a diagnosis, 1 when the dumps show no hang."""

from __future__ import annotations

from pathlib import Path

from .. import progress
from ..hang import diagnose, files, read_dumps, report
from ..report.output import Output, Outputs


def hang(path: Path, outputs: Outputs) -> Output:
    found = files.find(path)
    outputs.check("hang", files=list(found.files.values()), what="a dump being read")
    with progress.ranks(outputs.quiet) as (_, on_dump):
        dump_set = read_dumps(path, found, on_dump)
    document = diagnose(dump_set)
    return Output(document, sections=report.sections(document),
                  intro=[report.headline(document)], title="ddpprof hang",
                  exit_code=0 if document.hang is not None else 1)
