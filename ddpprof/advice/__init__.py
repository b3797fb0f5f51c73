"""What to change: findings drawn from an analysis, each with its evidence in numbers, how sure
it is and, where the simulator can say, the gain it predicts. Pure functions of the typed
results: the rules on communication, buckets and the host (``rules``) and on slow ranks
(``ranks``), each documented with its thresholds in docs/findings.md and tested with traces
that trigger it and traces that must not."""

from __future__ import annotations

from collections.abc import Callable

from ..analysis.results import RunResult
from . import ranks, rules
from .lateness import Lateness, lateness
from .model import SEVERITY_ORDER, CapAdvice, CapReplay, Evidence, Finding

RULES: tuple[Callable[[RunResult, CapAdvice | None, Lateness | None], Finding | None], ...] = (
    rules.bucket_cap_too_large, rules.bucket_cap_too_small, rules.latency_bound,
    rules.exposed_tail, ranks.slow_rank, rules.no_overlap, rules.comm_bound, rules.host_bound,
    rules.dataloader, rules.grad_accum_opportunity, rules.tp_exposed, rules.a2a_imbalance,
    rules.comm_queued)


#: A finding that names the cause makes a vaguer one about the same run redundant: with
#: blocking collectives every reduction runs after backward, so the last one's tail is a
#: symptom of the blocking, not of the last bucket's size; too little work per rank is why
#: accumulating gradients would pay, and why the last reduction sticks out; buckets too small
#: are why the collectives are latency-bound; blocking collectives one per gradient are too
#: small buckets because they block. Ordered so that a finding comes before those it
#: hides.
SUPERSEDES = {"bucket_cap_too_large": ("no_overlap",),
              "no_overlap": ("exposed_tail", "comm_bound", "bucket_cap_too_small",
                             "latency_bound"),
              "comm_bound": ("grad_accum_opportunity", "exposed_tail"),
              "bucket_cap_too_small": ("latency_bound",)}


#: What a finding's gain counts for in the ranking, by its confidence (None: a rule that does
#: not say): the expected gain of acting on it.
CONFIDENCE_WEIGHT = {"high": 1.0, "medium": 0.75, "low": 0.5, None: 1.0}


def findings(runs: list[RunResult], advice: dict[str, CapAdvice] | None = None
             ) -> list[Finding]:
    """Every rule on every run, ranked by estimated gain (else what it costs now) weighted by
    the finding's confidence."""
    found = []
    for run in runs:
        # the ranks' lateness, measured once for the rules that read it
        cap, late = (advice or {}).get(run.name), lateness(run.ranks)
        mine = [f for rule in RULES if (f := rule(run, cap, late))]
        codes, superseded = {f.code for f in mine}, set[str]()
        for code, hidden in SUPERSEDES.items():   # a hidden finding hides nothing
            if code in codes and code not in superseded:
                superseded.update(hidden)
        found += [f for f in mine if f.code not in superseded]
    return sorted(found, key=lambda f: (-f.impact_pct * CONFIDENCE_WEIGHT[f.confidence],
                                        SEVERITY_ORDER[f.severity], f.run, f.code))


__all__ = ["CapAdvice", "CapReplay", "Evidence", "Finding", "findings"]
