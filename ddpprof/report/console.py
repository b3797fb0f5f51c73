"""What ``ddpprof analyze`` shows: the per-run table (the columns a user reads first, every
column under ``--wide``), the per-step table, "What to change", and the notes, each said once.
"""

from __future__ import annotations

from typing import Any

from ..analysis import Analysis, RunResult, run_row, step_rows
from ..findings import Finding
from .output import Section
from .table import Column, Table

#: The default table fits 100 columns. step_ms is the analyzed window over the steps analyzed
#: (mean over ranks, ``RankMetrics``); comm_overhead_pct is the exposed communication, % of
#: the window.
RUN_COLUMNS = [Column("run", max_width=24), Column("ranks"), Column("step_ms"),
               Column("compute_pct"), Column("comm_overhead_pct", "exposed_comm_pct"),
               Column("overlap_pct"), Column("top_finding", max_width=22)]
PER_STEP_COLUMNS = [Column(key) for key in (
    "run", "rank", "step", "compute_pct", "non_compute_pct", "idle_pct", "overlap_pct",
    "comm_overhead_pct", "window_us")]
#: The terminal shows this many findings; ``--json`` and the report have them all.
SHOWN_FINDINGS = 10


def run_lines(analysis: Analysis, findings: list[Finding]) -> list[dict[str, Any]]:
    """Each run's row, every metric flattened (``RunRow.to_dict``), with its step time and
    the code of its first finding."""
    top: dict[str, str] = {}
    for finding in findings:
        top.setdefault(finding.run, finding.code)
    lines = []
    for run in analysis.runs:
        row = run_row(run)
        lines.append({**row.to_dict(), "top_finding": top.get(run.name)})
    return lines


def run_table(analysis: Analysis, findings: list[Finding]) -> Table:
    lines = run_lines(analysis, findings)
    shown = {c.key for c in RUN_COLUMNS}
    rest = [Column(key, wide=True) for key in (lines[0] if lines else {}) if key not in shown]
    return Table([*RUN_COLUMNS, *rest], lines)


def step_table(analysis: Analysis) -> Table:
    return Table(PER_STEP_COLUMNS, step_rows(analysis), title="Per step")


def findings_section(findings: list[Finding]) -> list[Section]:
    """The "What to change" list, ranked as given, the first ``SHOWN_FINDINGS`` of it."""
    if not findings:
        return []
    lines = []
    for number, finding in enumerate(findings[:SHOWN_FINDINGS], 1):
        gain = (f", gain ~{finding.estimated_gain_pct:.0f}% of the step"
                if finding.estimated_gain_pct is not None
                else f", costs ~{finding.impact_pct:.0f}% of the step")
        lines.append(f"{number}. [{finding.severity}{gain}] {finding.run}: {finding.code}: "
                     f"{finding.message}")
    if len(findings) > SHOWN_FINDINGS:
        lines.append(f"... and {len(findings) - SHOWN_FINDINGS} more (--json, --html)")
    return [Section("What to change (ranked by estimated gain):", lines)]


def _run_notes(run: RunResult) -> list[str]:
    # The window in one note: with one step or none, the analysis's own note says it.
    window = ([f"last ProfilerStep {run.last_step.value}"] if run.last_step.filters else
              [] if any("ProfilerStep" in note for note in run.notes) else
              ["one ProfilerStep: the whole trace is analyzed"])
    notes = [*window, *run.notes]
    if run.missing_ranks:
        notes.append(f"missing ranks {run_row(run).missing_ranks}")
    return list(dict.fromkeys(notes))


def note_lines(analysis: Analysis) -> list[str]:
    """``every run: note`` for a note every run shares (two runs or more), ``RUN: note`` for
    the others, then the recordings left out."""
    notes = {run.name: _run_notes(run) for run in analysis.runs}
    shared = [] if len(notes) < 2 else [
        note for note in next(iter(notes.values()))
        if all(note in mine for mine in notes.values())]
    lines = [f"every run: {note}" for note in shared]
    lines += [f"{name}: {note}" for name, mine in notes.items() for note in mine
              if note not in shared]
    lines += [f"{problem.run}: not analyzed: the recording {problem.status} ({problem.error})"
              for problem in analysis.unfinished]
    lines += [f"{problem.run}: skipped: no trace among its JSON files ({problem.error})"
              for problem in analysis.skipped]
    return lines
