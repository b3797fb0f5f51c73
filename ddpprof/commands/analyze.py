"""``ddpprof analyze``: analyze the runs found under the paths, draw the findings, and give
the tables, the JSON document (the gate's input) and the HTML report."""

from __future__ import annotations

from dataclasses import dataclass, replace
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


@dataclass(frozen=True)
class AnalyzeOptions:
    """``ddpprof analyze``'s options, as parsed (``ddpprof.cli``)."""

    paths: tuple[str, ...]
    per_step: bool
    hta_compat: bool
    comm_kernels: tuple[str, ...]
    structural_comm: bool
    engine: str
    keep_last_step: bool
    critical_path: bool
    jobs: int | None
    scheduler: str | None


def analyze(chosen: AnalyzeOptions, outputs: Outputs) -> Output:
    options = analysis_options(chosen.keep_last_step, chosen.per_step, chosen.hta_compat,
                               chosen.comm_kernels, chosen.structural_comm, chosen.engine,
                               chosen.jobs, chosen.scheduler or None,
                               step_graphs=chosen.critical_path, max_graph_steps=None)
    locations = [location_of(path) for path in chosen.paths]
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
    if chosen.critical_path:
        # the replay machinery: off analyze's start (tests/test_no_torch.py)
        from .critical_path import AnalyzedPaths

        critical = AnalyzedPaths.of(found)
        advice = critical.told(advice)
    document = to_json_document(analysis, advice,
                                critical.section if critical is not None else None)
    sections = [*console.tax_section(analysis), *console.findings_section(advice)]
    if critical is not None and critical.steps:
        tables.append(critical.table())
        sections.insert(0, critical.summary())
    errors = [error.error for error in analysis.errors]
    if not errors and analysis.unfinished and not analysis.runs:
        errors.append("no run finished recording")

    def page() -> str:
        return render_report(found, f"ddpprof: {page_name}", advice,
                             critical.figures() if critical is not None else ())

    return Output(document, tables if analysis.runs else [],
                  sections, notes=[*console.note_lines(analysis), *flagged],
                  page=page if analysis.runs else None, page_name=page_name,
                  title="ddpprof analyze", errors=errors, exit_code=2 if errors else 0)
