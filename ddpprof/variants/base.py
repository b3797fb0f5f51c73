"""The interface every variant shares, and the one gradient-accumulation mechanism they all use.

The training loop drives every variant the same way::

    for micro in range(grad_accum):
        sync = micro == grad_accum - 1
        with nullcontext() if sync else model.no_sync():
            loss_fn(model, batch).backward()
    model.finish_gradient_sync()      # waits for / performs the one sync of this optimizer step
    optimizer.step()

so the first K-1 micro-steps never communicate and the K-th does: exactly one gradient sync per
optimizer step, whatever the variant.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn


class DataParallel(nn.Module):
    """Base of all variants: holds the module, broadcasts initial state, implements ``no_sync``.

    Subclasses implement :meth:`_sync_gradients` (what "one gradient sync" means for them) and
    may hook into backward; hooks must consult :attr:`require_sync` so that they stay silent
    inside :meth:`no_sync`.
    """

    #: Micro-steps per optimizer step when the user does not choose (``--grad-accum``).
    default_grad_accum: int = 1
    #: Whether the variant needs an initialised process group.
    distributed: bool = True
    #: False where the wrapped implementation already broadcasts rank 0's state (PyTorch DDP).
    broadcasts_initial_state: bool = True

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.world_size = dist.get_world_size() if self.distributed else 1
        self._sync_enabled = True
        if self.distributed and self.broadcasts_initial_state:
            self._broadcast_initial_state()

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @property
    def require_sync(self) -> bool:
        """False inside :meth:`no_sync`: gradients accumulate locally."""
        return self._sync_enabled

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        previous = self._sync_enabled
        self._sync_enabled = False
        try:
            yield
        finally:
            self._sync_enabled = previous

    def finish_gradient_sync(self) -> None:
        """Complete this optimizer step's gradient sync: afterwards every ``param.grad`` holds the
        mean over ranks. A no-op inside :meth:`no_sync`."""
        if self._sync_enabled:
            self._sync_gradients()

    def _sync_gradients(self) -> None:
        raise NotImplementedError

    def allreduces_per_sync(self) -> int | None:
        """All-reduce calls that one gradient sync launches: what a trace should show per
        optimizer step. ``None`` where the implementation does not say."""
        return len(self.trainable_parameters())

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def _broadcast_initial_state(self) -> None:
        # Ranks seed differently or load differently; rank 0's values are the run's values.
        with torch.no_grad():
            for tensor in [*self.module.parameters(), *self.module.buffers()]:
                dist.broadcast(tensor, src=0)


#: Name of the span around every wait for a collective. A blocking all-reduce waits inside
#: whatever op called it (for a hook, ``AccumulateGrad``) and torch records no span for the wait,
#: so without this the blocked time would look like compute in a CPU trace.
WAIT_SPAN = "ddpprof::wait"


def wait_for(work: dist.Work) -> None:
    with torch.profiler.record_function(WAIT_SPAN):
        work.wait()


def all_reduce_sum(tensor: torch.Tensor, *, blocking: bool) -> dist.Work | None:
    """Sum ``tensor`` over ranks in place: blocking (async launch, then a visible wait), or
    returning the handle to wait on later."""
    work = dist.all_reduce(tensor, op=dist.ReduceOp.SUM, async_op=True)
    if not blocking:
        return work
    wait_for(work)
    return None


def grad_or_zeros(param: nn.Parameter) -> torch.Tensor:
    """The parameter's gradient, materialised as zeros if it got none this step.

    A rank on which a parameter received no gradient must still join that parameter's
    collective, or the ranks' collectives stop matching and the step hangs; it contributes
    zeros, which is what DDP's ``find_unused_parameters`` reduction does too.
    """
    if param.grad is None:
        param.grad = torch.zeros_like(param)
    return param.grad
