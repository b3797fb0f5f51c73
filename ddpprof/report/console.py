"""What ``ddpprof analyze`` prints: the per-run table, the per-step table, "What to change",
and one line per note. Text only; the command writes it where it belongs."""

from __future__ import annotations

from ..analysis import Analysis, run_row, step_rows
from ..findings import Finding
from . import table

ANALYZE_COLUMNS = ["run", "variant", "kind", "ranks", "steps", "compute_pct", "non_compute_pct",
                   "idle_pct", "overlap_pct", "comm_overhead_pct", "all_reduce_calls_per_step",
                   "all_reduce_ms_per_step", "all_reduce_busbw_gbps",
                   "comm_transfer_ms_per_step", "comm_wait_ms_per_step", "straggler_rank",
                   "peak_memory_mib"]
PER_STEP_COLUMNS = ["run", "rank", "step", "compute_pct", "non_compute_pct", "idle_pct",
                    "overlap_pct", "comm_overhead_pct", "window_us"]


def analysis_text(analysis: Analysis, findings: list[Finding], markdown: bool,
                  per_step: bool) -> str:
    """The tables and the findings, or nothing when no run was analyzed."""
    if not analysis.runs:
        return ""
    rows = [run_row(run).to_dict() for run in analysis.runs]
    render = table.to_markdown if markdown else table.to_text
    text = render(rows, ANALYZE_COLUMNS)
    if per_step:
        text += "\n" + render(step_rows(analysis), PER_STEP_COLUMNS)
    return text + table.findings_text(findings, markdown)


def note_lines(analysis: Analysis) -> list[str]:
    """``RUN: note`` for every note of every run, then the recordings left out."""
    lines = []
    for run in analysis.runs:
        notes = [f"last ProfilerStep {run.last_step.value}", *run.notes]
        if run.missing_ranks:
            notes.append(f"missing ranks {run_row(run).missing_ranks}")
        lines += [f"{run.name}: {note}" for note in notes]
    lines += [f"{problem.run}: not analyzed: the recording {problem.status} ({problem.error})"
              for problem in analysis.unfinished]
    lines += [f"{problem.run}: skipped: no trace among its JSON files ({problem.error})"
              for problem in analysis.skipped]
    return lines
