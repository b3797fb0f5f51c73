"""``simple_ddp_async``: each post-accumulate hook launches an async all-reduce; the handles are
waited on, and the gradients divided, before ``optimizer.step()``.

Seed 000's "interleaved" DP: the autograd thread no longer blocks, so communication of late
layers can overlap the backward of earlier ones.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .base import all_reduce_sum, ready_grad, wait_for
from .simple_ddp_hook import SimpleDDPHook


class SimpleDDPAsync(SimpleDDPHook):
    def __init__(self, module: nn.Module) -> None:
        super().__init__(module)
        self._pending: list[tuple[dist.Work, torch.Tensor]] = []

    def _reduce(self, param: nn.Parameter) -> None:
        grad = ready_grad(param)
        self._pending.append((all_reduce_sum(grad, blocking=False), grad))

    def _wait_pending(self) -> None:
        for work, grad in self._pending:
            wait_for(work)
            grad.div_(self.world_size)
        self._pending.clear()
