"""Gradients grouped into buckets fixed at construction, each bucket's collective launched from
the backward hooks once all its gradients are ready: the machinery ``bucket_ddp_async``,
``zero1`` and ``zero2`` share. What a bucket's collective is, and where its gradients live, is
theirs.

* Buckets are fixed at construction by :func:`.bucketing.assign_buckets` (PyTorch's Reducer's
  rule, which ``ddpprof simulate`` replays too): reverse registration order, one dtype and
  device per bucket, a bucket closing once it reaches ``bucket_cap_mib`` MiB.
* Buckets are launched strictly in index order (a ready bucket waits for the ones before it),
  so every rank issues the same collectives in the same order whatever order the hooks fire in.
* A parameter that got no gradient in the step's last micro-step is found when the step
  finishes: it contributes its gradient from earlier micro-steps, or zeros, and its bucket is
  launched then (what DDP's ``find_unused_parameters`` does), so the step never hangs. Each
  bucket also carries one "used" flag per parameter, summed with the gradients, so that a
  parameter no rank used keeps ``grad is None`` on every rank while one that some rank used gets
  the mean: the same answer as DDP, with no extra collective.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.units import MIB
from . import DEFAULT_BUCKET_CAP_MIB
from .base import DataParallel
from .bucketing import assign_buckets


def parameter_buckets(params: list[nn.Parameter], cap_mib: float) -> list[list[int]]:
    """:func:`.bucketing.assign_buckets` of ``params`` (in registration order): positions in
    ``params``, bucket by bucket in launch order."""
    return assign_buckets([p.numel() * p.element_size() for p in params], cap_mib * MIB,
                          [(p.dtype, p.device) for p in params])


class BucketedDataParallel(DataParallel):
    """Tracks which gradients of which bucket are ready and launches buckets in order.

    Subclasses implement :meth:`_store_grad` (put a parameter's gradient, or its absence, into
    the bucket), :meth:`_launch` (start the bucket's collective) and :meth:`_complete` (wait for
    it and hand the reduced gradients to the optimizer).
    """

    def __init__(self, module: nn.Module, bucket_cap_mib: float = DEFAULT_BUCKET_CAP_MIB) -> None:
        super().__init__(module)
        if not bucket_cap_mib > 0:
            raise ValueError(f"bucket_cap_mib must be positive, got {bucket_cap_mib}")
        params = self.trainable_parameters()
        self.bucket_params: list[list[nn.Parameter]] = [
            [params[i] for i in positions]
            for positions in parameter_buckets(params, bucket_cap_mib)]
        self._position_of = {id(p): (b, pos) for b, members in enumerate(self.bucket_params)
                             for pos, p in enumerate(members)}
        self._ready: list[list[bool]] = []
        self._used_here: list[list[bool]] = []
        self._pending: list[int] = []
        self._next_to_launch = 0
        self._reset_readiness()
        self._hook_handles = [p.register_post_accumulate_grad_hook(self._on_grad_ready)
                              for p in reversed(params)]

    def gradient_buckets(self) -> list[list[nn.Parameter]]:
        return [list(members) for members in self.bucket_params]

    def _store_grad(self, bucket: int, position: int, grad: torch.Tensor | None) -> None:
        """Write ``grad`` (``None``: this rank has none; contribute zeros, flag it unused)."""
        raise NotImplementedError

    def _launch(self, bucket: int) -> None:
        raise NotImplementedError

    def _complete(self, bucket: int) -> None:
        raise NotImplementedError

    def _on_grad_ready(self, param: nn.Parameter) -> None:
        if not self.require_sync:
            return
        self._store(*self._position_of[id(param)], param.grad)

    def _store(self, bucket: int, position: int, grad: torch.Tensor | None) -> None:
        self._store_grad(bucket, position, grad)
        self._used_here[bucket][position] = grad is not None
        if not self._ready[bucket][position]:
            self._ready[bucket][position] = True
            self._pending[bucket] -= 1
        while (self._next_to_launch < len(self.bucket_params)
               and self._pending[self._next_to_launch] == 0):
            self._launch(self._next_to_launch)
            self._next_to_launch += 1

    def _sync_gradients(self) -> None:
        for bucket, members in enumerate(self.bucket_params):
            for position, param in enumerate(members):
                if not self._ready[bucket][position]:
                    # No gradient in this micro-step: earlier micro-steps' if any, else none.
                    self._store(bucket, position, param.grad)
        for bucket in range(len(self.bucket_params)):
            self._complete(bucket)
        self._reset_readiness()

    def _used_anywhere(self, bucket: int, used_counts: torch.Tensor) -> list[bool]:
        """Whether some rank gave each parameter of ``bucket`` a gradient, given the bucket's
        reduced used flags. A parameter used here was used somewhere, so the flags are read
        (a host sync on GPU) only when this rank left one out."""
        used_here = self._used_here[bucket]
        if all(used_here):
            return used_here
        counts = used_counts.tolist()
        return [here or count > 0 for here, count in zip(used_here, counts, strict=True)]

    def _reset_readiness(self) -> None:
        self._ready = [[False] * len(members) for members in self.bucket_params]
        self._used_here = [[False] * len(members) for members in self.bucket_params]
        self._pending = [len(members) for members in self.bucket_params]
        self._next_to_launch = 0
