"""``simple_ddp``: after backward, one blocking all-reduce per parameter, then divide.

Seed 000's "naive DP": communication starts only when the whole backward is done, so none of
it can overlap with compute.
"""

from __future__ import annotations

import torch.distributed as dist

from .base import DataParallel, grad_or_zeros


class SimpleDDP(DataParallel):
    def _sync_gradients(self) -> None:
        for param in self.trainable_parameters():
            grad = grad_or_zeros(param)
            dist.all_reduce(grad, op=dist.ReduceOp.SUM)
            grad.div_(self.world_size)
