"""``pytorch_ddp``: ``torch.nn.parallel.DistributedDataParallel``, the reference to beat."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from . import DEFAULT_BUCKET_CAP_MIB
from .base import DataParallel


class PyTorchDDP(DataParallel):
    broadcasts_initial_state = False
    module: DistributedDataParallel

    def __init__(self, module: nn.Module, bucket_cap_mib: float = DEFAULT_BUCKET_CAP_MIB,
                 gradient_as_bucket_view: bool = False,
                 find_unused_parameters: bool = False) -> None:
        device = next(module.parameters()).device
        super().__init__(DistributedDataParallel(
            module,
            device_ids=[device] if device.type == "cuda" else None,
            bucket_cap_mb=bucket_cap_mib,   # PyTorch's name for MiB
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

    def collectives_per_sync(self) -> dict[str, int | None]:
        return {"all_reduce": self.reducer_buckets()}

    def parameter_names(self) -> dict[int, str]:
        return {id(p): name for name, p in self.module.module.named_parameters()}

    def gradient_buckets(self) -> list[list[nn.Parameter]] | None:
        """The Reducer's buckets after its rebuild (the order gradients arrived in the first
        step), from DDP's logging data: ``rebuilt_per_bucket_param_indices`` ("5 4 3 2, 1 0"),
        indices into the trainable parameters. None before the rebuild, or where torch does
        not say."""
        try:
            layout = self.module._get_ddp_logging_data().get("rebuilt_per_bucket_param_indices")
        except (AttributeError, RuntimeError):
            return None
        params = self.trainable_parameters()
        try:
            buckets = [[params[int(i)] for i in bucket.split()]
                       for bucket in str(layout or "").split(",") if bucket.strip()]
        except (ValueError, IndexError):
            return None
        return buckets or None

    def reducer_buckets(self) -> int | None:
        """The Reducer's bucket count. It re-buckets after the first step, in the order gradients
        actually arrived; the count is only reachable through a private call, so tolerate its
        absence (``None``)."""
        try:
            return len(self.module.reducer._get_zeros_like_grad_buckets())
        except (AttributeError, RuntimeError):
            return None
