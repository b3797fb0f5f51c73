"""``bucket_ddp_async``: gradients packed into fixed buckets, one async all-reduce per bucket.

Bucketing, launch order and unused parameters are :mod:`.buckets`'s. Here: each bucket is one
flat buffer allocated once, ``[gradients | one used flag per parameter]``; a ready gradient is
copied into its slot, the buffer is all-reduced (sum) and divided once by the world size, and
``param.grad`` becomes a view of its slot: no ``torch.cat``, one ``div_`` per bucket.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from . import DEFAULT_BUCKET_CAP_MIB
from .base import all_reduce_sum, wait_for
from .buckets import BucketedDataParallel


class BucketDDPAsync(BucketedDataParallel):
    def __init__(self, module: nn.Module, bucket_cap_mib: float = DEFAULT_BUCKET_CAP_MIB) -> None:
        super().__init__(module, bucket_cap_mib)
        self._offsets: list[list[int]] = []
        self.bucket_buffers: list[torch.Tensor] = []
        for members in self.bucket_params:
            offsets, total = [], 0
            for param in members:
                offsets.append(total)
                total += param.numel()
            self._offsets.append([*offsets, total])  # the last: where the flags start
            self.bucket_buffers.append(torch.zeros(total + len(members), dtype=members[0].dtype,
                                            device=members[0].device))
        self._works: list[dist.Work | None] = [None] * len(self.bucket_params)

    def collectives_per_sync(self) -> dict[str, int | None]:
        return {"all_reduce": len(self.bucket_params)}

    def _slot(self, bucket: int, position: int) -> torch.Tensor:
        param = self.bucket_params[bucket][position]
        start = self._offsets[bucket][position]
        return self.bucket_buffers[bucket][start:start + param.numel()].view_as(param)

    def _flags(self, bucket: int) -> torch.Tensor:
        return self.bucket_buffers[bucket][self._offsets[bucket][-1]:]

    def _store_grad(self, bucket: int, position: int, grad: torch.Tensor | None) -> None:
        slot = self._slot(bucket, position)
        if grad is None:
            slot.zero_()
        else:
            slot.copy_(grad)
        self._flags(bucket)[position] = grad is not None

    def _launch(self, bucket: int) -> None:
        self._works[bucket] = all_reduce_sum(self.bucket_buffers[bucket], blocking=False)

    def _complete(self, bucket: int) -> None:
        work = self._works[bucket]
        assert work is not None
        wait_for(work)
        self._works[bucket] = None
        self.bucket_buffers[bucket].div_(self.world_size)
        used = self._used_anywhere(bucket, self._flags(bucket))
        for position, param in enumerate(self.bucket_params[bucket]):
            param.grad = self._slot(bucket, position) if used[position] else None


__all__ = ["BucketDDPAsync"]
