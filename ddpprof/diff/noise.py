"""How far a run's mean step (or part) moves by noise alone, where that noise comes from, and
when a difference is larger than that. The model and its assumptions are in ``docs/diff.md``.

A run's mean of a quantity (its step time, or one part) is ``μ + u + ē``: the configuration's
true value μ, the run's own offset ``u`` (the machine's state while it ran: other load,
frequency, placement; shared by all its steps) and the mean of its steps' own scatter ``ē``.

* ``ē`` is seen in the run: its variance is the per-step series' variance over the number of
  steps (steps taken as independent around the run's level).
* ``u`` is not: steps of one run cannot show it. Only repeats show it (the spread of their
  means holds ``u`` and ``ē``), or a prior measured on repeated recordings
  (:class:`RunNoise`), which holds only for runs recorded like those it was measured on
  (:class:`Setup`).

The noise of a comparison comes from the first of these that the sides allow
(:func:`noise_source`, one rule for ``diff`` and ``gate --significance``):

1. ``prior``: every recording of both sides was recorded like the prior (or the user gave
   the prior, ``--run-noise``): the steps' scatter plus the prior's ``var(u)``, worth its
   recordings less one degrees of freedom, pooled with the spread of the repeats' means
   where a side has several recordings (a conjugate normal model's pooling);
2. ``repeats``: a side has several recordings of one configuration: the sample variance of
   the recordings' means, pooled over the sides that have repeats;
3. ``steps``: one recording a side, and a side with two steps or more: Student's t on the
   steps (Welch's, each side with its own scatter; where one side has a single step, its
   step is compared with the other's scatter, as a new step of that run would be). The
   run-to-run offset ``u`` is not included, and the output says so;
4. ``none``: one step a side and no repeats: no noise estimate exists and no verdict is made.

A difference is tested with Student's t. The intervals of a diff's quantities are
simultaneous: with ``m`` quantities at level ``1 − α``, each interval is at ``1 − α/m``
(Bonferroni), so that two recordings of one configuration flag nothing with probability at
least ``1 − α`` when the model holds.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..analysis.profile import STEP, part_values

if TYPE_CHECKING:
    from ..analysis.profile import RunProfile

#: Where the noise of a comparison came from (see the module's docstring).
Source = Literal["prior", "repeats", "steps", "none"]


@dataclass(frozen=True)
class Setup:
    """How a run was recorded, as far as its run-to-run noise depends on it: the one
    definition of a run "recorded like" a prior's recordings (all three fields known and
    equal). From the profile (``docs/diff.md#noise``):

    * ``backend``: the process-group backend, the traces' ``distributedInfo.backend``, else
      run.json's ``config.backend``;
    * ``device``: ``cpu`` when the trace holds no device records, else ``gpu`` (the profile's
      kind: what the trace shows, not what run.json asked for);
    * ``host_cores``: the cores its ranks could run on, run.json's ``measured.host_cores``;
      None for a trace ddpprof did not record (its host is not known). Host names are not
      compared: containers and cloud machines share them (``vm``), and a machine of the same
      size and load is what the prior describes.
    """

    backend: str | None
    device: str
    host_cores: int | None

    @classmethod
    def of(cls, profile: RunProfile) -> Setup:
        config, measured = profile.config, profile.measured
        backend = profile.backend or (config.backend if config is not None else None)
        return cls(backend, profile.kind,
                   measured.host_cores if measured is not None else None)

    def describe(self) -> str:
        host = f"{self.host_cores} host cores" if self.host_cores is not None \
            else "host not recorded"
        return f"{self.backend or 'backend unknown'} on {self.device}, {host}"


@dataclass(frozen=True)
class RunNoise:
    """The run-to-run noise of a run's mean that its own steps do not show (see the module's
    docstring), what it was measured on, and the runs it holds for (``recorded``: runs
    recorded like those, :class:`Setup`; None: every run, as the user said with
    ``--run-noise``). A part's own share (``relative``) follows the machine's speed; waiting
    for another rank is a difference of two ranks' speeds, so it scatters with the step
    (``waiting_of_step``); every other part has a floor (``of_step``)."""

    relative: float          # of the quantity's own mean
    of_step: float           # of the run's mean step: a floor for every part
    waiting_of_step: float   # of the run's mean step: for waiting for a rank
    prior_runs: int          # recordings it was measured on: its weight against repeats
    measured: str
    recorded: Setup | None = None

    def variance_ms2(self, value_ms: float, step_ms: float, waiting: bool = False) -> float:
        floor = self.waiting_of_step if waiting else self.of_step
        return (self.relative * value_ms) ** 2 + (floor * step_ms) ** 2

    def scaled(self, relative_pct: float | None) -> RunNoise:
        """This prior with its relative noise set to ``relative_pct`` % (``--run-noise``), its
        floors scaled alike, for every run (the user gives it for their machine); itself for
        None."""
        if relative_pct is None:
            return self
        factor = relative_pct / 100 / self.relative if self.relative else 0.0
        return RunNoise(relative_pct / 100, self.of_step * factor,
                        self.waiting_of_step * factor, self.prior_runs,
                        f"--run-noise {relative_pct:g}, floors scaled from the default prior")

    def holds_for(self, profiles: Iterable[RunProfile]) -> bool:
        """Whether the prior holds for every one of ``profiles``: it was given for every run,
        or each was recorded like its recordings."""
        return self.recorded is None or all(Setup.of(p) == self.recorded for p in profiles)

    def describe(self) -> str:
        return (f"{self.relative:.0%} of a part, at least {self.of_step:.1%} of the step, "
                f"{self.waiting_of_step:.0%} of it for waiting; {self.measured}")


#: Fitted by ``benchmarks/diff_accuracy.py`` on its ten tuning recordings, never on the pairs
#: whose false-positive rate ``docs/benchmarks.md`` reports: ``bucket_ddp_async`` on
#: ``mlp-small``, 2 gloo ranks, on this project's 2-core machine shared with other work. It
#: holds only for runs recorded like those (:class:`Setup`): gloo on CPU with 2 host cores.
DEFAULT_NOISE = RunNoise(relative=0.262, of_step=0.0015, waiting_of_step=0.051, prior_runs=10,
                         measured="fitted on 10 recordings, 2 gloo ranks on a shared 2-core "
                                  "CPU machine, 2026-11-26",
                         recorded=Setup("gloo", "cpu", 2))


def within_variance(series: Sequence[float]) -> float:
    """The variance of a run's mean from its steps' scatter (0 with fewer than 2 steps)."""
    return statistics.variance(series) / len(series) if len(series) >= 2 else 0.0


@dataclass(frozen=True)
class Side:
    """One side's recordings of a quantity: their mean, how many they are, the sample variance
    of their means (None with one), the steps of its one recording and their sample variance
    (None with several recordings, or one step), and the prior's variance of one recording's
    mean (None: no prior for this quantity)."""

    mean: float
    runs: int
    spread: float | None = None
    steps: int = 1
    step_variance: float | None = None
    prior: float | None = None


def side(means: Sequence[float], series: Sequence[Sequence[float]] | None = None,
         step_means: Sequence[float] | None = None, noise: RunNoise | None = None,
         waiting: bool = False) -> Side:
    """One side from its recordings' ``means``; with their per-step ``series``, its steps'
    scatter; with their mean steps and a ``noise`` prior, the prior's variance too
    (``waiting``: the quantity is waiting for a rank)."""
    prior = None
    if series is not None and step_means is not None and noise is not None:
        prior = statistics.fmean(noise.variance_ms2(abs(m), t, waiting) + within_variance(s)
                                 for m, s, t in zip(means, series, step_means, strict=True))
    spread = statistics.variance(means) if len(means) >= 2 else None
    steps, step_variance = 1, None
    if series is not None and len(series) == 1:
        steps = len(series[0])
        step_variance = statistics.variance(series[0]) if steps >= 2 else None
    return Side(statistics.fmean(means), len(means), spread, steps, step_variance, prior)


@dataclass(frozen=True)
class Difference:
    """``after − slope × before``, its variance and degrees of freedom, and where they came
    from."""

    delta: float
    variance: float
    df: float
    source: Source
    repeats: bool = False       # a ``prior`` difference with the spread of repeats pooled in


def noise_source(before: Sequence[RunProfile], after: Sequence[RunProfile],
                 noise: RunNoise | None) -> Source:
    """Where the noise of a comparison of two sides' recordings comes from: the first of the
    module docstring's list that the sides allow (``noise``: the prior offered)."""
    if noise is not None and noise.holds_for([*before, *after]):
        return "prior"
    if max(len(before), len(after)) >= 2:
        return "repeats"
    if max(len(p.step_series_ms) for p in [*before, *after]) >= 2:
        return "steps"
    return "none"


def difference(before: Side, after: Side, prior_runs: int | None = None, slope: float = 1.0,
               efficiency: float = 1.0) -> Difference | None:
    """``after − slope × before`` and its noise, from the first source the sides allow (the
    module's docstring): with ``prior_runs`` and both sides' priors, each side's variance of
    one recording's mean pools the prior (``prior_runs − 1`` degrees of freedom) with its
    repeats' spread, the degrees of freedom of the difference being Welch–Satterthwaite's;
    else the repeats' spread, pooled over the sides that have repeats; else the steps'
    scatter (:func:`steps_difference`); None with none of these. ``efficiency``: the variance
    of the statistic against that of a mean (π/2 for a median of normal samples)."""
    delta = after.mean - slope * before.mean
    if prior_runs is not None and before.prior is not None and after.prior is not None:
        weight = max(prior_runs - 1, 1)
        terms = []
        for found, prior, factor in ((before, before.prior, slope ** 2),
                                     (after, after.prior, 1.0)):
            repeats = found.runs - 1 if found.spread is not None else 0
            pooled = (weight * prior + repeats * (found.spread or 0.0)) / (weight + repeats)
            terms.append((efficiency * factor * pooled / found.runs, weight + repeats))
        repeated = max(before.runs, after.runs) >= 2
        variance = sum(v for v, _ in terms)
        if variance <= 0:
            return Difference(delta, 0.0, math.inf, "prior", repeated)
        return Difference(delta, variance, _welch_df(terms), "prior", repeated)
    spreads = [(s.spread, s.runs - 1) for s in (before, after) if s.spread is not None]
    if spreads:
        df = sum(d for _, d in spreads)
        pooled = sum(v * d for v, d in spreads) / df
        variance = efficiency * pooled * (slope ** 2 / before.runs + 1 / after.runs)
        return Difference(delta, variance, df, "repeats")
    return steps_difference(before, after, delta, slope)


def steps_difference(before: Side, after: Side, delta: float, slope: float = 1.0
                     ) -> Difference | None:
    """The noise of ``delta`` from the steps' scatter of one recording a side (None: neither
    has two steps). Each side's mean is known to ``s²/n`` (its steps' sample variance over
    their number); with both, Welch's t (Welch–Satterthwaite degrees of freedom); where one
    side has one step, that step is taken to scatter as the other side's steps do (a pooled
    t: ``s² (slope²/n_before + 1/n_after)``, ``n − 1`` degrees of freedom), as a new step of
    that run would. Run-to-run noise is not in it."""
    known = [s for s in (before, after) if s.step_variance is not None]
    if not known:
        return None
    if len(known) == 2:
        assert before.step_variance is not None and after.step_variance is not None
        terms = [(slope ** 2 * before.step_variance / before.steps, before.steps - 1),
                 (after.step_variance / after.steps, after.steps - 1)]
        variance = sum(v for v, _ in terms)
        return Difference(delta, variance, _welch_df(terms) if variance > 0 else math.inf,
                          "steps")
    [scattered] = known
    assert scattered.step_variance is not None
    variance = scattered.step_variance * (slope ** 2 / before.steps + 1 / after.steps)
    return Difference(delta, variance, scattered.steps - 1, "steps")


def _welch_df(terms: Sequence[tuple[float, float]]) -> float:
    """Welch–Satterthwaite's degrees of freedom of a sum of variances, each with its own."""
    variance = sum(v for v, _ in terms)
    spread = sum(v ** 2 / d for v, d in terms if v > 0)
    return variance ** 2 / spread if spread > 0 else min(d for _, d in terms)


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


def interval(found: Difference, alpha: float) -> Interval:
    """The two-sided ``1 − alpha`` interval of a difference."""
    half = t_quantile(1 - alpha / 2, found.df) * math.sqrt(found.variance) \
        if found.variance > 0 else 0.0
    return Interval(found.delta, found.delta - half, found.delta + half)


def one_sided_margin(found: Difference, level: float) -> float:
    """How far the difference may exceed 0 by noise alone at ``level`` (one-sided)."""
    return t_quantile(level, found.df) * math.sqrt(found.variance) \
        if found.variance > 0 else 0.0


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


@functools.lru_cache(maxsize=4096)     # a diff of many parts asks for the same ones
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
    * ``waiting_of_step``: over the mean step, for waiting for a rank.

    It holds for runs recorded like these (:class:`Setup`), which must share one setup."""
    setups = {Setup.of(p) for p in profiles}
    if len(setups) != 1:
        raise ValueError(f"recordings of several setups: {sorted(s.describe() for s in setups)}")
    keys = [STEP, *dict.fromkeys(k for p in profiles for k in p.parts)]
    step = statistics.fmean(p.step_ms for p in profiles)
    relative, floor, waiting = [], [], []
    for key in keys:
        means, series, _ = part_values(profiles, key)
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

    return RunNoise(rms(relative), rms(floor), rms(waiting), len(profiles), measured,
                    setups.pop())
