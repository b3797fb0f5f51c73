"""The rules on a run's communication, buckets and host: each a pure function of the typed
results (and of what the simulator says, ``CapAdvice``), returning a finding or None.

Every rule and threshold here is documented in docs/findings.md; each has tests
with traces that trigger it and traces that must not.
"""

from __future__ import annotations

import statistics

from ..analysis.group_rows import group_rows
from ..analysis.parts import PartKey
from ..analysis.results import RankResult, RunResult
from ..analysis.rows import run_row
from ..core.units import MIB
from ..metrics.dispatch import SHORT_OP_US
from ..trace.work_names import OPTIMIZER_CATEGORY
from .lateness import Lateness
from .model import (
    CapAdvice,
    Evidence,
    Finding,
    exposed_share,
    finding,
    foreign,
    mib,
    reference_rank,
    run_step_ms,
    sharded,
    step_ms,
)

# Thresholds, named as docs/findings.md names them.
FEW_BUCKETS = 3                  # bucket_cap_too_large: at most this many all-reduces per step
LATE_FIRST_LAUNCH = 0.7          # ... whose first launch comes this far into backward, or later
LOW_OVERLAP_PCT = 50.0           # ... with less overlap than this
MANY_CALLS = 8                   # latency_bound: at least this many collective calls per step
BELOW_HALF_BANDWIDTH = 0.25      # ... of a mean size below this fraction of the half-bandwidth size
TAIL_SHARE = 0.10                # exposed_tail: last bucket exposed for ≥ this share of the step
MANY_BUCKETS = 6                 # bucket_cap_too_small: at least this many buckets per step ...
#: The half-bandwidth size taken where no cost model can be had (the run's collectives all of
#: one size, no calibration): below it every transport measured is latency-bound (gloo over
#: loopback on a 2-core CPU host: α·β ≈ 290–400 KB, docs/simulate.md; NCCL over NVLink or
#: InfiniBand: hundreds of KB to MBs). A finding resting on it says so, at medium confidence.
HALF_BANDWIDTH_FLOOR_BYTES = 64 * 1024
COMM_BOUND_SHARE = 0.20          # comm_bound: exposed communication ≥ this share of the step ...
TINY_OPS_SHARE = 0.15            # host_bound (CPU): stretches of tiny ops ≥ this of the step
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


def bucket_cap_too_large(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """Too few buckets for the gradients: the first gradient reduction launches late in
    backward, so communication cannot start before backward ends. On the rank the others
    wait for (``reference_rank``): its reductions are its own, not a wait for a slow rank.
    Severity from the simulator's predicted gain where it can replay the run, else from the
    exposed communication."""
    rank = reference_rank(run)
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
    replay = advice.replay if advice is not None and not foreign(run) else None
    if replay is not None and replay.best_cap_mib < (replay.current_cap_mib or float("inf")):
        cap, gain = replay.best_cap_mib, replay.gain_pct
        # "now" is the step the table shows (the analyzed window's), the prediction the
        # replay's gain applied to it: the replay's own step is of one unprofiled step
        now = run_row(run).metrics.step_ms
        basis = (f"ddpprof simulate predicts {now * (1 - gain / 100):.1f} ms per step at "
                 f"{cap:g} MiB against {now:.1f} ms now, {gain:.0f}% less")
    else:
        cap, gain = max(round(total / 4 / MIB, 1), 0.1), None
        basis = "a cap of a quarter of the gradient bytes gives four buckets to overlap"
        if replay is not None:   # the simulator sees no smaller cap doing better
            gain = 0.0
            basis += (f"; but ddpprof simulate predicts no gain from smaller buckets here "
                      f"(best {replay.best_cap_mib:g} MiB): what overlaps costs as much as it "
                      "hides (the overlap tax)")
    remedy = (f"Make the gradient buckets smaller (DDP's bucket_cap_mb={cap:g}, or smaller "
              f"FSDP units): {basis}" if foreign(run) else f"Use --bucket-cap-mib {cap:g} "
              f"({basis})")
    # past 100 %: launched after backward's last gradient (the Reducer copies it first)
    when = (f"starts {100 * lateness:.0f}% into backward, so little can overlap" if lateness < 1
            else "starts only after backward's last gradient, so none of it overlaps backward")
    return finding(
        run, "bucket_cap_too_large", exposed_share(rank, late),
        f"{len(timeline.buckets)} bucket(s) for {mib(total)} of gradients: the first gradient "
        f"reduction {when}. {remedy}.",
        [Evidence("buckets_per_step", len(timeline.buckets)),
         Evidence("gradient_bytes_per_step", total, "B"),
         Evidence("first_launch_into_backward", round(100 * lateness, 1), "%"),
         Evidence("overlap_pct", overlap, "%"), Evidence("recommended_cap_mib", cap)], gain)


def bucket_cap_too_small(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """Many small gradient buckets: at least MANY_BUCKETS reductions of gradients per step
    whose mean size is below the half-bandwidth size α·β (each spends longer on the per-call
    latency than on moving bytes, and each is one more point where the ranks wait for one
    another). What it costs is the exposed communication of the rank the others wait for;
    the simulator's replay, where it can make one, says what a larger cap gains."""
    rank = reference_rank(run)
    timeline = rank.buckets
    half, measured = half_bandwidth(advice)
    if timeline is None or len(timeline.buckets) < MANY_BUCKETS \
            or timeline.backward_end_ms is None:   # reductions of no gradient seen
        return None
    sizes = [b.size_bytes for b in timeline.buckets if b.size_bytes is not None]
    if not sizes or statistics.fmean(sizes) >= half:
        return None
    mean = statistics.fmean(sizes)
    replay = advice.replay if advice is not None and not foreign(run) else None
    cap = max(round(4 * half / MIB, 2), 0.25)
    basis = "buckets of several times the half-bandwidth size move bytes more than they wait"
    if replay is not None and replay.best_cap_mib > (replay.current_cap_mib or float("inf")):
        cap = replay.best_cap_mib
        basis = (f"ddpprof simulate predicts {replay.best_step_ms:.1f} ms per step at {cap:g} "
                 f"MiB against {replay.current_step_ms:.1f} ms now")
    remedy = (f"Make the gradient buckets larger (DDP's bucket_cap_mb={cap:g})"
              if foreign(run) else f"Use --bucket-cap-mib {cap:g}")
    share = exposed_share(rank, late)
    return finding(
        run, "bucket_cap_too_small", share,
        f"{len(timeline.buckets)} gradient buckets per step of {mib(mean)} on average, below "
        f"{_half_words(half, measured)}: each pays the per-call latency and is one more point "
        f"where the ranks wait for one another; the collectives are exposed for "
        f"{100 * share:.0f}% of the step. {remedy} ({basis}).",
        [Evidence("buckets_per_step", len(timeline.buckets)),
         Evidence("mean_bucket_bytes", round(mean), "B"),
         Evidence("half_bandwidth_bytes", round(half), "B"),
         Evidence("half_bandwidth_from", "cost model" if measured else "floor"),
         Evidence("exposed_comm_pct", round(100 * share, 2), "%"),
         Evidence("recommended_cap_mib", cap)],
        confidence="high" if measured else "medium")


def half_bandwidth(advice: CapAdvice | None) -> tuple[float, bool]:
    """The half-bandwidth size α·β in message bytes, and whether a cost model gave it: else
    HALF_BANDWIDTH_FLOOR_BYTES, a size every transport measured is latency-bound below."""
    measured = advice.half_bandwidth_bytes if advice is not None else None
    return (measured, True) if measured else (HALF_BANDWIDTH_FLOOR_BYTES, False)


def _half_words(half: float, measured: bool) -> str:
    return (f"the {mib(half)} at which a call spends as long moving bytes as on latency"
            if measured else f"{mib(half)}, below which every transport measured spends "
            "longer on latency than on moving bytes (no cost model for this run: its "
            "collectives are of one size and no calibration is beside it)")


def latency_bound(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """Many small collectives, well below the size where bus bandwidth saturates. The size is
    the half-bandwidth point α·β of the fitted cost t = α + S/β: below it a call spends more
    time on latency than on moving bytes."""
    rank = reference_rank(run)
    per_step = rank.calls.n / max(rank.steps, 1)
    sizes = [s for s in rank.calls.size_bytes if s is not None]
    if per_step < MANY_CALLS or not sizes:
        return None
    (half, measured), mean = half_bandwidth(advice), statistics.fmean(sizes)
    # the floor is already well below every transport's half-bandwidth size: below it counts
    if mean >= (BELOW_HALF_BANDWIDTH if measured else 1.0) * half:
        return None
    if foreign(run):
        remedy = ("bring the collectives together into fewer, larger ones (DDP's gradient "
                  "buckets, a larger bucket_cap_mb; larger FSDP units)")
    else:
        remedy = ("shard in larger units (fewer fully_shard groups, or a larger "
                  "--bucket-cap-mib)" if sharded(run) else "bucket gradients together "
                  "(bucket_ddp_async or pytorch_ddp, or a larger --bucket-cap-mib)")
    return finding(
        run, "latency_bound", exposed_share(rank, late),
        f"{per_step:.0f} collectives per step of {mib(mean)} on average, {half / mean:.0f}× "
        f"below {_half_words(half, measured)}: {remedy}, so that each call carries more.",
        [Evidence("calls_per_step", round(per_step, 1)),
         Evidence("mean_bytes_per_call", round(mean), "B"),
         Evidence("half_bandwidth_bytes", round(half), "B"),
         Evidence("half_bandwidth_from", "cost model" if measured else "floor")],
        confidence="high" if measured else "medium")


def exposed_tail(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """The last bucket's reduction sticks out after backward (on the rank the others wait
    for: on the others it sticks out by their wait too)."""
    rank = reference_rank(run)
    timeline = rank.buckets
    if timeline is None or len(timeline.buckets) < 2:
        return None
    last, step = timeline.buckets[-1], step_ms(rank)
    if not step or last.exposed_ms < TAIL_SHARE * step:
        return None
    share = last.exposed_ms / step
    return finding(
        run, "exposed_tail", share,
        f"the last bucket's reduction ({mib(last.size_bytes)}) runs {last.exposed_ms:.2f} ms "
        f"past the end of backward, {100 * share:.0f}% of the step: a smaller last bucket, or "
        "overlapping it with the optimizer step (per-bucket optimizer updates), would hide it.",
        [Evidence("last_bucket_exposed_ms", round(last.exposed_ms, 3), "ms"),
         Evidence("last_bucket_bytes", last.size_bytes, "B"),
         Evidence("step_ms", round(step, 3), "ms")], 100 * share)


def no_overlap(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """Communication is blocking: none of it hides behind compute (on the rank the others wait
    for: the others' collectives also hold their wait for it). A step with next to no compute
    (under EXPOSED_PCT of the window) has nothing to hide it behind: no claim."""
    rank = reference_rank(run)
    overlap, exposed = rank.breakdown.overlap_pct, 100 * exposed_share(rank, late)
    if overlap is None or overlap >= NO_OVERLAP_PCT or exposed < EXPOSED_PCT \
            or rank.breakdown.compute_pct < EXPOSED_PCT:
        return None
    if foreign(run):
        remedy = ("launch the reductions asynchronously (DDP's gradient hooks, FSDP's "
                  "reduce-scatter and all-gather prefetching) and wait only before the "
                  "optimizer step")
    else:
        remedy = ("let the reduce-scatters and all-gathers run behind compute (FSDP "
                  "prefetching, asynchronous reductions; on gloo the collectives block the "
                  "calling thread)" if sharded(run) else "launch them asynchronously from "
                  "gradient hooks (bucket_ddp_async, pytorch_ddp) and wait only before the "
                  "optimizer step")
    return finding(
        run, "no_overlap", exposed / 100,
        f"only {overlap:.1f}% of the communication overlaps compute, and {exposed:.1f}% of "
        "the time is exposed communication: the collectives block (a synchronous variant, or "
        f"a wait before backward ends). To hide them, {remedy}.",
        [Evidence("overlap_pct", round(overlap, 2), "%"),
         Evidence("exposed_comm_pct", round(exposed, 2), "%")], exposed)


def comm_bound(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """Communication outweighs the work a batch brings: on the rank the others wait for (its
    collectives are its own transfers), the collectives take at least as long as forward and
    backward (its compute but the optimizer's, which grows with the parameters as the
    communication does, not with the batch), and the exposed communication is at least
    COMM_BOUND_SHARE of the step. What it costs is that exposed part."""
    rank = reference_rank(run)
    b = rank.breakdown
    if not rank.collectives or not b.window_us:
        return None
    steps = max(rank.steps, 1)
    waited = rank.wait.wait_us if rank.wait is not None else 0.0
    comm_ms, compute_ms = (b.comm_us - waited) / 1e3 / steps, b.compute_us / 1e3 / steps
    work_ms = compute_ms - _optimizer_ms(rank)
    share = exposed_share(rank, late)
    if comm_ms < work_ms or share < COMM_BOUND_SHARE:
        return None
    moved = sum(s for s in rank.calls.size_bytes if s is not None) / steps
    how = ("a larger batch per rank, accumulating gradients over micro-batches without "
           "syncing (no_sync), or fewer ranks" if foreign(run) else
           "a larger --global-batch per rank, --grad-accum 2 or more, or fewer ranks (--nproc)")
    return finding(
        run, "comm_bound", share,
        f"communication outweighs the work of a batch: {comm_ms:.3g} ms of collectives per "
        f"step ({mib(moved)}) against {work_ms:.3g} ms of forward and backward "
        f"({compute_ms:.3g} ms of compute with the optimizer), {100 * share:.0f}% of the step "
        f"exposed: each rank has too little work for what a step communicates. Use {how}.",
        [Evidence("comm_ms_per_step", round(comm_ms, 3), "ms"),
         Evidence("forward_backward_ms_per_step", round(work_ms, 3), "ms"),
         Evidence("compute_ms_per_step", round(compute_ms, 3), "ms"),
         Evidence("bytes_per_step", round(moved), "B"),
         Evidence("exposed_comm_pct", round(100 * share, 2), "%")])


def _optimizer_ms(rank: RankResult) -> float:
    """The rank's time in its optimizer's step, per step (its parts; 0 without)."""
    parts = rank.parts
    key = PartKey("compute", OPTIMIZER_CATEGORY)
    if parts is None or key not in parts.parts:
        return 0.0
    return float(parts.part_us[parts.parts.index(key)].mean()) / 1e3


def host_bound(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """The host, not the work, sets the pace. GPU: the device sits idle while the host is still
    busy issuing work. CPU: tiny ops (mean self time under SHORT_OP_US) take at least
    TINY_OPS_SHARE of the step on every rank (their mean): the step is spent dispatching."""
    rank = run.ranks[0]
    if rank.kind == "cpu":
        return _tiny_ops(run)
    if rank.host is None or rank.host.idle_host_busy_us is None:
        return None
    b = rank.breakdown
    if b.idle_pct < HOST_BOUND_IDLE_PCT or not b.idle_us:
        return None
    share = rank.host.idle_host_busy_us / b.idle_us
    if share < HOST_BUSY_SHARE:
        return None
    return finding(
        run, "host_bound", b.idle_pct / 100 * share,
        f"the device is idle {b.idle_pct:.1f}% of the window, and the host is busy running "
        f"ops or launching kernels for {100 * share:.0f}% of that idle time: the CPU cannot "
        "keep the device fed. Larger batches, CUDA graphs or torch.compile cut the launches.",
        [Evidence("idle_pct", round(b.idle_pct, 2), "%"),
         Evidence("idle_with_host_busy_pct", round(100 * share, 1), "%")], b.idle_pct * share)


def _tiny_ops(run: RunResult) -> Finding | None:
    """CPU ranks: the time in stretches of tiny ops (``metrics.dispatch``: at least 20 ops in
    a row, each shorter than 20 µs, the gaps between them included), share of the step, mean
    over the ranks; and the tiny ops by name from the steps' parts."""
    shares, calls, tiny_calls = [], [], []
    for rank in run.ranks:
        parts, host = rank.parts, rank.host
        if parts is None or host is None or host.tiny_op_stretch_us is None \
                or not rank.breakdown.window_us or not parts.step_names:
            return None
        shares.append(host.tiny_op_stretch_us / rank.breakdown.window_us)
        compute = [i for i in parts.items if parts.parts[i.part].group == "compute"]
        steps = len(parts.step_names)
        calls.append(sum(i.calls for i in compute) / steps)
        tiny_calls.append(sum(i.calls for i in compute if i.us < SHORT_OP_US * i.calls) / steps)
    share, step = statistics.fmean(shares), run_step_ms(run)
    if share < TINY_OPS_SHARE:
        return None
    return finding(
        run, "host_bound", share,
        f"{statistics.fmean(tiny_calls):.0f} of the {statistics.fmean(calls):.0f} op calls per "
        f"step take under {SHORT_OP_US:g} µs each, and the stretches where such ops follow one "
        f"another take {share * step:.3g} ms of the {step:.3g} ms step ({100 * share:.0f}%, "
        "the gaps between them included): the step is spent dispatching tiny ops, not "
        "computing. Fewer, larger ops (torch.compile, vectorised code, larger tensors per op) "
        "cut it.",
        [Evidence("op_calls_per_step", round(statistics.fmean(calls))),
         Evidence("tiny_op_calls_per_step", round(statistics.fmean(tiny_calls))),
         Evidence("tiny_op_stretches_ms_per_step", round(share * step, 3), "ms"),
         Evidence("share_of_step", round(100 * share, 2), "%"),
         Evidence("step_ms", round(step, 3), "ms")])


def dataloader(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """Time in the data loader inside the step."""
    rank = run.ranks[0]
    if rank.host is None or not rank.breakdown.window_us:
        return None
    share = 100 * rank.host.dataloader_us / rank.breakdown.window_us
    if share < DATALOADER_PCT:
        return None
    return finding(run, "dataloader", share / 100,
                    f"{share:.1f}% of the window is spent in the data loader: more workers "
                    "(num_workers), pinned memory and prefetching move it off the step.",
                    [Evidence("dataloader_pct", round(share, 2), "%")], share)


def grad_accum_opportunity(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """Communication dominates (exposed communication takes at least as long as compute) and
    is not amortized: accumulating gradients over K micro-steps syncs once per K, so exposed
    communication per sample falls by 1 − 1/K (K = 2: half)."""
    row = run_row(run)
    rank = reference_rank(run)
    if row.grad_accum not in (None, 1) or not rank.collectives:
        return None
    exposed, compute = 100 * exposed_share(rank, late), rank.breakdown.compute_pct
    if exposed < ACCUMULATION_EXPOSED_PCT or exposed < compute:
        return None
    gain = exposed / 2
    how = ("accumulating gradients over 2 micro-batches without syncing (no_sync in DDP, "
           "set_requires_gradient_sync(False) in FSDP2)" if foreign(run) else
           "accumulating gradients over 2 micro-steps (--grad-accum 2, no_sync)")
    return finding(
        run, "grad_accum_opportunity", exposed / 100,
        f"exposed communication ({exposed:.1f}% of the step) outweighs compute "
        f"({compute:.1f}%): {how} halves the syncs per sample, about {gain:.0f}% of step time "
        "per sample.",
        [Evidence("exposed_comm_pct", round(exposed, 2), "%"),
         Evidence("compute_pct", round(compute, 2), "%"), Evidence("grad_accum", row.grad_accum)],
        gain)


def tp_exposed(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """Tensor-parallel collectives on the critical path: a tensor-parallel group
    (:data:`TENSOR_PARALLEL_GROUPS`) exposed for at least TP_EXPOSED_SHARE of the step and for
    at least TP_DOMINANT_SHARE of the exposed time of all groups together."""
    rows = {row.name: row for row in group_rows(run)}
    exposed_all = sum(row.exposed_comm_ms_per_step for row in rows.values())
    step = run_step_ms(run)
    found = [row for name, row in rows.items() if name in TENSOR_PARALLEL_GROUPS]
    if not found or not step or not exposed_all:
        return None
    row = max(found, key=lambda r: r.exposed_comm_ms_per_step)
    share = row.exposed_comm_ms_per_step / step
    if share < TP_EXPOSED_SHARE or row.exposed_comm_ms_per_step < TP_DOMINANT_SHARE * exposed_all:
        return None
    where = (" Its groups cross nodes: keep tensor parallelism within a node."
             if row.locality == "inter-node" else "")
    smaller = "" if foreign(run) else ", or record with a smaller --tp"
    overlap = "n/a" if row.overlap_pct is None else f"{row.overlap_pct:.0f}%"
    return finding(
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


def a2a_imbalance(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """Uneven all-to-alls: in a group communicating at least A2A_SHARE of the step, the
    heaviest rank sends at least A2A_IMBALANCE × the mean bytes of the matched calls
    (``metrics.groups.Imbalance``). What it costs is taken as the share of the group's time
    the others spend beyond the mean: (1 − 1/ratio) × its communication time."""
    step = run_step_ms(run)
    candidates = [row for row in group_rows(run) if row.a2a_imbalance is not None
                  and row.a2a_imbalance >= A2A_IMBALANCE and step
                  and row.comm_ms_per_step >= A2A_SHARE * step]
    if not candidates:
        return None
    row = max(candidates, key=lambda r: r.a2a_imbalance or 0.0)
    ratio = row.a2a_imbalance or 1.0
    share = (1 - 1 / ratio) * row.comm_ms_per_step / step
    return finding(
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


def comm_queued(run: RunResult, advice: CapAdvice | None, late: Lateness | None
        ) -> Finding | None:
    """Collectives that could overlap but wait behind other traffic on their stream: a group
    whose calls, once launched, queued behind another group's calls or behind blocking calls
    of their own group (``metrics.groups.queued``) for at least QUEUED_SHARE of the step,
    mean over its ranks. What it costs is taken as that queued time."""
    step = run_step_ms(run)
    candidates = [row for row in group_rows(run) if row.queued_behind is not None
                  and step and row.queued_ms_per_step >= QUEUED_SHARE * step]
    if not candidates:
        return None
    row = max(candidates, key=lambda r: r.queued_ms_per_step)
    share = row.queued_ms_per_step / step
    return finding(
        run, "comm_queued", share,
        f"the collectives of group {row.name} wait {row.queued_ms_per_step:.2f} ms per step "
        f"({100 * share:.0f}% of the step) in their stream's queue behind {row.queued_behind}: "
        "they were launched in time to overlap, but start only when those end. Give them a "
        "process group of their own (a communicator, and so a stream, of their own), or issue "
        "the blocking collectives after them.",
        [Evidence("group", row.name), Evidence("behind", row.queued_behind),
         Evidence("queued_ms_per_step", round(row.queued_ms_per_step, 3), "ms"),
         Evidence("share_of_step", round(100 * share, 1), "%")])
