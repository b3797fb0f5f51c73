"""What ``ddpprof analyze`` shows: the per-run table (the columns a user reads first, every
column under ``--wide``), the per-step table, "What to change", and the notes, each said once.
"""

from __future__ import annotations

from typing import Any

from ..analysis import Analysis, RunResult, run_row, step_rows
from ..findings import Finding
from ..metrics.tax import ALL
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


#: The per-process-group table: one row per group of each run with two groups or more (the
#: means over the group's ranks, ``analysis.group_rows.GroupRow``), 100 columns wide.
GROUP_COLUMNS = [Column("run", max_width=16), Column("name", "group", max_width=10),
                 Column("size"), Column("calls_per_step", "calls/step"),
                 Column("comm_ms_per_step", "comm_ms"),
                 Column("exposed_comm_ms_per_step", "exposed_ms"), Column("overlap_pct"),
                 Column("busbw_gbps"), Column("wait_ms_per_step", "wait_ms"),
                 Column("straggler_rank", "straggler")]
_GROUP_WIDE = ("description", "source", "bytes_per_step", "algbw_gbps", "transfer_ms_per_step",
               "locality", "intra_node_ms_per_step", "inter_node_ms_per_step", "a2a_imbalance",
               "a2a_heaviest_rank", "a2a_split_imbalance", "queued_ms_per_step", "queued_behind")


def group_table(analysis: Analysis) -> Table | None:
    """Communication per process group, for the runs that have two groups or more."""
    from ..analysis.group_rows import group_rows

    lines = [{"run": run.name, **row.to_dict()} for run in analysis.runs
             if len(run.process_groups) > 1 for row in group_rows(run)]
    if not lines:
        return None
    return Table([*GROUP_COLUMNS, *(Column(key, wide=True) for key in _GROUP_WIDE)], lines,
                 title="Per process group (per step, mean over the group's ranks)")


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


def tax_section(analysis: Analysis) -> list[Section]:
    """Each run's overlap tax (``ddpprof.metrics.tax``): the pooled compute and communication
    taxes with their 95% intervals, then the compute tax of each work class that was told;
    the runs where neither could be told are left out, and those after the first
    ``SHOWN_FINDINGS`` counted."""
    lines = []
    for run in analysis.runs:
        tax = run.overlap_tax
        if tax is None or (tax.pct("compute") is None and tax.pct("communication") is None):
            continue
        classes = [f"{row.work_class} {row.tax_pct:+.0f}%" for row in tax.rows
                   if row.side == "compute" and row.size == ALL and row.work_class != ALL
                   and row.tax_pct is not None]
        lines.append(f"{run.name}: {tax.describe()}"
                     + (f"; compute by class: {', '.join(classes)}" if classes else ""))
    if len(lines) > SHOWN_FINDINGS:   # as many as the findings; the JSON has every run's
        lines[SHOWN_FINDINGS:] = [f"... and {len(lines) - SHOWN_FINDINGS} more runs (--json)"]
    return [Section("Overlap tax (the same work overlapped against alone, 95% interval):",
                    lines)] if lines else []


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
