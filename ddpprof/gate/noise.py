"""``gate --significance``: how far a gated metric may move by noise alone.

A check compares ``current`` with a threshold made of the baseline (``baseline * f``,
``baseline + d``: ``slope × baseline + constant``) or of a number (slope 0). It FAILs only when
the rule is broken by more than the one-sided Student's t quantile at the significance level
times the standard deviation of ``current − slope × baseline``, whose noise comes from
``ddpprof diff``'s rule (``ddpprof.diff.noise``, its docstring):

* for ``step_ms`` (from the documents' ``profile``): the run-to-run prior with the steps'
  scatter where the prior holds for every recording of both sides (runs recorded like it);
  else the repeats' spread (``--aggregate median``); else the steps' scatter of one recording
  a side (Student's t on the steps, without run-to-run noise); none with one step a side;
* for any other metric, the **repeats** (``--aggregate median``): the sample variance of each
  side's repeats, pooled over the sides that have them, times ``slope²/k_baseline +
  1/k_current``, and by π/2 for a median; degrees of freedom: the repeats less one, summed;
* none otherwise: the check is then the plain comparison, and says so.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..diff.noise import Difference, RunNoise, Side, difference, one_sided_margin, side

if TYPE_CHECKING:
    from ..analysis.profile import RunProfile
    from .rules import GateRun, Rule

#: The variance of a median of normal samples against that of their mean.
MEDIAN_EFFICIENCY = math.pi / 2


def run_side(run: GateRun, metric: str, side_name: str, prior: RunNoise | None) -> Side | None:
    """``run``'s value of ``metric`` as a side of a comparison (see the module's docstring;
    ``prior``: the run-to-run prior, where it holds); None when its recordings give no
    number."""
    if metric == "step_ms" and (profiles := run.profiles()):
        return side([p.step_ms for p in profiles], [p.step_series_ms for p in profiles],
                    [p.step_ms for p in profiles], prior)
    values = [v for v in run.values(metric, side_name) if v is not None]
    return side(values) if values else None


def _source(found: Difference, current: GateRun, baseline: GateRun) -> str:
    counts = f"{current.repeats or 1} now, {baseline.repeats or 1} in the baseline"
    if found.source == "prior":
        return f"repeats and prior ({counts})" if found.repeats else \
            "steps + prior (one recording a side)"
    if found.source == "steps":
        return "steps only, no run-to-run noise (one recording a side)"
    return f"{found.source} ({counts})"


def _prior(current: GateRun, baseline: GateRun, noise: RunNoise) -> RunNoise | None:
    """The prior where it holds for every recording of both runs (``ddpprof diff``'s rule)."""
    profiles: list[RunProfile] = [*current.profiles(), *baseline.profiles()]
    return noise if profiles and noise.holds_for(profiles) else None


def margin_of(rule: Rule, current: GateRun, baseline: GateRun, significance: float,
              noise: RunNoise) -> tuple[float | None, str]:
    """The slack the noise allows the check of ``rule`` on this pair at ``significance``, and
    where the noise came from (no slack: ``none ...``)."""
    prior = _prior(current, baseline, noise) if rule.metric == "step_ms" else None
    now = run_side(current, rule.metric, "current", prior)
    if now is None:
        return None, "none (no value)"
    before = run_side(baseline, rule.metric, "baseline", prior) if rule.needs_baseline \
        else None
    if before is None:       # an absolute threshold: only the current run's noise
        before = Side(0.0, 1, prior=0.0)
    merged = any(r.repeats is not None and r.repeats >= 2 for r in (current, baseline))
    found = difference(before, now, prior.prior_runs if prior else None, slope=rule.slope,
                       efficiency=MEDIAN_EFFICIENCY if merged else 1.0)
    if found is None:
        steps = rule.metric == "step_ms" and bool(current.profiles())
        return None, "none (one step a side and no repeats)" if steps else \
            "none (no repeats)"
    return one_sided_margin(found, significance), _source(found, current, baseline)
