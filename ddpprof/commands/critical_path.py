"""``ddpprof critical-path``: each analyzed step's dependency graph across ranks, the chain of
work that sets its length and what that length is made of, and replays of the graph with
edits (``ddpprof.graph``). ``analyze --critical-path`` adds the same section to analyze."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..advice import Finding
from ..advice.critical_path import with_critical_path
from ..analysis import AnalysisOptions, analyze_paths
from ..analysis.results import Analysis
from ..core import progress
from ..core.atomic import check_output, is_stdout, json_text, refuse_inputs, write_output
from ..core.errors import UsageError
from ..core.storage import location_of, report_name
from ..graph.contended import Tax
from ..graph.model import StepGraph
from ..graph.summary import CriticalPathDocument, StepPath, run_paths
from ..graph.whatif import Edit, check_rank_edits, parse_edits
from ..render.output import Output, Outputs, Section
from ..render.table import Table
from ..report import critical_path as report
from ..report.console import note_lines
from ..report.critical_path import path_figure
from ..report.pages import render_page

#: Steps drawn on a page: each figure carries every node of its step.
MAX_FIGURES = 8


def edits_of(faster: Sequence[str], faster_network: Sequence[str],
             rank_delay: Sequence[str]) -> list[list[Edit]]:
    """One what-if per option given (each replayed alone)."""
    return [[edit] for edit in parse_edits(faster, faster_network, rank_delay)]


def critical_paths(analysis: Analysis, edits: list[list[Edit]]
                   ) -> tuple[list[StepPath], dict[str, list[StepGraph]], list[str],
                              dict[str, Tax]]:
    """The critical path of every analyzed step of every run of ``analysis`` (analyzed with
    ``AnalysisOptions.step_graphs``: each rank's share of the graphs came with it), and each
    run's overlap tax (what its replays run under)."""
    steps: list[StepPath] = []
    graphs: dict[str, list[StepGraph]] = {}
    taxes: dict[str, Tax] = {}
    notes: list[str] = []
    for run in analysis.runs:
        ranks = {r.rank: r.graph_steps or [] for r in run.ranks}
        taxes[run.name] = Tax.measured(run.overlap_tax, [])
        found, graphs[run.name], run_notes = run_paths(run.name, ranks, edits,
                                                       taxes[run.name] if edits else None)
        steps += found
        notes += run_notes
    return steps, graphs, notes, taxes


def critical_path(paths: Sequence[str], keep_last_step: bool, faster: Sequence[str],
                  faster_network: Sequence[str], rank_delay: Sequence[str],
                  graph_json: Path | None, outputs: Outputs) -> Output:
    edits = edits_of(faster, faster_network, rank_delay)
    locations = [location_of(path) for path in paths]
    page_name = f"{report_name(locations[0])}-critical-path" if len(locations) == 1 else \
        "critical-path"
    if graph_json is not None:
        check_output(graph_json, "--graph-json")
        if is_stdout(graph_json) and outputs.to_stdout:
            raise UsageError("only one output can be standard output (-)")
    outputs.check(page_name)
    with progress.ranks(outputs.quiet) as (on_run, on_rank):
        analysis = analyze_paths(locations, AnalysisOptions(keep_last_step=keep_last_step,
                                                            step_graphs=True),
                                 on_run=on_run, on_rank=on_rank)
    inputs = [*(Path(r.path) for run in analysis.runs for r in run.ranks),
              *(Path(run.folder) / "run.json" for run in analysis.runs)]
    outputs.check(page_name, files=inputs, what="a trace being analyzed")
    if graph_json is not None:
        refuse_inputs({"--graph-json": graph_json}, files=inputs, what="a trace being analyzed")
    for run in analysis.runs:
        check_rank_edits((e for chosen in edits for e in chosen), (r.rank for r in run.ranks),
                         f"run {run.name!r}")
    steps, graphs, notes, _ = critical_paths(analysis, edits)
    errors = [error.error for error in analysis.errors]
    if not errors and not steps:
        errors.append("no step of any run could be analyzed")
    if graph_json is not None:
        write_output("--graph-json", graph_json, json_text({
            "schema": "ddpprof.step-graphs", "version": 1,
            "runs": {name: [msgspec.to_builtins(g) for g in found]
                     for name, found in graphs.items()}}))

    def page() -> str:
        figures = [report.path_figure(graph, step) for step, graph in zip(
            steps, (g for found in graphs.values() for g in found), strict=True)][:MAX_FIGURES]
        return render_page("ddpprof critical-path", report.summary_lines(steps),
                           report.tables(steps)[0], figures)

    return Output(CriticalPathDocument(steps, notes), report.tables(steps) if steps else [],
                  [Section(None, report.summary_lines(steps))] if steps else [],
                  notes=[*note_lines(analysis), *notes], page=page if steps else None,
                  page_name=page_name,
                  title="ddpprof critical-path", errors=errors, exit_code=2 if errors else 0)



@dataclass(frozen=True)
class AnalyzedPaths:
    """``analyze --critical-path``: the steps' paths, the findings told of them, the section
    ``critical_path`` of the JSON document, the table after analyze's and the summary before
    the findings."""

    steps: list[StepPath]
    graphs: dict[str, list[StepGraph]]
    notes: list[str]
    taxes: dict[str, Tax]

    @classmethod
    def of(cls, analysis: Analysis) -> AnalyzedPaths:
        """From an analysis made with ``AnalysisOptions.step_graphs``."""
        return cls(*critical_paths(analysis, []))

    def figures(self) -> list[Any]:   # plotly figures (plotly has no types)
        """Each run's first step drawn over its ranks' timelines (at most ``MAX_FIGURES``)."""
        return [path_figure(graphs[0], next(s for s in self.steps if s.run == run))
                for run, graphs in self.graphs.items() if graphs][:MAX_FIGURES]

    def told(self, findings: list[Finding]) -> list[Finding]:
        return with_critical_path(findings, self.steps, self.graphs, self.taxes)

    def add_to(self, document: dict[str, Any], tables: list[Table], sections: list[Section]
               ) -> None:
        document["critical_path"] = {"steps": msgspec.to_builtins(self.steps),
                                     "notes": self.notes}
        if self.steps:
            tables.append(report.tables(self.steps)[0])
            sections.insert(0, Section("Critical path",
                                       report.summary_lines(self.steps) + self.notes))
