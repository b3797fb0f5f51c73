"""What to change: findings drawn from an analysis, each with its evidence in numbers and, where
the simulator can say, the gain it predicts. Pure functions of the typed results.

Every rule and threshold here is documented in docs/findings.md; each has tests
with traces that trigger it and traces that must not.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .analysis.group_rows import group_rows
from .analysis.results import RankResult, RunResult
from .analysis.rows import run_row
from .units import MIB
from .variants import variant_info

# Thresholds, named as docs/findings.md names them.
FEW_BUCKETS = 3                  # bucket_cap_too_large: at most this many all-reduces per step
LATE_FIRST_LAUNCH = 0.7          # ... whose first launch comes this far into backward, or later
LOW_OVERLAP_PCT = 50.0           # ... with less overlap than this
MANY_CALLS = 8                   # latency_bound: at least this many collective calls per step
BELOW_HALF_BANDWIDTH = 0.25      # ... of a mean size below this fraction of the half-bandwidth size
TAIL_SHARE = 0.10                # exposed_tail: last bucket exposed for ≥ this share of the step
WAIT_SHARE = 0.10                # straggler: the others wait ≥ this share of the step ...
SAME_RANK_SHARE = 2 / 3          # ... and at least this share of all waiting is for one rank
COMPUTE_SKEW_PP = 10.0           # straggler (no wait split): compute % spread across ranks
NO_OVERLAP_PCT = 5.0             # no_overlap: overlap below this ...
EXPOSED_PCT = 5.0                # ... while exposed communication is at least this % of the window
HOST_BOUND_IDLE_PCT = 20.0       # host_bound: device idle at least this % of the window ...
HOST_BUSY_SHARE = 0.5            # ... and the host busy for at least this share of that idle time
DATALOADER_PCT = 5.0             # dataloader: the data loader takes at least this % of the window
ACCUMULATION_EXPOSED_PCT = 20.0  # grad_accum_opportunity: exposed comm at least this % of the step
TP_EXPOSED_SHARE = 0.10          # tp_exposed: a tensor-parallel group exposed ≥ this of the step
TP_DOMINANT_SHARE = 0.5          # ... and at least this share of all groups' exposed time
A2A_IMBALANCE = 1.5              # a2a_imbalance: the heaviest rank sends ≥ this × the mean ...
A2A_SHARE = 0.05                 # ... in a group whose communication is ≥ this share of the step
QUEUED_SHARE = 0.05              # comm_queued: a group's calls queued ≥ this share of the step
#: Process group names that are tensor parallelism's (DeviceMesh's ``tp``, DTensor's functional
#: collectives found by structure).
TENSOR_PARALLEL_GROUPS = frozenset({"tp", "tensor", "tensor_parallel", "functional"})

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


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

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "code": self.code, "severity": self.severity,
                "message": self.message,
                "evidence": {e.name: e.value for e in self.evidence},
                "evidence_units": {e.name: e.unit for e in self.evidence if e.unit},
                "estimated_gain_pct": self.estimated_gain_pct, "impact_pct": self.impact_pct}


@dataclass(frozen=True)
class CapReplay:
    """The simulator's replay of a run's middle step at each bucket cap: the best cap against
    the current one (made only for a run ddpprof recorded: only there does a finding name a
    cap)."""

    current_cap_mb: float | None
    best_cap_mb: float
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


def _severity(gain_pct: float | None, share: float) -> str:
    """High when it costs (or would gain) a fifth of the step, medium from a twentieth."""
    value = gain_pct if gain_pct is not None else 100 * share
    return "high" if value >= 20 else "medium" if value >= 5 else "low"


def _finding(run: RunResult, code: str, share: float, message: str, evidence: list[Evidence],
             gain_pct: float | None = None) -> Finding:
    """A finding whose cost is ``share`` of the step now (0–1), and its gain where known."""
    return Finding(run.name, code, _severity(gain_pct, share), message, evidence, gain_pct,
                   100 * share if gain_pct is None else gain_pct)


def _sharded(run: RunResult) -> bool:
    config = run.manifest.config
    info = variant_info(config.variant if config else None)
    return bool(info and info.sharded)


def _foreign(run: RunResult) -> bool:
    """A trace ddpprof did not record (no run.json): findings name what to change in the job,
    never ddpprof's own flags or variants."""
    return run.manifest.config is None


def _step_ms(rank: RankResult) -> float:
    return rank.breakdown.window_us / 1e3 / max(rank.steps, 1)


def _mb(size: float | None) -> str:
    return "?" if size is None else f"{size / MIB:.2f} MiB"


def bucket_cap_too_large(run: RunResult, advice: CapAdvice | None) -> Finding | None:
    """Too few buckets for the gradients: the first gradient reduction launches late in
    backward, so communication cannot start before backward ends."""
    rank = run.ranks[0]
    timeline = rank.buckets
    if timeline is None or not timeline.buckets or len(timeline.buckets) > FEW_BUCKETS:
        return None
    backward_end, first_grad = timeline.backward_end_ms, timeline.first_gradient_ms
    if backward_end is None or first_grad is None or backward_end <= first_grad:
        return None
    lateness = (timeline.buckets[0].launched_ms - first_grad) / (backward_end - first_grad)
    overlap = rank.breakdown.overlap_pct
    if lateness < LATE_FIRST_LAUNCH or (overlap is not None and overlap >= LOW_OVERLAP_PCT):
        return None
    total = sum(b.size_bytes or 0 for b in timeline.buckets)
    replay = advice.replay if advice is not None and not _foreign(run) else None
    if replay is not None and replay.best_cap_mb < (replay.current_cap_mb or float("inf")):
        cap, gain = replay.best_cap_mb, replay.gain_pct
        # "now" is the step the table shows (the analyzed window's), the prediction the
        # replay's gain applied to it: the replay's own step is of one unprofiled step
        now = run_row(run).metrics.step_ms
        basis = (f"ddpprof simulate predicts {now * (1 - gain / 100):.1f} ms per step at "
                 f"{cap:g} MiB against {now:.1f} ms now, {gain:.0f}% less")
    else:
        cap, gain = max(round(total / 4 / MIB, 1), 0.1), None
        basis = "a cap of a quarter of the gradient bytes gives four buckets to overlap"
    remedy = (f"Make the gradient buckets smaller (DDP's bucket_cap_mb={cap:g}, or smaller "
              f"FSDP units): {basis}" if _foreign(run) else f"Use --bucket-cap-mib {cap:g} "
              f"({basis})")
    # past 100 %: launched after backward's last gradient (the Reducer copies it first)
    when = (f"starts {100 * lateness:.0f}% into backward, so little can overlap" if lateness < 1
            else "starts only after backward's last gradient, so none of it overlaps backward")
    return _finding(
        run, "bucket_cap_too_large", _exposed_share(rank),
        f"{len(timeline.buckets)} bucket(s) for {_mb(total)} of gradients: the first gradient "
        f"reduction {when}. {remedy}.",
        [Evidence("buckets_per_step", len(timeline.buckets)),
         Evidence("gradient_bytes_per_step", total, "B"),
         Evidence("first_launch_into_backward", round(100 * lateness, 1), "%"),
         Evidence("overlap_pct", overlap, "%"), Evidence("recommended_cap_mib", cap)], gain)


def _exposed_share(rank: RankResult) -> float:
    b = rank.breakdown
    return b.exposed_comm_us / b.window_us if b.window_us else 0.0


def latency_bound(run: RunResult, advice: CapAdvice | None) -> Finding | None:
    """Many small collectives, well below the size where bus bandwidth saturates. The size is
    the half-bandwidth point α·β of the fitted cost t = α + S/β: below it a call spends more
    time on latency than on moving bytes."""
    rank = run.ranks[0]
    per_step = rank.calls.n / max(rank.steps, 1)
    sizes = [s for s in rank.calls.size_bytes if s is not None]
    if per_step < MANY_CALLS or not sizes or advice is None or not advice.half_bandwidth_bytes:
        return None
    mean, half = statistics.fmean(sizes), advice.half_bandwidth_bytes
    if mean >= BELOW_HALF_BANDWIDTH * half:
        return None
    if _foreign(run):
        remedy = ("bring the collectives together into fewer, larger ones (DDP's gradient "
                  "buckets, a larger bucket_cap_mb; larger FSDP units)")
    else:
        remedy = ("shard in larger units (fewer fully_shard groups, or a larger "
                  "--bucket-cap-mib)" if _sharded(run) else "bucket gradients together "
                  "(bucket_ddp_async or pytorch_ddp, or a larger --bucket-cap-mib)")
    return _finding(
        run, "latency_bound", _exposed_share(rank),
        f"{per_step:.0f} collectives per step of {_mb(mean)} on average, {half / mean:.0f}× "
        f"below the {_mb(half)} at which a call spends as long moving bytes as on latency: "
        f"{remedy}, so that each call carries more.",
        [Evidence("calls_per_step", round(per_step, 1)),
         Evidence("mean_bytes_per_call", round(mean), "B"),
         Evidence("half_bandwidth_bytes", round(half), "B")])


def exposed_tail(run: RunResult, advice: CapAdvice | None) -> Finding | None:
    """The last bucket's reduction sticks out after backward."""
    rank = run.ranks[0]
    timeline = rank.buckets
    if timeline is None or len(timeline.buckets) < 2:
        return None
    last, step_ms = timeline.buckets[-1], _step_ms(rank)
    if not step_ms or last.exposed_ms < TAIL_SHARE * step_ms:
        return None
    share = last.exposed_ms / step_ms
    return _finding(
        run, "exposed_tail", share,
        f"the last bucket's reduction ({_mb(last.size_bytes)}) runs {last.exposed_ms:.2f} ms "
        f"past the end of backward, {100 * share:.0f}% of the step: a smaller last bucket, or "
        "overlapping it with the optimizer step (per-bucket optimizer updates), would hide it.",
        [Evidence("last_bucket_exposed_ms", round(last.exposed_ms, 3), "ms"),
         Evidence("last_bucket_bytes", last.size_bytes, "B"),
         Evidence("step_ms", round(step_ms, 3), "ms")], 100 * share)


def straggler(run: RunResult, advice: CapAdvice | None) -> Finding | None:
    """One rank makes the others wait: with the wait/transfer split, the rank that caused at
    least SAME_RANK_SHARE of all the waiting, when the others spend ≥ WAIT_SHARE of the step
    (wall time: the union of their waiting intervals) waiting; without it, compute skew."""
    if len(run.ranks) < 2:
        return None
    if run.slowest_rank is not None:
        slow = next(r for r in run.ranks if r.rank == run.slowest_rank)
        caused_total = sum(r.wait.caused_wait_us for r in run.ranks if r.wait)
        others = [(r.steps, r.wait) for r in run.ranks if r.rank != slow.rank and r.wait]
        if not others or not caused_total or not slow.wait:
            return None
        waiting = statistics.fmean(wait.waiting_us / 1e3 / max(steps, 1)
                                   for steps, wait in others)
        step_ms = statistics.fmean(_step_ms(r) for r in run.ranks)
        share = waiting / step_ms if step_ms else 0.0
        dominance = slow.wait.caused_wait_us / caused_total
        if share < WAIT_SHARE or dominance < SAME_RANK_SHARE:
            return None
        return _finding(
            run, "straggler", share,
            f"rank {slow.rank} arrives last at collectives ({100 * dominance:.0f}% of the "
            f"waiting is for it): the other ranks spend {waiting:.2f} ms per step "
            f"({100 * share:.0f}% of the step) waiting. Look at what it does before "
            "communicating (data, load balance, its device).",
            [Evidence("rank", slow.rank),
             Evidence("share_of_waiting_caused", round(100 * dominance, 1), "%"),
             Evidence("others_waiting_ms_per_step", round(waiting, 3), "ms"),
             Evidence("step_ms", round(step_ms, 3), "ms")], 100 * share)
    compute = {r.rank: r.breakdown.compute_pct for r in run.ranks}
    spread = max(compute.values()) - min(compute.values())
    if spread < COMPUTE_SKEW_PP:
        return None
    top = max(compute, key=compute.__getitem__)
    return _finding(run, "straggler", spread / 100,
                    f"rank {top} computes {spread:.1f} points more of the window than the "
                    "least busy rank: the others wait for it at every collective.",
                    [Evidence("rank", top),
                     Evidence("compute_pct_spread", round(spread, 2), "pp")])


def no_overlap(run: RunResult, advice: CapAdvice | None) -> Finding | None:
    """Communication is blocking: none of it hides behind compute."""
    row = run_row(run)
    overlap, exposed = row.metrics.overlap_pct, row.metrics.exposed_comm_pct
    if overlap is None or overlap >= NO_OVERLAP_PCT or exposed < EXPOSED_PCT:
        return None
    if _foreign(run):
        remedy = ("launch the reductions asynchronously (DDP's gradient hooks, FSDP's "
                  "reduce-scatter and all-gather prefetching) and wait only before the "
                  "optimizer step")
    else:
        remedy = ("let the reduce-scatters and all-gathers run behind compute (FSDP "
                  "prefetching, asynchronous reductions; on gloo the collectives block the "
                  "calling thread)" if _sharded(run) else "launch them asynchronously from "
                  "gradient hooks (bucket_ddp_async, pytorch_ddp) and wait only before the "
                  "optimizer step")
    return _finding(
        run, "no_overlap", exposed / 100,
        f"only {overlap:.1f}% of the communication overlaps compute, and {exposed:.1f}% of "
        "the time is exposed communication: the collectives block (a synchronous variant, or "
        f"a wait before backward ends). To hide them, {remedy}.",
        [Evidence("overlap_pct", round(overlap, 2), "%"),
         Evidence("exposed_comm_pct", round(exposed, 2), "%")], exposed)


def host_bound(run: RunResult, advice: CapAdvice | None) -> Finding | None:
    """On GPU: the device sits idle while the host is still busy issuing work."""
    rank = run.ranks[0]
    if rank.kind != "gpu" or rank.host is None or rank.host.idle_host_busy_us is None:
        return None
    b = rank.breakdown
    if b.idle_pct < HOST_BOUND_IDLE_PCT or not b.idle_us:
        return None
    share = rank.host.idle_host_busy_us / b.idle_us
    if share < HOST_BUSY_SHARE:
        return None
    return _finding(
        run, "host_bound", b.idle_pct / 100 * share,
        f"the device is idle {b.idle_pct:.1f}% of the window, and the host is busy running "
        f"ops or launching kernels for {100 * share:.0f}% of that idle time: the CPU cannot "
        "keep the device fed. Larger batches, CUDA graphs or torch.compile cut the launches.",
        [Evidence("idle_pct", round(b.idle_pct, 2), "%"),
         Evidence("idle_with_host_busy_pct", round(100 * share, 1), "%")], b.idle_pct * share)


def dataloader(run: RunResult, advice: CapAdvice | None) -> Finding | None:
    """Time in the data loader inside the step."""
    rank = run.ranks[0]
    if rank.host is None or not rank.breakdown.window_us:
        return None
    share = 100 * rank.host.dataloader_us / rank.breakdown.window_us
    if share < DATALOADER_PCT:
        return None
    return _finding(run, "dataloader", share / 100,
                    f"{share:.1f}% of the window is spent in the data loader: more workers "
                    "(num_workers), pinned memory and prefetching move it off the step.",
                    [Evidence("dataloader_pct", round(share, 2), "%")], share)


def grad_accum_opportunity(run: RunResult, advice: CapAdvice | None) -> Finding | None:
    """Communication dominates (exposed communication takes at least as long as compute) and
    is not amortized: accumulating gradients over K micro-steps syncs once per K, so exposed
    communication per sample falls by 1 − 1/K (K = 2: half)."""
    row = run_row(run)
    if row.grad_accum not in (None, 1) or not run.ranks[0].collectives:
        return None
    exposed, compute = row.metrics.exposed_comm_pct, row.metrics.compute_pct
    if exposed < ACCUMULATION_EXPOSED_PCT or exposed < compute:
        return None
    gain = exposed / 2
    how = ("accumulating gradients over 2 micro-batches without syncing (no_sync in DDP, "
           "set_requires_gradient_sync(False) in FSDP2)" if _foreign(run) else
           "accumulating gradients over 2 micro-steps (--grad-accum 2, no_sync)")
    return _finding(
        run, "grad_accum_opportunity", exposed / 100,
        f"exposed communication ({exposed:.1f}% of the step) outweighs compute "
        f"({compute:.1f}%): {how} halves the syncs per sample, about {gain:.0f}% of step time "
        "per sample.",
        [Evidence("exposed_comm_pct", round(exposed, 2), "%"),
         Evidence("compute_pct", round(compute, 2), "%"), Evidence("grad_accum", row.grad_accum)],
        gain)


def tp_exposed(run: RunResult, advice: CapAdvice | None) -> Finding | None:
    """Tensor-parallel collectives on the critical path: a tensor-parallel group
    (:data:`TENSOR_PARALLEL_GROUPS`) exposed for at least TP_EXPOSED_SHARE of the step and for
    at least TP_DOMINANT_SHARE of the exposed time of all groups together."""
    rows = {row.name: row for row in group_rows(run)}
    exposed_all = sum(row.exposed_comm_ms_per_step for row in rows.values())
    step_ms = statistics.fmean(_step_ms(r) for r in run.ranks)
    found = [row for name, row in rows.items() if name in TENSOR_PARALLEL_GROUPS]
    if not found or not step_ms or not exposed_all:
        return None
    row = max(found, key=lambda r: r.exposed_comm_ms_per_step)
    share = row.exposed_comm_ms_per_step / step_ms
    if share < TP_EXPOSED_SHARE or row.exposed_comm_ms_per_step < TP_DOMINANT_SHARE * exposed_all:
        return None
    where = (" Its groups cross nodes: keep tensor parallelism within a node."
             if row.locality == "inter-node" else "")
    smaller = "" if _foreign(run) else ", or record with a smaller --tp"
    overlap = "n/a" if row.overlap_pct is None else f"{row.overlap_pct:.0f}%"
    return _finding(
        run, "tp_exposed", share,
        f"the tensor-parallel collectives (group {row.name}, {row.calls_per_step:.0f} per "
        f"step) are exposed for {row.exposed_comm_ms_per_step:.2f} ms per step, "
        f"{100 * share:.0f}% of the step ({overlap} overlapped): the layers wait for them. "
        "Overlap them with the matrix products that produce and consume them (asynchronous "
        f"tensor parallelism, sequence parallelism){smaller}.{where}",
        [Evidence("group", row.name),
         Evidence("exposed_ms_per_step", round(row.exposed_comm_ms_per_step, 3), "ms"),
         Evidence("share_of_step", round(100 * share, 1), "%"),
         Evidence("share_of_exposed_groups", round(
             100 * row.exposed_comm_ms_per_step / exposed_all, 1), "%"),
         Evidence("locality", row.locality)])


def a2a_imbalance(run: RunResult, advice: CapAdvice | None) -> Finding | None:
    """Uneven all-to-alls: in a group communicating at least A2A_SHARE of the step, the
    heaviest rank sends at least A2A_IMBALANCE × the mean bytes of the matched calls
    (``metrics.groups.Imbalance``). What it costs is taken as the share of the group's time
    the others spend beyond the mean: (1 − 1/ratio) × its communication time."""
    step_ms = statistics.fmean(_step_ms(r) for r in run.ranks)
    candidates = [row for row in group_rows(run) if row.a2a_imbalance is not None
                  and row.a2a_imbalance >= A2A_IMBALANCE and step_ms
                  and row.comm_ms_per_step >= A2A_SHARE * step_ms]
    if not candidates:
        return None
    row = max(candidates, key=lambda r: r.a2a_imbalance or 0.0)
    ratio = row.a2a_imbalance or 1.0
    share = (1 - 1 / ratio) * row.comm_ms_per_step / step_ms
    return _finding(
        run, "a2a_imbalance", share,
        f"the all-to-alls of group {row.name} are uneven: rank {row.a2a_heaviest_rank} "
        f"{'receives' if row.a2a_imbalance_side == 'receive' else 'sends'} {ratio:.1f}× the "
        "mean bytes, and every all-to-all lasts as long as its heaviest rank's share. Balance "
        "the load across ranks (experts: a load-balancing loss or a capacity factor; "
        "embedding tables: shard them by size, not by count).",
        [Evidence("group", row.name), Evidence("imbalance", round(ratio, 3), "x"),
         Evidence("side", row.a2a_imbalance_side),
         Evidence("heaviest_rank", row.a2a_heaviest_rank),
         Evidence("comm_ms_per_step", round(row.comm_ms_per_step, 3), "ms")])


def comm_queued(run: RunResult, advice: CapAdvice | None) -> Finding | None:
    """Collectives that could overlap but wait behind other traffic on their stream: a group
    whose calls, once launched, queued behind another group's calls or behind blocking calls
    of their own group (``metrics.groups.queued``) for at least QUEUED_SHARE of the step,
    mean over its ranks. What it costs is taken as that queued time."""
    step_ms = statistics.fmean(_step_ms(r) for r in run.ranks)
    candidates = [row for row in group_rows(run) if row.queued_behind is not None
                  and step_ms and row.queued_ms_per_step >= QUEUED_SHARE * step_ms]
    if not candidates:
        return None
    row = max(candidates, key=lambda r: r.queued_ms_per_step)
    share = row.queued_ms_per_step / step_ms
    return _finding(
        run, "comm_queued", share,
        f"the collectives of group {row.name} wait {row.queued_ms_per_step:.2f} ms per step "
        f"({100 * share:.0f}% of the step) in their stream's queue behind {row.queued_behind}: "
        "they were launched in time to overlap, but start only when those end. Give them a "
        "process group of their own (a communicator, and so a stream, of their own), or issue "
        "the blocking collectives after them.",
        [Evidence("group", row.name), Evidence("behind", row.queued_behind),
         Evidence("queued_ms_per_step", round(row.queued_ms_per_step, 3), "ms"),
         Evidence("share_of_step", round(100 * share, 1), "%")])


RULES: tuple[Callable[[RunResult, CapAdvice | None], Finding | None], ...] = (
    bucket_cap_too_large, latency_bound, exposed_tail, straggler, no_overlap, host_bound,
    dataloader, grad_accum_opportunity, tp_exposed, a2a_imbalance, comm_queued)


#: A finding that names the cause makes a vaguer one about the same run redundant: with
#: blocking collectives every reduction runs after backward, so the last one's tail is a
#: symptom of the blocking, not of the last bucket's size.
SUPERSEDES = {"bucket_cap_too_large": ("no_overlap",), "no_overlap": ("exposed_tail",)}


def findings(runs: list[RunResult], advice: dict[str, CapAdvice] | None = None
             ) -> list[Finding]:
    """Every rule on every run, ranked by estimated gain, else by what it costs now."""
    found = []
    for run in runs:
        mine = [f for rule in RULES if (f := rule(run, (advice or {}).get(run.name)))]
        superseded = {code for f in mine for code in SUPERSEDES.get(f.code, ())}
        found += [f for f in mine if f.code not in superseded]
    return sorted(found, key=lambda f: (-f.impact_pct, SEVERITY_ORDER[f.severity], f.run,
                                        f.code))
