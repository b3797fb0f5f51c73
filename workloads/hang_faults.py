"""Faults that hang a run, for ``ddpprof hang``'s tests: kinds of ``workloads.faults``'s
registry (``--fault KIND[:RANK[:STEP]]``), each acting once, on its culprit rank (the last rank
by default), at training step STEP (4 by default: by then a step repeats the one before, which
``ddpprof hang`` reads as the pattern).

Each is a bug users meet, carried by a collective a training loop of their own would issue at
the start of each step (no marker in the trace, as with the other faults):

* ``skip_collective``: every rank takes rank 0's "stop now?" flag (a broadcast); the culprit
  skips it once. Its next collective (its gradients') meets the others' broadcast, and both
  sides wait.
* ``wrong_collective``: every rank all-reduces a metric (the last step's loss, for its log);
  the culprit all-gathers it once instead.
* ``size_mismatch``: that all-reduce, with one element more on the culprit once (gloo aborts
  the rank that receives the longer message).
* ``exit_mid_step``: the culprit exits (``os._exit(1)``: no error, no cleanup) before its
  forward.
* ``sleep_past_timeout``: the culprit sleeps at the start of the step until it is stopped; its
  peers time out in their next collective.
* ``hang_in_group``: on a run over a device mesh (``fsdp_tp``), the culprit broadcasts within
  its tensor-parallel group, which its peers never do: the tensor-parallel group hangs, and the
  culprit's data-parallel peer waits for it in the next data-parallel collective.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from ddpprof.run.config import RunConfig

    from .faults import Fault, Injection, RankContext

#: The step a hang fault acts at when the fault does not say (the registry's default).
DEFAULT_STEP = 4
#: How long ``sleep_past_timeout`` sleeps: until torchrun stops it, in practice.
SLEEP_S = 3600.0
#: The kinds (name, summary), for ``workloads.faults.FAULT_KINDS``.
KINDS = (
    ("skip_collective", "at step AMOUNT the rank skips the broadcast every rank issues at the "
     "start of each step: the run hangs"),
    ("wrong_collective", "at step AMOUNT the rank all-gathers where every rank all-reduces at "
     "the start of each step: the run hangs"),
    ("size_mismatch", "at step AMOUNT the rank's all-reduce at the start of the step has one "
     "element more than the others'"),
    ("exit_mid_step", "the rank exits at step AMOUNT, before its forward"),
    ("sleep_past_timeout", "the rank sleeps at the start of step AMOUNT until it is stopped: "
     "its peers time out"),
    ("hang_in_group", "at step AMOUNT the rank broadcasts in its tensor-parallel group, which "
     "its peers never do"),
)


def problem(config: RunConfig, fault: Fault) -> str | None:
    """Why a run cannot take a hang fault: one rank alone cannot hang, and ``hang_in_group``
    needs a mesh."""
    from ddpprof.variants import VARIANTS

    if config.world_size < 2:
        return "it needs at least 2 ranks"
    if fault.kind == "hang_in_group" and not VARIANTS[config.variant].tensor_parallel:
        return f"variant {config.variant!r} runs over one process group (fsdp_tp has a mesh)"
    return None


def inject(fault: Fault, context: RankContext) -> Injection:
    return Hang(fault, context)


# The registry (workloads.faults) builds its hang kinds from the names above as it loads: the
# import comes after them, so that either module may be imported first.
from .faults import Injection as _Injection  # noqa: E402


class Hang(_Injection):
    """One hang fault: the collectives every rank issues at the start of each step (for the
    kinds that have one), and the culprit's deviation at its step."""

    def __init__(self, fault: Fault, context: RankContext) -> None:
        import torch

        self.kind = fault.kind
        self.culprit = context.rank == fault.rank
        self.at_step = int(fault.amount) if fault.amount is not None else DEFAULT_STEP
        self.context = context
        self.flag = torch.zeros(1, device=context.device)
        self.metric = torch.ones(4, device=context.device)

    def step_starts(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        acts = self.culprit and step == self.at_step
        device = self.context.device
        if self.kind == "skip_collective":
            if not acts:
                dist.broadcast(self.flag, 0)            # rank 0's "stop now?"
        elif self.kind == "wrong_collective" and acts:
            gathered = torch.empty(4 * self.context.world_size, device=device)
            dist.all_gather_into_tensor(gathered, self.metric)
        elif self.kind in ("wrong_collective", "size_mismatch"):
            # the last step's loss, for the log (one element more on the culprit, once)
            dist.all_reduce(torch.ones(5, device=device) if acts else self.metric)
        elif acts and self.kind == "sleep_past_timeout":
            time.sleep(SLEEP_S)
        elif acts and self.kind == "hang_in_group":
            mesh: DeviceMesh = getattr(self.context.model, "mesh")  # noqa: B009 (fsdp_tp's)
            group = mesh.get_group("tp")
            source = dist.get_process_group_ranks(group)[0]
            dist.broadcast(torch.zeros(8, device=device), source, group=group)

    def before_forward(self, step: int) -> None:
        if self.kind == "exit_mid_step" and self.culprit and step == self.at_step:
            os._exit(1)
