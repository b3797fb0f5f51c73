"""``simple_ddp_hook``: a blocking all-reduce for each parameter inside its post-accumulate hook.

Communication is interleaved with backward but, being blocking, still serialises with it: the
hook holds the autograd thread until the all-reduce returns.

Hooks fire in autograd's order, which is the same on every rank for the same graph; the
per-parameter collectives are issued in that order. A parameter whose hook did not fire in the
step's last micro-step is reduced when the step finishes if earlier micro-steps gave it a
gradient; one with no gradient at all is unused on every rank (same graph) and is left out, its
``grad`` staying ``None`` as under DDP.
"""

from __future__ import annotations

from torch import nn

from .base import DataParallel, all_reduce_sum, ready_grad


class SimpleDDPHook(DataParallel):
    def __init__(self, module: nn.Module) -> None:
        super().__init__(module)
        self._reduced_param_ids: set[int] = set()
        self._launch_order: list[nn.Parameter] = []     # this sync's, as hooks fire
        self._last_launch_order: list[nn.Parameter] = []
        self._hook_handles = [
            p.register_post_accumulate_grad_hook(self._on_grad_ready)
            for p in self.trainable_parameters()
        ]

    def _on_grad_ready(self, param: nn.Parameter) -> None:
        if self.require_sync:
            self._reduced_param_ids.add(id(param))
            self._launch_order.append(param)
            self._reduce(param)

    def _reduce(self, param: nn.Parameter) -> None:
        grad = ready_grad(param)
        all_reduce_sum(grad, blocking=True)
        grad.div_(self.world_size)

    def _sync_gradients(self) -> None:
        for param in self.trainable_parameters():
            if id(param) not in self._reduced_param_ids and param.grad is not None:
                self._launch_order.append(param)
                self._reduce(param)
        self._reduced_param_ids.clear()
        self._last_launch_order, self._launch_order = self._launch_order, []
        self._wait_pending()

    def gradient_buckets(self) -> list[list[nn.Parameter]]:
        """One all-reduce per parameter, in the order the last sync launched them (hook order:
        autograd's), else registration order before the first sync."""
        order = self._last_launch_order or self.trainable_parameters()
        return [[p] for p in order]

    def _wait_pending(self) -> None:
        pass
