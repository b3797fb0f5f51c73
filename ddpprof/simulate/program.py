"""What the simulator takes from one rank's trace: each profiled step as a *program* (the
compute the training thread does and where its gradients become ready), the collectives as they
ran, and how the two lanes slowed each other down. Pure: a loaded trace in, numbers out.

**The compute clock.** The training thread (the thread of the ProfilerStep spans) is followed
through the step. Its time counts as compute except inside a blocking wait
(``classify.BLOCKING_WAIT``: ``ddpprof::wait``, FSDP's collectives on gloo), so the blocking
all-reduces ``simple_ddp_hook`` runs inside ``AccumulateGrad`` are communication, not backward;
and while a collective is in flight compute counts 1/σ (it ran σ times slower then, see
``contention``). Between the end of backward and the optimizer only the thread's own spans
count: there PyTorch DDP waits for its buckets inside torch, with no span to say so.

A step's program, in compute µs:

* ``pre``: from the step's start to its last backward pass (forward and loss; with gradient
  accumulation, the K−1 micro-steps before it too);
* ``backward``: that backward pass, with each gradient's ready point (its ``AccumulateGrad``
  end) and size, in the order they became ready;
* ``sync``: the thread's own work between the end of backward and the optimizer (copies out of
  buckets, division by the world size);
* ``post``: from the optimizer's first span to the step's end (``optimizer.step``, zero_grad);
* ``fixed``: the collectives that are not the gradient sync the simulator rebuilds (FSDP's
  all-gathers, ``pytorch_zero1``'s broadcasts), each with its phase and its point in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..metrics import intervals as iv
from ..metrics.comm import message_bytes
from ..trace import classify
from ..trace.events import RankTrace
from .cost import Contention, compute_slowdown

#: A matrix product shorter than this is left out of the slowdown estimate (timer noise).
MIN_OP_US = 200.0


@dataclass(frozen=True)
class Collective:
    """One collective of the trace as it ran on this rank."""

    kind: str
    size_bytes: int | None
    start_us: float
    end_us: float
    launch_us: float                 # when the training thread issued it (its c10d op)
    overlap: float                   # share of it that ran beside the thread's compute
    blocked: float                   # share of it the thread spent in a blocking wait


@dataclass(frozen=True)
class Placed:
    """A collective of a step, placed in its program: issued ``at_us`` compute µs into
    ``phase`` ("pre", "backward", "sync" or "post")."""

    collective: Collective
    phase: str
    at_us: float


@dataclass(frozen=True)
class StepProgram:
    step: str
    wall_us: float                   # the step as recorded
    pre_us: float
    backward_us: float
    grads: list[tuple[float, int]]   # (ready, compute µs into backward; bytes), ready order
    sync_us: float
    post_us: float
    collectives: list[Placed]        # the step's, as recorded
    comm_us: float                   # |⋃ collectives| in the step
    overlap_pct: float | None        # |compute ∩ collectives| / |collectives|
    exposed_comm_us: float


@dataclass
class TraceModel:
    """Everything the simulator reads from one rank's trace."""

    programs: list[StepProgram]
    collectives: list[Collective]    # every step's
    contention: Contention
    world_size: int | None
    backend: str | None
    notes: list[str] = field(default_factory=list)


def _main_thread(trace: RankTrace, steps: np.ndarray) -> int:
    threads = trace.thread_id[steps]
    return int(np.bincount(threads).argmax())


def _issued(trace: RankTrace, spans: np.ndarray, main: int) -> dict[int, tuple[str, float]]:
    """Each backend collective span's kind and launch, from the c10d op the training thread
    issued it by (the k-th op pairs with the k-th span by start, when the counts agree): gloo
    runs a reduce-scatter as an all-reduce and names its span so."""
    ops = np.flatnonzero(classify.per_name(
        trace, lambda n: bool(classify.C10D_COLLECTIVE.match(n))) & (trace.stream < 0)
        & (trace.thread_id == main))
    if ops.size != spans.size or not ops.size:
        return {}
    ops = ops[np.argsort(trace.start_us[ops], kind="stable")]
    ordered = spans[np.argsort(trace.start_us[spans], kind="stable")]
    return {int(span): (classify.normalize_collective(classify.C10D_COLLECTIVE.match(
        trace.names[trace.name_id[op]]).group(1)), float(trace.start_us[op]))
        for op, span in zip(ops, ordered, strict=True)}


class _Lanes:
    """The training thread's compute, blocked and in-flight intervals of one trace."""

    def __init__(self, trace: RankTrace, main: int) -> None:
        s, e = trace.start_us, trace.end_us
        stream = classify.streams(trace)
        lanes = classify.host_lanes(trace, stream)
        mine = trace.thread_id == main
        blocking = classify.per_name(trace, lambda n: bool(classify.BLOCKING_WAIT.search(n)))
        self.blocked = iv.union(s[mine & blocking], e[mine & blocking])
        self.work = iv.subtract(iv.union(s[mine & lanes.work], e[mine & lanes.work]),
                                self.blocked)
        # on GPU the collectives are their kernels (nccl:* host spans only launch them)
        if classify.is_gpu_trace(stream):
            kinds = classify.kernel_kinds(trace, classify.KernelClassifier())
            self.comm_index = np.flatnonzero((kinds == classify.Kind.COMMUNICATION)
                                             & (stream >= 0))
        else:
            self.comm_index = np.flatnonzero(lanes.comm)
        self.comm = iv.union(s[self.comm_index], e[self.comm_index])


class _Clock:
    """Compute µs of the training thread from the step's start: wall time outside blocking
    waits, at 1/σ where a collective was in flight."""

    def __init__(self, lanes: _Lanes, lo: float, hi: float, slowdown: float) -> None:
        window = (np.array([lo]), np.array([hi]))
        blocked = iv.intersect(lanes.blocked, window)
        slow = iv.subtract(iv.intersect(lanes.comm, window), blocked)
        points = np.unique(np.concatenate([[lo, hi], *blocked, *slow]))
        middles = (points[:-1] + points[1:]) / 2
        rate = np.where(_inside(blocked, middles), 0.0,
                        np.where(_inside(slow, middles), 1 / slowdown, 1.0))
        self.points = points
        self.cumulative = np.concatenate([[0.0], np.cumsum(np.diff(points) * rate)])
        self.lanes, self.slowdown = lanes, slowdown

    def at(self, t: float) -> float:
        return float(np.interp(t, self.points, self.cumulative))

    def own_work(self, lo: float, hi: float) -> float:
        """Compute µs of the thread's own spans only, in [lo, hi)."""
        window = (np.array([lo]), np.array([hi]))
        work = iv.intersect(self.lanes.work, window)
        slow = iv.intersect(work, self.lanes.comm)
        return iv.length(work) - iv.length(slow) * (1 - 1 / self.slowdown)


def _inside(intervals: iv.Intervals, t: np.ndarray) -> np.ndarray:
    starts, ends = intervals
    if starts.size == 0:
        return np.zeros(t.size, dtype=bool)
    k = np.searchsorted(starts, t, side="right") - 1
    return (k >= 0) & (t < ends[np.clip(k, 0, None)])


def _collectives(trace: RankTrace, lanes: _Lanes, main: int) -> list[Collective]:
    issued = _issued(trace, lanes.comm_index, main)
    starts, ends = trace.start_us[lanes.comm_index], trace.end_us[lanes.comm_index]
    lengths = ends - starts
    positive = np.where(lengths > 0, lengths, 1.0)
    besides = np.where(lengths > 0, iv.covered(lanes.work, starts, ends) / positive, 0.0)
    blocks = np.where(lengths > 0, iv.covered(lanes.blocked, starts, ends) / positive, 0.0)
    found = []
    for k, i in enumerate(lanes.comm_index.tolist()):
        args = trace.comm_args.get(i)
        kind, launch = issued.get(i, (None, float(starts[k])))
        kind = kind or classify.collective_of(trace.names[trace.name_id[i]],
                                              args.collective if args else None)
        size = message_bytes(kind, args.in_bytes, args.out_bytes,
                             args.group_size or trace.world_size) if args else None
        found.append(Collective(kind, size, float(starts[k]), float(ends[k]), launch,
                                float(besides[k]), float(blocks[k])))
    return sorted(found, key=lambda c: c.start_us)


def _slowdown(trace: RankTrace, lanes: _Lanes, main: int) -> tuple[float | None, int]:
    """σ from the trace's matrix products (keyed by FLOPs) on the training thread, seen with
    and without a collective in flight (``cost.compute_slowdown``)."""
    index = np.fromiter(trace.matmul_flops, np.int64, len(trace.matmul_flops))
    flops = np.fromiter(trace.matmul_flops.values(), np.float64, index.size)
    starts, ends = trace.start_us[index], trace.end_us[index]
    durations = ends - starts
    mine = (trace.thread_id[index] == main) & (durations >= MIN_OP_US)
    shares = iv.covered(lanes.comm, starts[mine], ends[mine]) / durations[mine]
    return compute_slowdown(flops[mine].tolist(), durations[mine], shares)


def _program(trace: RankTrace, step: int, lanes: _Lanes, clock: _Clock,
             collectives: list[Collective], grad_accum: int) -> StepProgram | None:
    lo, hi = float(trace.start_us[step]), float(trace.end_us[step])
    inside = (trace.start_us >= lo) & (trace.start_us < hi)
    grads = sorted((float(trace.end_us[i]), size) for i, size in trace.grad_bytes.items()
                   if inside[i])
    if not grads:
        return None
    per_pass = len(grads) // grad_accum if len(grads) % grad_accum == 0 else len(grads)
    earlier, grads = grads[:len(grads) - per_pass], grads[len(grads) - per_pass:]
    backward = np.flatnonzero(inside & classify.per_name(
        trace, lambda n: n.startswith(classify.BACKWARD_OP_PREFIX)))
    after = earlier[-1][0] if earlier else lo
    starts = trace.start_us[backward][trace.start_us[backward] >= after]
    backward_start = float(starts.min()) if starts.size else grads[0][0]
    backward_end = grads[-1][0]
    optimizer = np.flatnonzero(inside & classify.per_name(
        trace, lambda n: n.startswith(classify.OPTIMIZER_PREFIX))
        & (trace.start_us >= backward_end))
    mine = [c for c in collectives if lo <= c.launch_us < hi]
    sync_end = max([backward_end, *(c.end_us for c in mine if c.launch_us >= backward_end)])
    post_start = float(trace.start_us[optimizer].min()) if optimizer.size else sync_end
    at = clock.at
    placed = []
    for c in mine:
        if c.launch_us < backward_start:
            placed.append(Placed(c, "pre", at(c.launch_us)))
        elif c.launch_us <= backward_end:
            placed.append(Placed(c, "backward", at(c.launch_us) - at(backward_start)))
        elif c.launch_us < post_start:
            placed.append(Placed(c, "sync", 0.0))
        else:
            placed.append(Placed(c, "post", at(c.launch_us) - at(post_start)))
    step_comm = iv.intersect(lanes.comm, (np.array([lo]), np.array([hi])))
    comm_us = iv.length(step_comm)
    hidden = iv.length(iv.intersect(step_comm, lanes.work))
    return StepProgram(
        step=trace.names[trace.name_id[step]], wall_us=hi - lo, pre_us=at(backward_start),
        backward_us=at(backward_end) - at(backward_start),
        grads=[(at(t) - at(backward_start), int(size)) for t, size in grads],
        sync_us=clock.own_work(backward_end, post_start), post_us=at(hi) - at(post_start),
        collectives=placed, comm_us=comm_us,
        overlap_pct=100 * hidden / comm_us if comm_us > 0 else None,
        exposed_comm_us=comm_us - hidden)


def read_trace(trace: RankTrace, grad_accum: int = 1) -> TraceModel:
    """The programs of every profiled step whose backward the trace holds, the collectives,
    and the contention the trace shows."""
    steps, _ = classify.profiler_steps(trace)
    notes: list[str] = []
    if steps.size == 0:
        return TraceModel([], [], Contention(), trace.world_size, trace.backend,
                          ["no ProfilerStep in the trace"])
    main = _main_thread(trace, steps)
    lanes = _Lanes(trace, main)
    collectives = _collectives(trace, lanes, main)
    sigma, keys = _slowdown(trace, lanes, main)
    if sigma is None:
        notes.append("compute slowdown beside communication: no matrix product ran both with "
                     "and without a collective in flight; taken as 1")
    elif sigma < 1:
        notes.append(f"compute slowdown beside communication: measured {sigma:.2f}x (faster "
                     "with a collective in flight: the machine's load changed); taken as 1")
    else:
        notes.append(f"compute slowdown beside communication: {sigma:.2f}x, from matrix "
                     f"products of {keys} sizes seen with and without a collective in flight")
    contention = Contention(compute_slowdown=max(sigma or 1.0, 1.0))
    programs = []
    for step in steps:
        clock = _Clock(lanes, float(trace.start_us[step]), float(trace.end_us[step]),
                       contention.compute_slowdown)
        program = _program(trace, step, lanes, clock, collectives, grad_accum)
        if program is not None:
            programs.append(program)
    return TraceModel(programs, collectives, contention, trace.world_size, trace.backend,
                      notes)
