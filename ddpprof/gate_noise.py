"""``gate --significance``: how far a gated metric may move by noise alone.

A rule's check compares ``current − threshold``; with a baseline-relative threshold
(``baseline * f``, ``baseline + d``), its variance is ``var(current) + slope² ×
var(baseline)``, its degrees of freedom Welch–Satterthwaite's, and the check FAILs only when
the rule is broken by more than the one-sided ``t`` quantile at the significance level times
its standard deviation. A run's variance comes from:

* for ``step_ms`` of a run whose document has profiles: ``ddpprof diff``'s noise model
  (``ddpprof.diff.noise``: its steps, its repeats and the run-to-run prior);
* for any other metric: the spread of its repeats (``--aggregate median``); the variance of a
  median of ``k`` repeats is taken as ``π/2 × s²/k``, the normal's;
* none otherwise: the check is then a plain comparison, and says so.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .diff.noise import DEFAULT_NOISE, one_sided_margin, side_estimate
from .gate import GateRun, Rule

#: The variance of a median of normal samples against that of their mean.
MEDIAN_EFFICIENCY = math.pi / 2


@dataclass(frozen=True)
class Noise:
    variance: float
    df: float
    source: str


def run_noise(run: GateRun, metric: str, side: str) -> Noise | None:
    """The variance of ``run``'s value of ``metric`` (see the module's docstring)."""
    merged = run.repeats is not None and run.repeats >= 2
    if metric == "step_ms" and (profiles := run.profiles()):
        estimate = side_estimate([p.step_ms for p in profiles],
                                 [p.step_series_ms for p in profiles],
                                 [p.step_ms for p in profiles], DEFAULT_NOISE)
        factor = MEDIAN_EFFICIENCY if merged else 1.0
        steps = min(len(p.step_series_ms) for p in profiles)
        return Noise(estimate.variance * factor, estimate.df,
                     f"{len(profiles)} run(s) × {steps} steps + prior")
    values = [v for v in run.values(metric, side) if v is not None]
    if len(values) >= 2:
        return Noise(MEDIAN_EFFICIENCY * statistics.variance(values) / len(values),
                     len(values) - 1, f"{len(values)} repeats")
    return None


def margin_of(rule: Rule, current: GateRun, baseline: GateRun, significance: float
              ) -> tuple[float | None, str]:
    """The slack the noise allows the check of ``rule`` on this pair at ``significance``, and
    where the noise came from (no slack: ``none ...``)."""
    now = run_noise(current, rule.metric, "current")
    if now is None:
        return None, "none (no repeats)"
    if not rule.needs_baseline:
        return one_sided_margin(now.variance, now.df, significance), now.source
    before = run_noise(baseline, rule.metric, "baseline")
    if before is None:
        return None, "none (no repeats in the baseline)"
    parts = [(now.variance, now.df), (rule.slope ** 2 * before.variance, before.df)]
    variance = sum(v for v, _ in parts)
    if variance <= 0:
        return 0.0, f"{now.source}; {before.source}"
    df = variance ** 2 / sum(v ** 2 / d for v, d in parts if v > 0)
    return (one_sided_margin(variance, df, significance),
            f"now {now.source}; baseline {before.source}")
