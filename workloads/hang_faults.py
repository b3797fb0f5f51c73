"""Faults that hang a run, for ``ddpprof hang``'s tests: kinds of ``workloads.faults``'s
registry (``--fault KIND[:RANK[:STEP]]``), each acting once, on its culprit rank (the last rank
by default), at training step STEP (2 by default).

Each is a bug users meet, carried by a collective a training loop of their own would issue
(no marker in the trace, as with the other faults):

* ``skip_collective``: after each step's gradient sync every rank takes rank 0's "stop now?"
  flag (a broadcast); the culprit skips it once. Its next collective (the next step's
  gradients) meets the others' broadcast, and both sides wait.
* ``wrong_collective``: after each sync every rank all-reduces a metric; the culprit
  all-gathers it once instead.
* ``size_mismatch``: that all-reduce, with one element more on the culprit once (gloo aborts
  the rank that receives the longer message).
* ``exit_mid_step``: the culprit exits (``os._exit(1)``: no error, no cleanup) before its
  forward.
* ``sleep_past_timeout``: the culprit sleeps at the start of the step until it is stopped; its
  peers time out in their next collective.
* ``hang_in_group``: on a run over a device mesh (``fsdp_tp``), the culprit broadcasts within
  its tensor-parallel group at the start of the step, which its peers never do: the
  tensor-parallel group hangs, and the data-parallel peers wait for the culprit stuck in it.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from .faults import Fault, Injection, RankContext

if TYPE_CHECKING:
    from ddpprof.variants.base import DataParallel

#: The step a hang fault acts at when the fault does not say.
DEFAULT_STEP = 2
#: How long ``sleep_past_timeout`` sleeps: until torchrun stops it, in practice.
SLEEP_S = 3600.0


class _Hang(Injection):
    """A hang fault: ``acts`` is true on the culprit rank at the fault's step."""

    def __init__(self, fault: Fault, context: RankContext) -> None:
        self.culprit = context.rank == fault.rank
        self.at_step = int(fault.amount) if fault.amount is not None else DEFAULT_STEP
        self.step = -1
        self.context = context

    @property
    def acts(self) -> bool:
        return self.culprit and self.step == self.at_step

    def step_starts(self, step: int) -> None:
        self.step = step


class _AfterSync(_Hang):
    """The collective every rank issues after each step's gradient sync, and the culprit's
    once-only deviation from it."""

    replaces_gradient_sync = True

    def __init__(self, fault: Fault, context: RankContext) -> None:
        super().__init__(fault, context)
        self.kind = fault.kind
        self.flag = torch.zeros(1, device=context.device)
        self.metric = torch.ones(4, device=context.device)

    def sync_gradients(self, model: DataParallel) -> None:
        model.finish_gradient_sync()
        if self.kind == "skip_collective":
            if not self.acts:
                dist.broadcast(self.flag, 0)        # rank 0's "stop now?"
        elif self.acts and self.kind == "wrong_collective":
            gathered = torch.empty(4 * self.context.world_size, device=self.context.device)
            dist.all_gather_into_tensor(gathered, self.metric)
        elif self.acts:                              # size_mismatch
            dist.all_reduce(torch.ones(5, device=self.context.device))
        else:
            dist.all_reduce(self.metric)


class _Stop(_Hang):
    """``exit_mid_step`` and ``sleep_past_timeout``."""

    def __init__(self, fault: Fault, context: RankContext) -> None:
        super().__init__(fault, context)
        self.kind = fault.kind

    def step_starts(self, step: int) -> None:
        super().step_starts(step)
        if self.acts and self.kind == "sleep_past_timeout":
            time.sleep(SLEEP_S)

    def before_forward(self, step: int) -> None:
        if self.acts and self.kind == "exit_mid_step":
            os._exit(1)


class _GroupHang(_Hang):
    """``hang_in_group``: a broadcast within the culprit's tensor-parallel group."""

    def step_starts(self, step: int) -> None:
        super().step_starts(step)
        if self.acts:
            group = self.context.model.mesh.get_group("tp")  # type: ignore[attr-defined]
            source = dist.get_process_group_ranks(group)[0]
            dist.broadcast(torch.zeros(8, device=self.context.device), source, group=group)


def inject(fault: Fault, context: RankContext) -> Injection:
    if fault.kind in ("exit_mid_step", "sleep_past_timeout"):
        return _Stop(fault, context)
    if fault.kind == "hang_in_group":
        return _GroupHang(fault, context)
    return _AfterSync(fault, context)
