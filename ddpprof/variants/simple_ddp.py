"""``simple_ddp``: after backward, one blocking all-reduce per parameter, then divide.

Seed 000's "naive DP": communication starts only when the whole backward is done, so none of
it can overlap with compute.

A parameter without a gradient is taken to be unused on every rank (the ranks run the same
graph, as the hook variants need anyway) and is left out on every rank alike: its ``grad`` stays
``None``, as under DDP, and the optimizer skips it.
"""

from __future__ import annotations

from .base import DataParallel, all_reduce_sum


class SimpleDDP(DataParallel):
    def _sync_gradients(self) -> None:
        for param in self.trainable_parameters():
            if param.grad is not None:
                all_reduce_sum(param.grad, blocking=True)
                param.grad.div_(self.world_size)
