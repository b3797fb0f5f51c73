"""What ``ddpprof analyze`` shows: the per-run table (the columns a user reads first, every
column under ``--wide``), the per-step table, "What to change", and the notes, each said once.
"""

from __future__ import annotations

from typing import Any

from ..advice import Finding
from ..analysis import Analysis, RunResult, run_row, step_rows
from ..analysis.group_rows import group_rows
from ..metrics import sanity
from ..metrics.tax import ALL, OverlapTax
from ..render.output import Section
from ..render.table import Column, Table

#: The columns a user reads first (every one under ``--wide``). step_ms is the analyzed window
#: over the steps analyzed (mean over ranks, ``RankMetrics``).
RUN_COLUMNS = [Column("run", max_width=24), Column("ranks"), Column("step_ms"),
               Column("compute_pct"), Column("exposed_comm_pct"),
               Column("overlap_pct"), Column("top_finding", max_width=22)]
PER_STEP_COLUMNS = [*(Column(key) for key in (
    "run", "rank", "step", "compute_pct", "non_compute_pct", "idle_pct", "overlap_pct",
    "exposed_comm_pct")), Column("step_ms", attr="window_us", scale=1e3)]
#: The terminal shows this many findings; ``--json`` and the report have them all.
SHOWN_FINDINGS = 10


#: What a figure that breaks a bound of ``ddpprof.metrics.sanity`` shows instead (its note says
#: why).
FLAGGED = "!"


def run_lines(analysis: Analysis, findings: list[Finding]) -> list[dict[str, Any]]:
    """Each run's row, every metric flattened (``RunRow.to_dict``), with its step time and
    the code of its first listed finding."""
    top: dict[str, str] = {}
    for finding in listed(findings):
        top.setdefault(finding.run, finding.code)
    lines = []
    for run in analysis.runs:
        row = run_row(run)
        lines.append({**row.to_dict(), "top_finding": top.get(run.name)})
    return lines


def flags(line: dict[str, Any]) -> list[sanity.Flag]:
    """The figures of a run's (or rank's) row that break a bound (``ddpprof.metrics.sanity``)."""
    found = [sanity.share(key, value) for key, value in line.items()
             if key.endswith("_pct") and not key.endswith("_tax_pct")
             and isinstance(value, int | float)]
    found.append(sanity.transfer("comm_transfer_ms_per_step",
                                 line.get("comm_transfer_ms_per_step"),
                                 line.get("comm_ms_per_step")))
    return [flag for flag in found if flag is not None]


def checked(lines: list[dict[str, Any]], name: str = "run") -> tuple[list[dict[str, Any]],
                                                                      list[str]]:
    """``lines`` with each figure that breaks a bound shown as :data:`FLAGGED`, and a note for
    each saying what is wrong."""
    shown, notes = [], []
    for line in lines:
        found = flags(line)
        shown.append({**line, **{flag.name: FLAGGED for flag in found}})
        notes += [flag.note(str(line.get(name))) for flag in found]
    return shown, notes


def run_table(analysis: Analysis, findings: list[Finding]) -> tuple[Table, list[str]]:
    """The runs' table, and the notes of the figures it does not show (``checked``)."""
    lines, notes = checked(run_lines(analysis, findings))
    shown = {c.key for c in RUN_COLUMNS}
    rest = [Column(key, wide=True) for key in (lines[0] if lines else {}) if key not in shown]
    return Table([*RUN_COLUMNS, *rest], lines), notes


#: The per-process-group table: one row per group of each run with two groups or more (the
#: means over the group's ranks, ``analysis.group_rows.GroupRow``), 100 columns wide.
GROUP_COLUMNS = [Column("run", max_width=16), Column("group", attr="name", max_width=10),
                 *(Column(key) for key in (
                     "size", "calls_per_step", "comm_ms_per_step", "exposed_comm_ms_per_step",
                     "overlap_pct", "busbw_gbps", "wait_ms_per_step", "straggler_rank"))]
_GROUP_WIDE = ("description", "source", "bytes_per_step", "algbw_gbps", "transfer_ms_per_step",
               "locality", "intra_node_ms_per_step", "inter_node_ms_per_step", "a2a_imbalance",
               "a2a_heaviest_rank", "a2a_split_imbalance", "queued_ms_per_step", "queued_behind")


def group_table(analysis: Analysis) -> Table | None:
    """Communication per process group, for the runs that have two groups or more."""
    lines = [{"run": run.name, **row.to_dict()} for run in analysis.runs
             if len(run.process_groups) > 1 for row in group_rows(run)]
    if not lines:
        return None
    return Table([*GROUP_COLUMNS, *(Column(key, wide=True) for key in _GROUP_WIDE)], lines,
                 title="Per process group (per step, mean over the group's ranks)")


def step_table(analysis: Analysis) -> Table:
    return Table(PER_STEP_COLUMNS, step_rows(analysis), title="Per step")


def gain_pct(finding: Finding) -> float:
    """What a finding is worth, % of the step: its estimated gain, else what it costs now."""
    return (finding.estimated_gain_pct if finding.estimated_gain_pct is not None
            else finding.impact_pct)


def listed(findings: list[Finding]) -> list[Finding]:
    """The findings worth listing: those worth at least ``sanity.MIN_GAIN_PCT`` of the step
    (``--json`` has them all)."""
    return [f for f in findings if sanity.shown_gain(gain_pct(f))]


def headline(finding: Finding) -> str:
    """``[high, gain ~44% of the step] RUN: CODE``."""
    worth = "gain" if finding.estimated_gain_pct is not None else "costs"
    return (f"[{finding.severity}, {worth} ~{gain_pct(finding):.0f}% of the step] "
            f"{finding.run}: {finding.code}")


def findings_section(findings: list[Finding]) -> list[Section]:
    """The "What to change" list, ranked as given, the first ``SHOWN_FINDINGS`` of those
    worth listing (``listed``)."""
    shown = listed(findings)
    if not shown:
        return []
    lines = [f"{number}. {headline(f)}: {f.message}"
             for number, f in enumerate(shown[:SHOWN_FINDINGS], 1)]
    if len(shown) > SHOWN_FINDINGS:
        lines.append(f"... and {len(shown) - SHOWN_FINDINGS} more (--json, --html)")
    if len(findings) > len(shown):
        left = len(findings) - len(shown)
        lines.append(f"({left} finding{'s' * (left != 1)} worth less than "
                     f"{sanity.MIN_GAIN_PCT:g}% of the step left out: --json has them)")
    return [Section("What to change (ranked by estimated gain):", lines)]


def describe_tax(tax: OverlapTax) -> str:
    """``compute +6% (3 to 9), communication n/a``: the pooled taxes and their 95% intervals,
    each checked (``sanity.tax``): one that breaks a bound says why instead."""
    parts = []
    for side in ("compute", "communication"):
        row = tax.row(side)
        if row is None or row.tax_pct is None:
            parts.append(f"{side} n/a")
        elif (flag := sanity.tax(side, row.low_pct, row.tax_pct, row.high_pct)) is not None:
            parts.append(f"{side} not shown: {flag.problem}")
        elif row.low_pct is None or row.high_pct is None:
            parts.append(f"{side} {row.tax_pct:+.0f}% (no interval)")
        else:
            parts.append(f"{side} {row.tax_pct:+.0f}% ({row.low_pct:.0f} to "
                         f"{row.high_pct:.0f})")
    return ", ".join(parts)


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
        lines.append(f"{run.name}: {describe_tax(tax)}"
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
