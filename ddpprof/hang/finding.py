"""``analyze``'s finding for a run that hung: a recording that failed or was interrupted and
left Flight Recorder dumps gets the hang's diagnosis as its finding, at the top."""

from __future__ import annotations

from pathlib import Path

from ..advice import Evidence, Finding
from ..analysis.results import RunProblem
from ..core.errors import UsageError
from ..record.flight_recorder import FR_DIR
from .diagnose import diagnose
from .dumps import read
from .result import ranks_text


def hang_findings(unfinished: list[RunProblem]) -> list[Finding]:
    """One ``hang`` finding per unfinished run whose dumps show a hang (a run whose dumps
    cannot be read gets none: ``ddpprof hang`` says why)."""
    found = []
    for problem in unfinished:
        if problem.folder is None or not (Path(problem.folder) / FR_DIR).is_dir():
            continue
        try:
            document = diagnose(read(Path(problem.folder)))
        except UsageError:
            continue
        hang = document.hang
        if hang is None:
            continue
        collective = hang.collective
        site = collective.site.text() if collective.site else None
        found.append(Finding(
            problem.run, "hang", "high",
            f"{hang.summary}. `ddpprof hang {problem.folder}` names what each rank did "
            "instead, and where.",
            [Evidence("group", collective.group_text), Evidence("seq", collective.seq),
             Evidence("collective", collective.call.text()),
             Evidence("culprit_ranks", ranks_text([c.rank for c in hang.culprits])),
             *([Evidence("call_site", site)] if site else [])],
            impact_pct=100.0,
            rank=hang.culprits[0].rank if len(hang.culprits) == 1 else None))
    return found
