"""What a finding is, and the helpers every rule shares: its severity from what it costs or
would gain, and how a run is told (recorded by ddpprof, or a foreign trace)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ..analysis.results import RankResult, RunResult
from ..core.units import MIB
from ..variants import variant_info
from .lateness import Lateness

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
#: Severity from what a finding costs (or would gain), % of the step: high from a fifth,
#: medium from a twentieth.
HIGH_PCT, MEDIUM_PCT = 20.0, 5.0


@dataclass(frozen=True)
class Evidence:
    name: str
    value: float | int | str | None
    unit: str = ""


@dataclass(frozen=True)
class Finding:
    run: str
    code: str
    severity: str                        # "high", "medium" or "low"
    message: str
    evidence: list[Evidence] = field(default_factory=list)
    estimated_gain_pct: float | None = None   # of step time, where it can be estimated
    impact_pct: float = 0.0                   # what it costs now, % of the step: for ranking
    #: The rank the finding is about (a slow rank), None for a finding about every rank
    rank: int | None = None
    #: Other codes the finding names as possible causes, where the trace cannot tell them
    #: apart from its own ("slow compute or CPU contention")
    alternatives: tuple[str, ...] = ()
    #: How sure it is: "high", "medium" or "low" (None: a rule that does not say); the
    #: evidence says on what
    confidence: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "code": self.code, "severity": self.severity,
                "message": self.message,
                "evidence": {e.name: e.value for e in self.evidence},
                "evidence_units": {e.name: e.unit for e in self.evidence if e.unit},
                "estimated_gain_pct": self.estimated_gain_pct, "impact_pct": self.impact_pct,
                "rank": self.rank, "alternatives": list(self.alternatives),
                "confidence": self.confidence}


@dataclass(frozen=True)
class CapReplay:
    """The simulator's replay of a run's middle step at each bucket cap: the best cap against
    the current one (made only for a run ddpprof recorded: only there does a finding name a
    cap)."""

    current_cap_mib: float | None
    best_cap_mib: float
    current_step_ms: float
    best_step_ms: float

    @property
    def gain_pct(self) -> float:
        return 100 * (1 - self.best_step_ms / self.current_step_ms) if self.current_step_ms else 0


@dataclass(frozen=True)
class CapAdvice:
    """What the simulator says of a run's collectives (``findings`` takes it from the caller,
    which may or may not be able to run the simulator): the half-bandwidth size α·β of the
    fitted cost (in message bytes: latency = transfer time), and the replay at each cap."""

    half_bandwidth_bytes: float | None
    replay: CapReplay | None = None


def severity(gain_pct: float | None, share: float) -> str:
    """High when it costs (or would gain) a fifth of the step, medium from a twentieth."""
    value = gain_pct if gain_pct is not None else 100 * share
    return "high" if value >= HIGH_PCT else "medium" if value >= MEDIUM_PCT else "low"


def finding(run: RunResult, code: str, share: float, message: str, evidence: list[Evidence],
            gain_pct: float | None = None, **more: Any) -> Finding:
    """A finding whose cost is ``share`` of the step now (0–1), and its gain where known."""
    return Finding(run.name, code, severity(gain_pct, share), message, evidence, gain_pct,
                   100 * share if gain_pct is None else gain_pct, **more)


def sharded(run: RunResult) -> bool:
    config = run.manifest.config
    info = variant_info(config.variant if config else None)
    return bool(info and info.sharded)


def foreign(run: RunResult) -> bool:
    """A trace ddpprof did not record (no run.json): findings name what to change in the job,
    never ddpprof's own flags or variants."""
    return run.manifest.config is None


def step_ms(rank: RankResult) -> float:
    return rank.breakdown.window_us / 1e3 / max(rank.steps, 1)


def run_step_ms(run: RunResult) -> float:
    return statistics.fmean(step_ms(r) for r in run.ranks)


def mib(size: float | None) -> str:
    return "?" if size is None else f"{size / MIB:.2f} MiB"


def reference_rank(run: RunResult) -> RankResult:
    """The rank whose collectives show their own cost: the one that waited least for the
    others (its calls are transfer, not waiting for a slow rank); rank 0 without the wait
    split."""
    waited = [r for r in run.ranks if r.wait is not None]
    if len(waited) < 2:
        return run.ranks[0]
    return min(waited, key=lambda r: (r.wait.wait_us if r.wait else 0.0, r.rank))


def exposed_share(rank: RankResult, late: Lateness | None) -> float:
    """What the rank's own collectives cost it: its exposed communication less its exposed
    waiting for other ranks (``late``: its run's ``advice.lateness``), share of its window.
    Where every rank waits in turn (a late rank that moves), no rank's collectives are all its
    own."""
    b = rank.breakdown
    if not b.window_us:
        return 0.0
    waiting_us = 1e3 * late.exposed_wait_ms.get(rank.rank, 0.0) * len(late.steps) \
        if late is not None else 0.0
    return max(b.exposed_comm_us - waiting_us, 0.0) / b.window_us
