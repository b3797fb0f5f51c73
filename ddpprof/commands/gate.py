"""``ddpprof gate``: every rule on every run matched with the baseline; exit 1 on a FAIL."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import gate as gating
from ..report.output import Output, Outputs
from ..report.table import Table


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
    schema: str = "ddpprof.gate"
    version: int = 1


def gate(current: Path, baseline: Path, rules: list[str], tolerance: float, aggregate: str,
         outputs: Outputs) -> Output:
    outputs.check("gate", files=[current, baseline], what="an input of the gate")
    parsed = [gating.parse_rule(text) for text in rules or (gating.DEFAULT_RULE,)]
    now = gating.load_runs(current)
    before = gating.load_runs(baseline, must_be_json=True)
    if aggregate == "median":
        now, before = gating.aggregate(now), gating.aggregate(before)
    verdicts = gating.evaluate(parsed, now, before, tolerance)
    failed = [v for v in verdicts if v.verdict == "FAIL"]
    summary = (f"{len(failed)} of {len(verdicts)} checks failed" if failed
               else f"all {len(verdicts)} checks passed")
    columns = gating.COLUMNS + (gating.REPEAT_COLUMNS if aggregate == "median" else [])
    document = GateDocument(str(current), str(baseline), [r.text for r in parsed], tolerance,
                            aggregate, len(verdicts), len(failed), verdicts)
    return Output(document, [Table(columns, verdicts)], summary=summary, title="ddpprof gate",
                  exit_code=1 if failed else 0)
