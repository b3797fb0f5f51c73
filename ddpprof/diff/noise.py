"""How far a run's mean step (or part) moves between two recordings of one configuration, and
when a difference is larger than that. The model and its assumptions are in ``docs/diff.md``.

A run's mean of a quantity (its step time, or one part) is ``μ + u + ē``: the configuration's
true value μ, the run's own offset ``u`` (the machine's state while it ran: other load,
frequency, placement; shared by all its steps) and the mean of its steps' own scatter ``ē``.

* ``ē`` is seen in the run: its variance is the variance of the per-step series over the
  number of steps (steps taken as independent around the run's level).
* ``u`` is not: steps of one run cannot show it. Its variance comes from repeats when a side
  has several recordings of one configuration (the variance of their means), and otherwise
  from a prior measured on repeated recordings (:class:`RunNoise`):
  ``var(u) = (relative × part)² + (of_step × step)²``. Repeats and prior are pooled as a
  conjugate normal model does, the prior counting as ``prior_runs − 1`` degrees of freedom.
* A difference of two sides' means is tested with Student's t on the Welch–Satterthwaite
  degrees of freedom. The intervals of a diff's quantities are simultaneous: with ``m``
  quantities at level ``1 − α``, each interval is at ``1 − α/m`` (Bonferroni), so that two
  recordings of one configuration flag nothing with probability at least ``1 − α`` when the
  model holds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .profile import RunProfile


@dataclass(frozen=True)
class RunNoise:
    """The run-to-run noise of a run's mean that its own steps do not show (see the module's
    docstring), and what it was measured on. A part's own share (``relative``) follows the
    machine's speed; waiting for another rank is a difference of two ranks' speeds, so it
    scatters with the step (``waiting_of_step``); every other part has a floor
    (``of_step``)."""

    relative: float          # of the quantity's own mean
    of_step: float           # of the run's mean step: a floor for every part
    waiting_of_step: float   # of the run's mean step: for waiting for a rank
    prior_runs: int          # recordings it was measured on: its weight against repeats
    measured: str

    def variance_ms2(self, value_ms: float, step_ms: float, waiting: bool = False) -> float:
        floor = self.waiting_of_step if waiting else self.of_step
        return (self.relative * value_ms) ** 2 + (floor * step_ms) ** 2


#: Fitted by ``benchmarks/diff_accuracy.py`` on its tuning recordings (never on the pairs
#: whose false-positive rate ``docs/benchmarks.md`` reports).
DEFAULT_NOISE = RunNoise(relative=0.35, of_step=0.01, waiting_of_step=0.1, prior_runs=10,
                         measured="placeholder")


@dataclass(frozen=True)
class Estimate:
    """A side's mean of one quantity over its recordings, the variance of that mean, and its
    degrees of freedom."""

    mean: float
    variance: float
    df: float
    runs: int


def within_variance(series: Sequence[float]) -> float:
    """The variance of a run's mean from its steps' scatter (0 with fewer than 2 steps)."""
    return statistics.variance(series) / len(series) if len(series) >= 2 else 0.0


def side_estimate(means: Sequence[float], series: Sequence[Sequence[float]],
                  step_means: Sequence[float], noise: RunNoise, waiting: bool = False
                  ) -> Estimate:
    """One side: ``means`` of its recordings, their per-step ``series``, their mean steps;
    ``waiting``: the quantity is waiting for a rank."""
    k = len(means)
    within = [within_variance(s) for s in series]
    prior = statistics.fmean(noise.variance_ms2(abs(m), t, waiting) + w
                             for m, w, t in zip(means, within, step_means, strict=True))
    prior_df = max(noise.prior_runs - 1, 1)
    if k >= 2:
        pooled = (prior_df * prior + (k - 1) * statistics.variance(means)) / (prior_df + k - 1)
        return Estimate(statistics.fmean(means), pooled / k, prior_df + k - 1, k)
    return Estimate(means[0], prior, prior_df, 1)


@dataclass(frozen=True)
class Interval:
    """``after − before`` with its simultaneous interval; ``significant`` when the interval
    holds no zero."""

    delta: float
    low: float
    high: float

    @property
    def significant(self) -> bool:
        return self.low > 0 or self.high < 0


def delta_interval(before: Estimate, after: Estimate, alpha: float) -> Interval:
    """The difference of two sides' means and its two-sided ``1 − alpha`` interval."""
    delta = after.mean - before.mean
    variance = before.variance + after.variance
    if variance <= 0:
        return Interval(delta, delta, delta)
    df = variance ** 2 / sum(v ** 2 / d for v, d in ((before.variance, before.df),
                                                      (after.variance, after.df)) if v > 0)
    half = t_quantile(1 - alpha / 2, df) * math.sqrt(variance)
    return Interval(delta, delta - half, delta + half)


def one_sided_margin(variance: float, df: float, level: float) -> float:
    """How far above a value its one-sided ``level`` bound lies (0 without noise)."""
    return t_quantile(level, df) * math.sqrt(variance) if variance > 0 else 0.0


# ---- Student's t (no scipy on the analysis side) --------------------------------------------

def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return result


def _incomplete_beta(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1 - x) / b


def t_cdf(x: float, df: float) -> float:
    """P(T ≤ x) for Student's t with ``df`` degrees of freedom (the normal when infinite)."""
    if math.isinf(df):
        return statistics.NormalDist().cdf(x)
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + x * x))
    return 1 - tail if x >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on :func:`t_cdf`)."""
    if math.isinf(df) or df > 1e7:
        return statistics.NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


def fit_run_noise(profiles: Sequence[RunProfile], measured: str,
                  large_pct: float = 2.0) -> RunNoise:
    """The prior from recordings of one configuration. For the step and each part, the
    standard deviation of the recordings' means beyond what their steps explain,
    ``sqrt(max(var(means) − mean(var of each mean from its steps), 0))``; then, as root mean
    squares (so that larger deviations weigh more: the prior errs wide):

    * ``relative``: that deviation over the part's mean, over the step and the parts other than
      waiting that take at least ``large_pct`` % of the step;
    * ``of_step``: over the mean step, for the smaller parts;
    * ``waiting_of_step``: over the mean step, for waiting for a rank."""
    from .compare import STEP, _part_values

    keys = [STEP, *dict.fromkeys(k for p in profiles for k in p.parts)]
    step = statistics.fmean(p.step_ms for p in profiles)
    relative, floor, waiting = [], [], []
    for key in keys:
        means, series, _ = _part_values(profiles, key)
        within = statistics.fmean(within_variance(s) for s in series)
        excess = math.sqrt(max(statistics.variance(means) - within, 0.0))
        mean = statistics.fmean(means)
        if key.group == "waiting":
            waiting.append(excess / step)
        elif mean >= large_pct / 100 * step:
            relative.append(excess / mean)
        else:
            floor.append(excess / step)

    def rms(values: list[float]) -> float:
        return math.sqrt(statistics.fmean(v * v for v in values)) if values else 0.0

    return RunNoise(rms(relative), rms(floor), rms(waiting), len(profiles), measured)
