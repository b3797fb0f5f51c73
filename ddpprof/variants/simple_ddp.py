"""``simple_ddp``: after backward, one blocking all-reduce per parameter, then divide.

Seed 000's "naive DP": communication starts only when the whole backward is done, so none of
it can overlap with compute.
"""

from __future__ import annotations

from .base import DataParallel, all_reduce_sum, grad_or_zeros


class SimpleDDP(DataParallel):
    def _sync_gradients(self) -> None:
        for param in self.trainable_parameters():
            grad = grad_or_zeros(param)
            all_reduce_sum(grad, blocking=True)
            grad.div_(self.world_size)
