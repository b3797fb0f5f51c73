"""``gate --significance``: how far a gated metric may move by noise alone.

A check compares ``current`` with a threshold made of the baseline (``baseline * f``,
``baseline + d``: ``slope × baseline + constant``) or of a number (slope 0). It FAILs only when
the rule is broken by more than the one-sided Student's t quantile at the significance level
times the standard deviation of ``current − slope × baseline``, whose noise comes from
(``ddpprof.diff.noise.difference``):

* for ``step_ms`` (from the documents' ``profile``): ``ddpprof diff``'s model, its steps and
  run-to-run prior pooled with the repeats' spread where there are repeats;
* for any other metric, the **repeats** (``--aggregate median``): the sample variance of each
  side's repeats, pooled over the sides that have them, times ``slope²/k_baseline +
  1/k_current``, and by π/2 for a median; degrees of freedom: the repeats less one, summed;
* none otherwise: the check is then the plain comparison, and says so.
"""

from __future__ import annotations

import math

from .diff.noise import Difference, RunNoise, Side, difference, one_sided_margin, side
from .gate import GateRun, Rule

#: The variance of a median of normal samples against that of their mean.
MEDIAN_EFFICIENCY = math.pi / 2


def run_side(run: GateRun, metric: str, side_name: str, noise: RunNoise) -> Side | None:
    """``run``'s value of ``metric`` as a side of a comparison (see the module's docstring);
    None when its recordings give no number."""
    if metric == "step_ms" and (profiles := run.profiles()):
        return side([p.step_ms for p in profiles], [p.step_series_ms for p in profiles],
                    [p.step_ms for p in profiles], noise)
    values = [v for v in run.values(metric, side_name) if v is not None]
    return side(values) if values else None


def _source(found: Difference, current: GateRun, baseline: GateRun) -> str:
    counts = [r.repeats or 1 for r in (current, baseline)]
    if found.source == "prior":
        return "steps + prior (one recording a side)"
    return f"{found.source} ({counts[0]} now, {counts[1]} in the baseline)"


def margin_of(rule: Rule, current: GateRun, baseline: GateRun, significance: float,
              noise: RunNoise) -> tuple[float | None, str]:
    """The slack the noise allows the check of ``rule`` on this pair at ``significance``, and
    where the noise came from (no slack: ``none ...``)."""
    now = run_side(current, rule.metric, "current", noise)
    if now is None:
        return None, "none (no value)"
    before = run_side(baseline, rule.metric, "baseline", noise) if rule.needs_baseline \
        else None
    if before is None:       # an absolute threshold: only the current run's noise
        before = Side(0.0, 1, None, 0.0)
    merged = any(r.repeats is not None and r.repeats >= 2 for r in (current, baseline))
    found = difference(before, now, noise.prior_runs, slope=rule.slope,
                       efficiency=MEDIAN_EFFICIENCY if merged else 1.0)
    if found is None:
        return None, "none (no repeats)"
    return one_sided_margin(found, significance), _source(found, current, baseline)
