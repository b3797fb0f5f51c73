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

from ..analysis.options import LastStep
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
    collectives: list[Collective]    # those launched in the analyzed steps
    contention: Contention
    world_size: int | None
    backend: str | None
    notes: list[str] = field(default_factory=list)


def _main_thread(trace: RankTrace, steps: np.ndarray) -> int:
    threads = trace.thread_id[steps]
    return int(np.bincount(threads).argmax())


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
    waits, at 1/σ where a collective was in flight. Built from the lanes inside the step only,
    so a step costs the same however long the trace."""

    def __init__(self, lanes: _Lanes, lo: float, hi: float, slowdown: float) -> None:
        blocked = iv.window(lanes.blocked, lo, hi)
        slow = iv.subtract(iv.window(lanes.comm, lo, hi), blocked)
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
        work = iv.window(self.lanes.work, lo, hi)
        slow = iv.intersect(work, iv.window(self.lanes.comm, lo, hi))
        return iv.length(work) - iv.length(slow) * (1 - 1 / self.slowdown)


def _inside(intervals: iv.Intervals, t: np.ndarray) -> np.ndarray:
    starts, ends = intervals
    if starts.size == 0:
        return np.zeros(t.size, dtype=bool)
    k = np.searchsorted(starts, t, side="right") - 1
    return (k >= 0) & (t < ends[np.clip(k, 0, None)])


def _collectives(trace: RankTrace, lanes: _Lanes) -> list[Collective]:
    issued = classify.issuing_ops(trace, lanes.comm_index)
    starts, ends = trace.start_us[lanes.comm_index], trace.end_us[lanes.comm_index]
    lengths = ends - starts
    positive = np.where(lengths > 0, lengths, 1.0)
    besides = np.where(lengths > 0, iv.covered(lanes.work, starts, ends) / positive, 0.0)
    blocks = np.where(lengths > 0, iv.covered(lanes.blocked, starts, ends) / positive, 0.0)
    found = []
    for k, i in enumerate(lanes.comm_index.tolist()):
        args = trace.comm_args.get(i)
        op = issued.get(i)
        launch = float(trace.start_us[op] if op is not None else starts[k])
        kind = classify.issued_collective(trace, op) if op is not None else \
            classify.collective_of(trace.names[trace.name_id[i]],
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


class _ByStart:
    """Events of one kind sorted by start, so that each step finds its own by bisection."""

    def __init__(self, trace: RankTrace, index: np.ndarray) -> None:
        self.index = index[np.argsort(trace.start_us[index], kind="stable")]
        self.start = trace.start_us[self.index]

    def between(self, lo: float, hi: float) -> np.ndarray:
        """Those starting in [lo, hi)."""
        return self.index[np.searchsorted(self.start, lo):np.searchsorted(self.start, hi)]

    def first_start(self, lo: float, hi: float) -> float | None:
        """The earliest start in [lo, hi), if any."""
        k = int(np.searchsorted(self.start, lo))
        return float(self.start[k]) if k < self.start.size and self.start[k] < hi else None


@dataclass
class _Steps:
    """What every step's program reads, indexed once for the whole trace."""

    grads: _ByStart
    backward: _ByStart
    optimizer: _ByStart
    collectives: list[Collective]      # by start, as the trace model keeps them
    launches: np.ndarray               # their launches, ascending ...
    by_launch: np.ndarray              # ... and their positions in ``collectives``

    @classmethod
    def of(cls, trace: RankTrace, collectives: list[Collective]) -> _Steps:
        def named(prefix: str) -> _ByStart:
            return _ByStart(trace, np.flatnonzero(classify.per_name(
                trace, lambda n: n.startswith(prefix))))

        launches = np.array([c.launch_us for c in collectives], dtype=np.float64)
        by_launch = np.argsort(launches, kind="stable")
        return cls(_ByStart(trace, np.fromiter(trace.grad_bytes, np.int64,
                                               len(trace.grad_bytes))),
                   named(classify.BACKWARD_OP_PREFIX), named(classify.OPTIMIZER_PREFIX),
                   collectives, launches[by_launch], by_launch)

    def launched(self, lo: float, hi: float) -> list[Collective]:
        """The collectives launched in [lo, hi), in the trace model's order."""
        found = self.by_launch[np.searchsorted(self.launches, lo):
                               np.searchsorted(self.launches, hi)]
        return [self.collectives[k] for k in np.sort(found)]


def _program(trace: RankTrace, step: int, lanes: _Lanes, clock: _Clock, steps: _Steps,
             grad_accum: int) -> StepProgram | None:
    lo, hi = float(trace.start_us[step]), float(trace.end_us[step])
    grads = sorted((float(trace.end_us[i]), trace.grad_bytes[i])
                   for i in steps.grads.between(lo, hi).tolist())
    if not grads:
        return None
    per_pass = len(grads) // grad_accum if len(grads) % grad_accum == 0 else len(grads)
    earlier, grads = grads[:len(grads) - per_pass], grads[len(grads) - per_pass:]
    after = earlier[-1][0] if earlier else lo
    backward_start = steps.backward.first_start(after, hi)
    if backward_start is None:
        backward_start = grads[0][0]
    backward_end = grads[-1][0]
    mine = steps.launched(lo, hi)
    sync_end = max([backward_end, *(c.end_us for c in mine if c.launch_us >= backward_end)])
    post_start = steps.optimizer.first_start(backward_end, hi)
    if post_start is None:
        post_start = sync_end
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
    step_comm = iv.window(lanes.comm, lo, hi)
    comm_us = iv.length(step_comm)
    hidden = iv.length(iv.intersect(step_comm, iv.window(lanes.work, lo, hi)))
    return StepProgram(
        step=trace.names[trace.name_id[step]], wall_us=hi - lo, pre_us=at(backward_start),
        backward_us=at(backward_end) - at(backward_start),
        grads=[(at(t) - at(backward_start), int(size)) for t, size in grads],
        sync_us=clock.own_work(backward_end, post_start), post_us=at(hi) - at(post_start),
        collectives=placed, comm_us=comm_us,
        overlap_pct=100 * hidden / comm_us if comm_us > 0 else None,
        exposed_comm_us=comm_us - hidden)


def read_trace(trace: RankTrace, grad_accum: int = 1,
               last_step: LastStep | None = None) -> TraceModel:
    """The programs of the profiled steps of the analyzed window whose backward the trace
    holds, the collectives launched in them, and the contention the trace shows. The window is
    ``analyze``'s (``last_step``, decided for the run; by default from this trace's own steps,
    the last dropped). Each step costs time in proportion to its own events: the whole is
    linear in the trace."""
    steps, _ = classify.profiler_steps(trace)
    if last_step is None:
        last_step = LastStep.decide(classify.step_names(trace), keep_last_step=False)
    steps = last_step.analyzed(steps)
    notes: list[str] = []
    if steps.size == 0:
        return TraceModel([], [], Contention(), trace.world_size, trace.backend,
                          ["no ProfilerStep in the analyzed window"])
    main = _main_thread(trace, steps)
    lanes = _Lanes(trace, main)
    indexed = _Steps.of(trace, _collectives(trace, lanes))
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
    programs, collectives = [], []
    for step in steps.tolist():
        lo, hi = float(trace.start_us[step]), float(trace.end_us[step])
        collectives += indexed.launched(lo, hi)
        clock = _Clock(lanes, lo, hi, contention.compute_slowdown)
        program = _program(trace, step, lanes, clock, indexed, grad_accum)
        if program is not None:
            programs.append(program)
    return TraceModel(programs, collectives, contention, trace.world_size, trace.backend,
                      notes)
