"""``ddpprof diff``: why one run's step is slower (or faster) than another's: the change split
into parts that add up to it, each against the noise, what moved inside them, and the
configuration's differences (``ddpprof.diff``); traces are analyzed through ``JobSet``, each
run's parts read with ``Job.profile``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from ..analysis import AnalysisOptions
from ..analysis.profile import RunProfile
from ..core import progress
from ..core.errors import UsageError
from ..core.storage import Location, location_of, name
from ..diff.compare import PairDiff, diff_pair
from ..diff.inputs import load_side, pair
from ..diff.noise import DEFAULT_NOISE, RunNoise
from ..job import JobSet
from ..render.output import Output, Outputs
from ..report import diff as report


class DiffDocument(msgspec.Struct, kw_only=True):
    """``ddpprof diff --json``: every pair of sides compared; ``noise``: the run-to-run prior
    offered, which each pair uses only where it holds (its ``noise_source``)."""

    before: str
    after: str
    significance: float
    noise: RunNoise
    pairs: list[PairDiff]
    notes: list[str] = []
    schema: str = "ddpprof.diff"
    version: int = 2


@dataclass(frozen=True)
class DiffOptions:
    """``ddpprof diff``'s options, as parsed (``ddpprof.cli``)."""

    before: str
    after: str
    significance: float
    keep_last_step: bool
    run_noise_pct: float | None


def diff(chosen: DiffOptions, outputs: Outputs) -> Output:
    before, after, significance = chosen.before, chosen.after, chosen.significance
    page_name = f"diff-{name(location_of(before))}-{name(location_of(after))}"
    inputs = [Path(p) for p in (before, after) if not isinstance(location_of(p), str)]
    outputs.check(page_name, files=inputs, what="an input of the diff")
    notes: list[str] = []
    options = AnalysisOptions(keep_last_step=chosen.keep_last_step)

    def analyze(locations: list[Location]) -> list[RunProfile]:
        with progress.ranks(outputs.quiet) as (on_run, on_rank):
            found = JobSet.analyze(locations, options, on_run=on_run, on_rank=on_rank)
        analysis = found.analysis
        if analysis.errors:
            raise UsageError(analysis.errors[0].error)
        if not analysis.runs:
            raise UsageError(f"{locations[0]}: no run finished recording")
        outputs.check(page_name, files=[*(Path(r.path) for run in analysis.runs
                                          for r in run.ranks),
                                        *(Path(run.folder) / "run.json" for run in analysis.runs)],
                      what="a trace being analyzed")
        notes.extend(f"{run.name}: {note}" for run in analysis.runs for note in run.notes)
        notes.extend(f"{problem.run}: left out, {problem.error}" for problem in
                     analysis.unfinished)
        return [p for p in (job.profile() for job in found) if p is not None]

    paired = pair(load_side(before, analyze), load_side(after, analyze))

    def names(a: list[RunProfile], b: list[RunProfile]) -> tuple[str, str]:
        if len(paired) == 1:
            return before, after
        return f"{before}: {a[0].run}", f"{after}: {b[0].run}"

    noise = DEFAULT_NOISE.scaled(chosen.run_noise_pct)
    pairs = [diff_pair(a, b, significance, noise, names(a, b)) for a, b in paired]
    notes = list(dict.fromkeys(notes))
    document = DiffDocument(before=before, after=after, significance=significance,
                            noise=noise, pairs=pairs, notes=notes)

    intro = [line for p in pairs for line in report.summary_lines(p, significance)]
    changed = sum(p.verdict == "significant change" for p in pairs)
    unknown = sum(p.noise_source == "none" for p in pairs)
    summary = (f"{changed} of {len(pairs)} pairs changed beyond the noise"
               + (f", {unknown} without a verdict (one step a side and no repeats)"
                  if unknown else "") if len(pairs) > 1 else pairs[0].verdict)

    def page() -> str:
        return report.render_page(pairs, f"ddpprof diff: {before} → {after}", significance,
                                  notes)

    return Output(document, report.tables(pairs), intro=intro, summary=summary, notes=notes,
                  page=page, page_name=page_name, title="ddpprof diff")
