"""``pytorch_zero1``: PyTorch's ZeRO-1, ``torch.distributed.optim.ZeroRedundancyOptimizer``,
over ``pytorch_ddp``.

DDP all-reduces the full gradients in its buckets during backward; the optimizer then steps only
the parameters assigned to this rank (whole parameters, packed greedily by size, so the shards
are only roughly 1/N each) and every rank broadcasts its updated parameters to the others (one
broadcast per rank: ``parameters_as_bucket_view=True`` packs them in one flat buffer per rank).

``overlap_with_ddp=True`` (the optimizer step inside DDP's communication hook) is not used. On
gloo, torch 2.13 refuses it (``hook_with_zero_step`` raises "Gloo backend using Overlapping DDP
with ZeRO may meet hangs"); on NCCL, by its own documentation, the first two or three
iterations then perform no parameter update while DDP learns its buckets, so the run would not
train the same model as every other variant.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from .base import WAIT_SPAN
from .pytorch_ddp import PyTorchDDP


class PyTorchZero1(PyTorchDDP):
    def make_optimizer(self, optimizer_class: type[torch.optim.Optimizer],
                       **kwargs: Any) -> torch.optim.Optimizer:
        # torch: only where a rank trains or a run is checked for it
        from torch.distributed.optim import ZeroRedundancyOptimizer

        optimizer = ZeroRedundancyOptimizer(self.trainable_parameters(),
                                            optimizer_class=optimizer_class,
                                            parameters_as_bucket_view=True, **kwargs)
        # The broadcasts are launched and waited on inside step(); label that part as a wait
        # so that a CPU trace does not count the blocked time as optimizer compute.
        sync = getattr(optimizer, "_sync_params", None)
        if sync is not None:
            # a private method torch's types do not declare: replaced on this instance only
            optimizer._sync_params = functools.partial(  # type: ignore[attr-defined]
                _labelled_wait, sync)
        return optimizer

    def collectives_per_sync(self) -> dict[str, int | None]:
        return {"all_reduce": self.reducer_buckets(), "broadcast": self.world_size}


def _labelled_wait(sync: Callable[[], object]) -> None:
    with torch.profiler.record_function(WAIT_SPAN):
        sync()
