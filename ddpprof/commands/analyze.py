"""``ddpprof analyze``: analyze the runs found under the paths, draw the findings, and give
the tables, the JSON document (the gate's input) and the HTML report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis import to_json_document
from ..core import progress
from ..core.storage import location_of, report_name
from ..hang.finding import hang_findings
from ..job import JobSet, analysis_options
from ..render.output import Output, Outputs
from ..report import console
from ..report.html import render_report

if TYPE_CHECKING:
    from .critical_path import AnalyzedPaths


def analyze(paths: Sequence[str], per_step: bool, hta_compat: bool, comm_kernels: Sequence[str],
            engine: str, keep_last_step: bool, jobs: int | None, scheduler: str | None,
            outputs: Outputs, critical_path: bool = False, structural_comm: bool = True
            ) -> Output:
    options = analysis_options(keep_last_step, per_step, hta_compat, comm_kernels,
                               structural_comm, engine, jobs, scheduler or None,
                               step_graphs=critical_path, max_graph_steps=None)
    locations = [location_of(path) for path in paths]
    page_name = report_name(locations[0]) if len(locations) == 1 else "report"
    outputs.check(page_name)
    options = replace(options, timeline=outputs.page(page_name) is not None)
    with progress.ranks(outputs.quiet) as (on_run, on_rank):
        found = JobSet.analyze(locations, options, on_run=on_run, on_rank=on_rank)
    analysis = found.analysis
    outputs.check(page_name, files=[*(Path(r.path) for run in analysis.runs for r in run.ranks),
                                    *(Path(run.folder) / "run.json" for run in analysis.runs)],
                  what="a trace being analyzed")
    # a run that hung: its Flight Recorder dumps' diagnosis comes first
    advice = hang_findings(analysis.unfinished) + list(found.findings().findings)
    runs_table, flagged = console.run_table(analysis, advice)
    tables = [runs_table]
    if (groups := console.group_table(analysis)) is not None:
        tables.append(groups)
    if options.per_step:
        tables.append(console.step_table(analysis))
    critical: AnalyzedPaths | None = None
    if critical_path:
        # the replay machinery: off analyze's start (tests/test_no_torch.py)
        from .critical_path import AnalyzedPaths

        critical = AnalyzedPaths.of(analysis)
        advice = critical.told(advice)
    document = to_json_document(analysis, advice)
    sections = [*console.tax_section(analysis), *console.findings_section(advice)]
    if critical is not None:
        critical.add_to(document, tables, sections)
    errors = [error.error for error in analysis.errors]
    if not errors and analysis.unfinished and not analysis.runs:
        errors.append("no run finished recording")

    def page() -> str:
        return render_report(analysis, f"ddpprof: {page_name}", advice,
                             critical.figures() if critical is not None else ())

    return Output(document, tables if analysis.runs else [],
                  sections, notes=[*console.note_lines(analysis), *flagged],
                  page=page if analysis.runs else None, page_name=page_name,
                  title="ddpprof analyze", errors=errors, exit_code=2 if errors else 0)
