"""``ddpprof gate``: every rule on every run matched with the baseline; exit 1 on a FAIL, with
the largest contributors of ``ddpprof diff`` between the failing run and its baseline. A trace
folder is analyzed through ``JobSet`` (its runs as the gate reads them: ``JobSet.gate_runs``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..analysis import AnalysisOptions
from ..core import progress
from ..core.errors import UsageError
from ..diff.compare import diff_pair
from ..diff.explain import contributors
from ..diff.noise import DEFAULT_NOISE, RunNoise
from ..gate import rules as gating
from ..job import JobSet
from ..render.output import Output, Outputs, Section
from ..render.table import Table, format_cell
from ..report.console import note_lines


@dataclass(frozen=True)
class Explanation:
    """Why a run failed: the failing checks, and what moved most between the baseline and the
    current run (``ddpprof diff``'s parts, largest first)."""

    run: str
    failed: list[str]               # "overlap_pct 41.00 → 30.00 (rule ...)"
    contributors: list[str]


@dataclass(frozen=True)
class GateDocument:
    """``ddpprof gate --json``: the verdicts, and what was compared under which rules."""

    current: str
    baseline: str
    rules: list[str]
    tolerance: float
    aggregate: str
    checks: int
    failed: int
    verdicts: list[gating.Verdict]
    significance: float | None = None
    explanations: list[Explanation] = field(default_factory=list)
    schema: str = "ddpprof.gate"
    version: int = 2


def explain(verdicts: list[gating.Verdict], pairs: list[tuple[gating.GateRun, gating.GateRun]],
            significance: float, noise: RunNoise) -> list[Explanation]:
    """For each run with a FAIL, its failed checks and the diff's top contributors (when both
    documents carry profiles)."""
    found = []
    for now, before in pairs:
        failed = [v for v in verdicts if v.run == now.name and v.verdict == "FAIL"]
        if not failed:
            continue
        lines = [f"{v.rule.split()[0]} {format_cell(v.baseline)} → {format_cell(v.current)} "
                 f"(rule {v.rule})" for v in failed]
        a, b = before.profiles(), now.profiles()
        moved = contributors(diff_pair(a, b, significance, noise)) if a and b else [
            "no profile to diff (an analyze --json file older than version 3)"]
        found.append(Explanation(now.name, lines, moved))
    return found


@dataclass(frozen=True)
class GateOptions:
    """``ddpprof gate``'s options, as parsed (``ddpprof.cli``)."""

    current: Path
    baseline: Path
    rules: tuple[str, ...]
    tolerance: float
    aggregate: str
    significance: float | None
    run_noise_pct: float | None


def current_runs(current: Path, with_findings: bool, notes: list[str]) -> list[gating.GateRun]:
    """The runs of an ``analyze --json`` file, or of a trace folder analyzed now (through
    ``JobSet``: its notes, such as files skipped, added to ``notes``; with ``with_findings``,
    its findings drawn as ``analyze`` draws them)."""
    if current.is_file():
        return gating.load_runs(current)
    found = JobSet.analyze([current], AnalysisOptions(replay_graphs=with_findings))
    if found.analysis.errors:
        raise UsageError(found.analysis.errors[0].error)
    notes += note_lines(found.analysis)
    return found.gate_runs(str(current), with_findings)


def gate(chosen: GateOptions, outputs: Outputs) -> Output:
    current, baseline, aggregate = chosen.current, chosen.baseline, chosen.aggregate
    tolerance, significance = chosen.tolerance, chosen.significance
    outputs.check("gate", files=[current, baseline], what="an input of the gate")
    parsed = [gating.parse_rule(text) for text in chosen.rules or (gating.DEFAULT_RULE,)]
    notes: list[str] = gating.deprecated_names(parsed)
    with progress.working(outputs.quiet or current.is_file(), f"analyzing {current}"):
        now = current_runs(current, any(r.metric.startswith("findings") for r in parsed),
                           notes)
    before = gating.load_runs(baseline)
    if aggregate == "median":
        now, before = gating.aggregate(now), gating.aggregate(before)
    noise = DEFAULT_NOISE.scaled(chosen.run_noise_pct)
    try:
        verdicts = gating.evaluate(parsed, now, before, tolerance, significance, noise)
    except UsageError as error:    # which runs or metrics do not match: name the baseline
        raise UsageError(f"{baseline} (baseline) against {current}: {error}") from None
    failed = [v for v in verdicts if v.verdict == "FAIL"]
    summary = (f"{len(failed)} of {len(verdicts)} checks failed" if failed
               else f"all {len(verdicts)} checks passed")
    columns = gating.COLUMNS + (gating.REPEAT_COLUMNS if aggregate == "median" else []) + (
        gating.NOISE_COLUMNS if significance is not None else [])
    explanations = explain(verdicts, gating.match_runs(now, before), significance or 0.95,
                           noise) if failed else []
    sections = [Section(f"Why {e.run} failed: {'; '.join(e.failed)}",
                        [f"{k}. {text}" for k, text in enumerate(e.contributors, 1)])
                for e in explanations]
    document = GateDocument(str(current), str(baseline), [r.text for r in parsed], tolerance,
                            aggregate, len(verdicts), len(failed), verdicts, significance,
                            explanations)
    return Output(document, [Table(columns, verdicts)], sections, summary=summary,
                  title="ddpprof gate", notes=notes, exit_code=1 if failed else 0)
