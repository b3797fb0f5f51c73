"""Replaying a step program under a gradient-sync policy: when each collective launches, how
the communication lane and compute share the machine, and what the step then takes. Pure.

The replay is a small event simulation of one rank. Compute follows the program; the
communication lane runs one collective at a time, first come first served. While both run,
compute goes σ times slower and communication ρₒ times slower than the cost model; a
collective alone takes ρₐ times the model's time (``cost.Contention``). A blocking collective
stops compute until it is done.

Policies (how each variant syncs its gradients; each variant's is the registry's
``VariantInfo.replay``, ``ddpprof.variants``):

* ``blocking``: after backward, one blocking all-reduce per gradient in registration order
  (``simple_ddp``, ``simple_ddp_ga``);
* ``hook``: a blocking all-reduce as each gradient becomes ready (``simple_ddp_hook``);
* ``async``: an all-reduce launched as each gradient becomes ready, all waited on after
  backward (``simple_ddp_async``);
* ``bucketed``: gradients grouped into buckets as the variants group them
  (``ddpprof.variants.bucketing``: reverse registration order, one dtype per bucket, a bucket
  closing once it reaches the cap); a bucket launches when its last gradient is ready and every
  bucket before it has launched (``bucket_ddp_async``, PyTorch DDP's Reducer; ``pytorch_zero1``);
* ``sharded``: ``bucketed`` with a reduce-scatter per bucket, then after the optimizer one
  all-gather per bucket, launched together and waited on (``zero1``, ``zero2``);
* ``recorded``: the trace's own gradient collectives, each launched where it was (FSDP's
  reduce-scatters; a trace whose variant is unknown).

Collectives that are not the gradient sync (FSDP's all-gathers, ``pytorch_zero1``'s
broadcasts) are replayed where they were issued, blocking.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..units import MIB
from ..variants import DEFAULT_BUCKET_CAP_MIB, ReplayPolicy, VariantInfo
from ..variants.bucketing import assign_buckets
from .cost import Contention, CostModel
from .program import StepProgram


@dataclass(frozen=True)
class Policy:
    name: ReplayPolicy
    cap_mb: float | None = None        # bucketed and sharded: MiB
    ready_order: bool = False          # bucket in ready order instead of reverse registration
    sync_kind: str = "all_reduce"      # the gradient sync's collective

    @classmethod
    def of(cls, variant: VariantInfo, cap_mb: float | None = None,
           ready_order: bool = False) -> Policy:
        """How ``variant`` syncs its gradients (the registry's ``replay``)."""
        return cls(variant.replay, cap_mb, ready_order, variant.gradient_collective)


@dataclass(frozen=True)
class Job:
    """A collective to run: launched at ``at_us`` (compute µs into backward, or into post)."""

    at_us: float
    kind: str
    size_bytes: float
    blocking: bool


@dataclass(frozen=True)
class Outcome:
    step_us: float
    comm_us: float                     # time some collective was running
    hidden_us: float                   # ... while compute ran too
    gradient_collectives: int          # the sync's collectives per step

    @property
    def exposed_us(self) -> float:
        return self.comm_us - self.hidden_us

    @property
    def overlap_pct(self) -> float | None:
        return 100 * self.hidden_us / self.comm_us if self.comm_us > 0 else None


def gradient_jobs(policy: Policy, grads: list[tuple[float, int]], registration: list[int],
                  backward_us: float, dtypes: list[str | None] | None = None
                  ) -> tuple[list[Job], list[Job]]:
    """The sync's collectives during backward, and those after the optimizer (``sharded``'s
    all-gathers). ``grads``: (ready µs, bytes) in ready order; ``registration``: their
    positions in the model's registration order; ``dtypes``: their dtypes, where known (a
    bucket holds one)."""
    by_registration = sorted(range(len(grads)), key=lambda i: registration[i])
    if policy.name == "blocking":
        return [Job(backward_us, "all_reduce", grads[i][1], True) for i in by_registration], []
    if policy.name in ("hook", "async"):
        return [Job(t, "all_reduce", size, policy.name == "hook") for t, size in grads], []
    position = {i: k for k, i in enumerate(by_registration)}
    buckets = assign_buckets(
        [grads[i][1] for i in by_registration],
        (policy.cap_mb or DEFAULT_BUCKET_CAP_MIB) * MIB,
        [dtypes[i] for i in by_registration] if dtypes else None,
        [position[i] for i in range(len(grads))] if policy.ready_order else None)
    jobs, launched = [], 0.0
    for bucket in buckets:
        members = [by_registration[k] for k in bucket]
        launched = max(launched, *(grads[i][0] for i in members))
        jobs.append(Job(launched, policy.sync_kind, sum(grads[i][1] for i in members), False))
    after = [Job(0.0, "all_gather", job.size_bytes, True) for job in jobs] \
        if policy.name == "sharded" else []
    return jobs, after


class _Lane:
    """The communication lane and compute, advanced together."""

    def __init__(self, cost: CostModel, contention: Contention, world_size: int,
                 backend: str | None) -> None:
        self.cost, self.contention = cost, contention
        self.world_size, self.backend = world_size, backend
        self.queue: deque[list[float]] = deque()    # [remaining model µs, job number]
        self.now = self.comm_us = self.hidden_us = 0.0
        self.launched = self.finished = 0

    def launch(self, job: Job) -> int:
        work = self.cost.time_us(job.size_bytes, self.world_size, job.kind, self.backend)
        self.queue.append([work, self.launched])
        self.launched += 1
        return self.launched - 1

    def run(self, compute_us: float, until_job: int | None = None) -> float:
        """Advance until ``compute_us`` of compute is done (with ``until_job`` None), or until
        job ``until_job`` has finished (compute stopped meanwhile); return the compute done."""
        done = 0.0
        sigma = self.contention.compute_slowdown
        while True:
            computing = until_job is None and done < compute_us
            if until_job is not None and self.finished > until_job:
                return done
            if not computing and until_job is None:
                return done
            if not self.queue:
                self.now += compute_us - done
                return compute_us
            rho = self.contention.comm_overlapped if computing else self.contention.comm_alone
            to_finish = self.queue[0][0] * rho
            to_compute = (compute_us - done) * sigma if computing else float("inf")
            step = min(to_finish, to_compute)
            self.now += step
            self.comm_us += step
            if computing:
                self.hidden_us += step
                done = compute_us if step == to_compute else done + step / sigma
            self.queue[0][0] -= step / rho
            if step == to_finish:
                self.queue.popleft()
                self.finished += 1

    def drain(self) -> None:
        if self.launched:
            self.run(0.0, self.launched - 1)


def replay(program: StepProgram, policy: Policy, cost: CostModel, contention: Contention,
           world_size: int, backend: str | None, registration: list[int], scale: float,
           post_scale: float, dtypes: list[str | None] | None = None) -> Outcome:
    """One step of ``program`` on ``world_size`` ranks: compute times ``scale`` (the rank's
    share of the batch against the recorded one), the optimizer times ``post_scale``;
    ``registration`` and ``dtypes`` as :func:`gradient_jobs` takes them."""
    lane = _Lane(cost, contention, world_size, backend)
    grads = [(t * scale, size) for t, size in program.grads]
    backward_us = program.backward_us * scale
    fixed: dict[str, list[Job]] = {phase: [] for phase in ("pre", "backward", "sync", "post")}
    recorded = policy.name == "recorded"
    for placed in program.collectives:
        c = placed.collective
        if c.size_bytes is None:
            continue
        sync_collective = c.kind == policy.sync_kind and placed.phase in ("backward", "sync")
        if policy.name == "sharded" and c.kind == "all_gather" and placed.phase == "post":
            continue                       # rebuilt with the buckets
        if sync_collective and not recorded:
            continue                       # rebuilt by the policy
        # as recorded: blocking where the thread waited for it, else launched asynchronously
        blocking = c.blocked >= 0.5 or not (recorded and sync_collective)
        at = placed.at_us * (post_scale if placed.phase == "post" else scale)
        fixed[placed.phase].append(Job(at, c.kind, c.size_bytes, blocking))
    during: list[Job]
    after: list[Job]
    if recorded:
        during, after = [], []
    else:
        during, after = gradient_jobs(policy, grads, registration, backward_us, dtypes)

    _run_phase(lane, fixed["pre"], program.pre_us * scale)
    _run_phase(lane, sorted([*during, *fixed["backward"]], key=lambda j: j.at_us), backward_us)
    lane.drain()
    _run_phase(lane, fixed["sync"], program.sync_us)
    post = sorted(fixed["post"], key=lambda j: j.at_us)
    _run_phase(lane, post, program.post_us * post_scale)
    for job in after:
        lane.launch(job)
    lane.drain()
    gradient = len(during) if not recorded else sum(
        1 for p in program.collectives if p.collective.kind == policy.sync_kind
        and p.phase in ("backward", "sync"))
    return Outcome(lane.now, lane.comm_us, lane.hidden_us, gradient)


def _run_phase(lane: _Lane, jobs: list[Job], compute_us: float) -> None:
    """``compute_us`` of compute, launching ``jobs`` at their points (blocking ones stop it)."""
    done = 0.0
    for job in jobs:
        at = min(job.at_us, compute_us)
        if at > done:
            done += lane.run(at - done)
        number = lane.launch(job)
        if job.blocking:
            lane.run(0.0, number)
    lane.run(compute_us - done)
