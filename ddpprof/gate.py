"""``ddpprof gate``: compare a run's metrics with a baseline under rules; pure functions.

A rule is ``METRIC OP RHS`` with OP one of ``>= <= > < ==`` and RHS a number, ``baseline``,
``baseline + N``, ``baseline - N`` or ``baseline * N``; ``baseline`` is the metric's value in
the matched baseline run. Runs match by run name, else by variant.
"""

from __future__ import annotations

import operator
import re
import statistics
from dataclasses import dataclass
from typing import Any

from .errors import UsageError

DEFAULT_RULE = "overlap_pct >= baseline - 2"
_OPERATORS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
              "==": operator.eq}
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_RULE = re.compile(rf"^\s*(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op>>=|<=|==|>|<)\s*"
                   rf"(?:(?P<absolute>{_NUMBER})|baseline\s*(?:(?P<arith>[-+*])\s*"
                   rf"(?P<operand>{_NUMBER}))?)\s*$")


@dataclass(frozen=True)
class Rule:
    text: str
    metric: str
    op: str
    absolute: float | None      # set for "METRIC OP NUMBER"
    arith: str | None           # "+", "-", "*" or None for a plain "baseline"
    operand: float

    @property
    def needs_baseline(self) -> bool:
        return self.absolute is None

    def threshold(self, baseline: float | None) -> float:
        if self.absolute is not None:
            return self.absolute
        assert baseline is not None
        if self.arith == "+":
            return baseline + self.operand
        if self.arith == "-":
            return baseline - self.operand
        if self.arith == "*":
            return baseline * self.operand
        return baseline

    def holds(self, current: float, threshold: float, tolerance: float) -> bool:
        """The comparison, loosened by ``tolerance`` in the metric's own units."""
        if self.op in (">=", ">"):
            return _OPERATORS[self.op](current + tolerance, threshold)
        if self.op in ("<=", "<"):
            return _OPERATORS[self.op](current - tolerance, threshold)
        return abs(current - threshold) <= tolerance


def parse_rule(text: str) -> Rule:
    match = _RULE.match(text)
    if not match:
        raise UsageError(f"malformed rule {text!r}: expected METRIC OP RHS, OP one of "
                         ">= <= > < ==, RHS a number or baseline [+|-|* NUMBER]")
    absolute = match["absolute"]
    return Rule(text=text.strip(), metric=match["metric"], op=match["op"],
                absolute=float(absolute) if absolute is not None else None,
                arith=match["arith"], operand=float(match["operand"] or 0))


@dataclass(frozen=True)
class Verdict:
    rule: str
    run: str
    baseline: float | None
    current: float | None
    threshold: float | None
    verdict: str                # "pass", "FAIL" or "n/a" (the metric is n/a on both sides)

    def row(self) -> dict[str, Any]:
        return {"rule": self.rule, "run": self.run, "baseline": self.baseline,
                "current": self.current, "threshold": self.threshold, "verdict": self.verdict}


def aggregate_by_variant(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Several runs of one variant (repeats, to tame noise) become one: the median of each
    numeric metric, named after the variant."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault(run.get("variant") or run["run"], []).append(run)
    merged = []
    for variant, members in groups.items():
        row: dict[str, Any] = {"run": variant, "variant": variant, "repeats": len(members)}
        for key in members[0]:
            values = [m.get(key) for m in members]
            if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                row[key] = statistics.median(values)
        merged.append(row)
    return merged


def match_runs(current: list[dict[str, Any]], baseline: list[dict[str, Any]]
               ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pair every current run with its baseline run (by name, else by variant); a run on one
    side without a partner is an error."""
    by_name = {run["run"]: run for run in baseline}
    by_variant: dict[str, list[dict[str, Any]]] = {}
    for run in baseline:
        by_variant.setdefault(run.get("variant") or "", []).append(run)
    pairs, used = [], set()
    for run in current:
        partner = by_name.get(run["run"])
        if partner is None and len(by_variant.get(run.get("variant") or "", [])) == 1:
            partner = by_variant[run["variant"]][0]
        if partner is None:
            raise UsageError(f"run {run['run']!r} is not in the baseline")
        pairs.append((run, partner))
        used.add(partner["run"])
    missing = [run["run"] for run in baseline if run["run"] not in used]
    if missing:
        raise UsageError(f"baseline run {missing[0]!r} is missing from the current results")
    return pairs


def evaluate(rules: list[Rule], current: list[dict[str, Any]], baseline: list[dict[str, Any]],
             tolerance: float = 0.0) -> list[Verdict]:
    verdicts = []
    for now, before in match_runs(current, baseline):
        for rule in rules:
            value = _metric(now, rule.metric, "current")
            reference = _metric(before, rule.metric, "baseline") if rule.needs_baseline else None
            if value is None and (reference is None or not rule.needs_baseline):
                verdicts.append(Verdict(rule.text, now["run"], reference, None, None, "n/a"))
                continue
            if value is None or (rule.needs_baseline and reference is None):
                side = "current" if value is None else "baseline"
                raise UsageError(f"run {now['run']!r}: {rule.metric} is n/a in the {side} "
                                 "results only")
            threshold = rule.threshold(reference)
            verdict = "pass" if rule.holds(value, threshold, tolerance) else "FAIL"
            verdicts.append(Verdict(rule.text, now["run"], reference, value, threshold, verdict))
    return verdicts


def _metric(run: dict[str, Any], metric: str, side: str) -> float | None:
    if metric not in run:
        raise UsageError(f"run {run['run']!r}: no metric {metric!r} in the {side} results")
    value = run[metric]
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise UsageError(f"run {run['run']!r}: {metric} is not a number in the {side} results")
    return value
