"""``simple_ddp_hook``: a blocking all-reduce for each parameter inside its post-accumulate hook.

Communication is interleaved with backward but, being blocking, still serialises with it: the
hook holds the autograd thread until the all-reduce returns.

Hooks fire in autograd's order, which is the same on every rank for the same graph; the
per-parameter collectives are issued in that order.
"""

from __future__ import annotations

from torch import nn

from .base import DataParallel, all_reduce_sum, grad_or_zeros


class SimpleDDPHook(DataParallel):
    def __init__(self, module: nn.Module) -> None:
        super().__init__(module)
        self._reduced_param_ids: set[int] = set()
        self._hook_handles = [
            p.register_post_accumulate_grad_hook(self._on_grad_ready)
            for p in self.trainable_parameters()
        ]

    def _on_grad_ready(self, param: nn.Parameter) -> None:
        if self.require_sync:
            self._reduced_param_ids.add(id(param))
            self._reduce(param)

    def _reduce(self, param: nn.Parameter) -> None:
        grad = grad_or_zeros(param)
        all_reduce_sum(grad, blocking=True)
        grad.div_(self.world_size)

    def _sync_gradients(self) -> None:
        # A parameter whose hook never fired got no gradient here; reduce zeros for it so the
        # ranks' collectives still match (correct when it is unused on every rank).
        for param in self.trainable_parameters():
            if id(param) not in self._reduced_param_ids:
                self._reduce(param)
        self._reduced_param_ids.clear()
        self._wait_pending()

    def _wait_pending(self) -> None:
        pass
