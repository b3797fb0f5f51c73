"""``ddpprof critical-path``: each analyzed step's dependency graph across ranks, the chain of
work that sets its length and what that length is made of, and replays of the graph with
edits (``ddpprof.graph``, through ``Job.critical_path``). ``analyze --critical-path`` adds the
same section to analyze (:class:`AnalyzedPaths`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..advice import Finding
from ..advice.critical_path import with_critical_path
from ..analysis import AnalysisOptions
from ..core import progress
from ..core.atomic import check_output, is_stdout, json_text, refuse_inputs, write_output
from ..core.errors import UsageError
from ..core.storage import location_of, report_name
from ..graph.summary import CriticalPathDocument, CriticalPathSection, StepPath
from ..graph.whatif import Edit, check_rank_edits, parse_edits
from ..job import JobSet
from ..job_results import CriticalPathResult
from ..render.output import Output, Outputs, Section
from ..render.table import Table
from ..report import critical_path as report
from ..report.console import note_lines
from ..report.pages import render_page

#: Steps drawn on a page: each figure carries every node of its step.
MAX_FIGURES = 8


@dataclass(frozen=True)
class CriticalPathOptions:
    """``ddpprof critical-path``'s options, as parsed (``ddpprof.cli``)."""

    paths: tuple[str, ...]
    keep_last_step: bool
    faster: tuple[str, ...]
    faster_network: tuple[str, ...]
    rank_delay: tuple[str, ...]
    graph_json: Path | None


def edits_of(chosen: CriticalPathOptions) -> list[list[Edit]]:
    """One what-if per option given (each replayed alone)."""
    return [[edit] for edit in parse_edits(chosen.faster, chosen.faster_network,
                                           chosen.rank_delay)]


def critical_path(chosen: CriticalPathOptions, outputs: Outputs) -> Output:
    edits = edits_of(chosen)
    graph_json = chosen.graph_json
    locations = [location_of(path) for path in chosen.paths]
    page_name = f"{report_name(locations[0])}-critical-path" if len(locations) == 1 else \
        "critical-path"
    if graph_json is not None:
        check_output(graph_json, "--graph-json")
        if is_stdout(graph_json) and outputs.to_stdout:
            raise UsageError("only one output can be standard output (-)")
    outputs.check(page_name)
    with progress.ranks(outputs.quiet) as (on_run, on_rank):
        found = JobSet.analyze(locations, AnalysisOptions(keep_last_step=chosen.keep_last_step,
                                                          step_graphs=True),
                               on_run=on_run, on_rank=on_rank)
    analysis = found.analysis
    inputs = [*(Path(r.path) for run in analysis.runs for r in run.ranks),
              *(Path(run.folder) / "run.json" for run in analysis.runs)]
    outputs.check(page_name, files=inputs, what="a trace being analyzed")
    if graph_json is not None:
        refuse_inputs({"--graph-json": graph_json}, files=inputs, what="a trace being analyzed")
    for job in found:
        check_rank_edits((e for chosen_edits in edits for e in chosen_edits),
                         (r.rank for r in job.run.ranks), f"run {job.name!r}")
    paths = AnalyzedPaths([job.critical_path(edits) for job in found])
    steps = paths.steps
    errors = [error.error for error in analysis.errors]
    if not errors and not steps:
        errors.append("no step of any run could be analyzed")
    if graph_json is not None:
        write_output("--graph-json", graph_json, json_text({
            "schema": "ddpprof.step-graphs", "version": 1,
            "runs": {p.run: [msgspec.to_builtins(g) for g in p.graphs] for p in paths.runs}}))

    def page() -> str:
        figures = [report.path_figure(graph, step) for step, graph in zip(
            steps, (g for p in paths.runs for g in p.graphs), strict=True)][:MAX_FIGURES]
        return render_page("ddpprof critical-path", report.summary_lines(steps),
                           report.tables(steps)[0], figures)

    return Output(CriticalPathDocument(steps, paths.notes),
                  report.tables(steps) if steps else [],
                  [Section(None, report.summary_lines(steps))] if steps else [],
                  notes=[*note_lines(analysis), *paths.notes], page=page if steps else None,
                  page_name=page_name,
                  title="ddpprof critical-path", errors=errors, exit_code=2 if errors else 0)


@dataclass(frozen=True)
class AnalyzedPaths:
    """The critical paths of some runs (``Job.critical_path``, one result per run): for
    ``analyze --critical-path``, the findings told of them, the section ``critical_path`` of
    the JSON document, the table after analyze's and the summary before the findings."""

    runs: list[CriticalPathResult]

    @classmethod
    def of(cls, found: JobSet) -> AnalyzedPaths:
        """Every run of ``found``'s paths (analyzed with ``AnalysisOptions.step_graphs``)."""
        return cls([job.critical_path() for job in found])

    @property
    def steps(self) -> list[StepPath]:
        return [step for found in self.runs for step in found.steps]

    @property
    def notes(self) -> list[str]:
        return [note for found in self.runs for note in found.notes]

    @property
    def section(self) -> CriticalPathSection:
        return CriticalPathSection(self.steps, self.notes)

    def figures(self) -> list[Any]:   # plotly figures (plotly has no types)
        """Each run's first step drawn over its ranks' timelines (at most ``MAX_FIGURES``)."""
        return [report.path_figure(found.graphs[0], found.steps[0])
                for found in self.runs if found.graphs][:MAX_FIGURES]

    def told(self, findings: list[Finding]) -> list[Finding]:
        return with_critical_path(findings, self.steps,
                                  {found.run: list(found.graphs) for found in self.runs},
                                  {found.run: found.tax for found in self.runs})

    def table(self) -> Table:
        return report.tables(self.steps)[0]

    def summary(self) -> Section:
        return Section("Critical path", report.summary_lines(self.steps) + self.notes)
