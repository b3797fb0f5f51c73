"""``pytorch_ddp``: ``torch.nn.parallel.DistributedDataParallel``, the reference to beat."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .base import DataParallel


class PyTorchDDP(DataParallel):
    broadcasts_initial_state = False

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0,
                 gradient_as_bucket_view: bool = False,
                 find_unused_parameters: bool = False) -> None:
        device = next(module.parameters()).device
        super().__init__(DistributedDataParallel(
            module,
            device_ids=[device] if device.type == "cuda" else None,
            bucket_cap_mb=bucket_cap_mb,
            gradient_as_bucket_view=gradient_as_bucket_view,
            find_unused_parameters=find_unused_parameters,
        ))

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        with self.module.no_sync():
            yield

    @property
    def require_sync(self) -> bool:
        return self.module.require_backward_grad_sync

    def _sync_gradients(self) -> None:
        # DDP's Reducer finishes inside backward: when backward returns, grads are averaged.
        pass

    def allreduces_per_sync(self) -> int | None:
        # The Reducer re-buckets after the first step, in the order gradients actually arrived;
        # its bucket count is only reachable through a private call, so tolerate its absence.
        try:
            return len(self.module.reducer._get_zeros_like_grad_buckets())
        except (AttributeError, RuntimeError):
            return None
