"""The interface every variant shares, and the one gradient-accumulation mechanism they all use.

The training loop drives every variant the same way::

    optimizer = model.make_optimizer(torch.optim.AdamW, lr=lr)
    for micro in range(grad_accum):
        sync = micro == grad_accum - 1
        with nullcontext() if sync else model.no_sync():
            loss_fn(model, batch).backward()
    model.finish_gradient_sync()      # waits for / performs the one sync of this optimizer step
    model.optimizer_step(optimizer)   # ZeRO-1/2 all-gather the updated shards in here
    optimizer.zero_grad(set_to_none=True)

so the first K-1 micro-steps never communicate and the K-th does: exactly one gradient sync per
optimizer step, whatever the variant.

A parameter that gets no gradient on any rank keeps ``grad is None`` after the sync, as under
PyTorch DDP, so the optimizer skips it (a zero gradient would let AdamW's weight decay move it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, overload

import torch
import torch.distributed as dist
from torch import nn

from .mesh import MeshRecord


class DataParallel(nn.Module):
    """Base of all variants: holds the module, broadcasts initial state, implements ``no_sync``.

    Subclasses implement :meth:`_sync_gradients` (what "one gradient sync" means for them) and
    may hook into backward; hooks must consult :attr:`require_sync` so that they stay silent
    inside :meth:`no_sync`. Sharded variants also override :meth:`make_optimizer` (the optimizer
    over this rank's shard) and :meth:`optimizer_step` (step, then make parameters whole).
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
        self.rank = dist.get_rank() if self.distributed else 0
        self._sync_enabled = True
        if self.distributed and self.broadcasts_initial_state:
            self._broadcast_initial_state()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
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
        """Complete this optimizer step's gradient sync: afterwards the gradients the optimizer
        reads hold the mean over ranks. A no-op inside :meth:`no_sync`."""
        if self._sync_enabled:
            self._sync_gradients()

    def _sync_gradients(self) -> None:
        raise NotImplementedError

    def make_optimizer(self, optimizer_class: type[torch.optim.Optimizer],
                       **kwargs: Any) -> torch.optim.Optimizer:
        """The optimizer the loop steps: here over every trainable parameter; a sharded variant
        builds it over the part of the parameters this rank updates."""
        return optimizer_class(self.trainable_parameters(), **kwargs)

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Step ``optimizer``; afterwards every rank holds the updated parameters it computes
        with (ZeRO-1/2 all-gather the updated shards here)."""
        optimizer.step()

    def collectives_per_sync(self) -> dict[str, int | None]:
        """Collectives one optimizer step launches, by kind (``all_reduce``, ``reduce_scatter``,
        ``all_gather``, ``broadcast``): what a trace should show per step. A count is ``None``
        where the implementation does not say."""
        return {"all_reduce": len(self.trainable_parameters())}

    def gradient_buckets(self) -> list[list[nn.Parameter]] | None:
        """The parameters whose gradients each gradient collective of one sync carries, one
        list per collective, in the order the collectives are launched; None where the variant
        launches none or the implementation does not say. Here: one all-reduce per trainable
        parameter, in registration order (what ``simple_ddp`` does)."""
        return [[p] for p in self.trainable_parameters()]

    def parameter_names(self) -> dict[int, str]:
        """The wrapped model's parameter names (``named_parameters()``), by ``id`` of the
        parameter."""
        return {id(p): name for name, p in self.module.named_parameters()}

    def data_shard(self) -> tuple[int, int]:
        """(index, count): this rank trains on shard ``index`` of ``count`` equal shards of every
        global batch. Here each rank its own (rank, world size); ranks that split one model
        between them (a tensor-parallel group) must see the same samples, and share a shard."""
        return self.rank, self.world_size

    def gradient_bytes(self, param: nn.Parameter) -> int:
        """Bytes of ``param``'s gradient that this rank's gradient collectives carry: all of it,
        unless tensor parallelism splits it."""
        return param.numel() * param.element_size()

    def mesh_record(self) -> MeshRecord | None:
        """``run.json``'s ``mesh``: the device mesh of a variant with several process groups
        (a collective there: call it on every rank); None for one group."""
        return None

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def full_parameters(self) -> list[torch.Tensor]:
        """Every parameter of the module, whole, detached: gathered first where a rank holds only
        a shard (a collective then: call it on every rank)."""
        return [p.detach() for p in self.module.parameters()]

    def _broadcast_initial_state(self) -> None:
        # Ranks seed differently or load differently; rank 0's values are the run's values.
        with torch.no_grad():
            for tensor in [*self.module.parameters(), *self.module.buffers()]:
                dist.broadcast(tensor, src=0)


#: Name of the span around every wait for a collective. A blocking all-reduce waits inside
#: whatever op called it (for a hook, ``AccumulateGrad``) and torch records no span for the wait,
#: so without this the blocked time would look like compute in a CPU trace.
WAIT_SPAN = "ddpprof::wait"


#: Called before each gradient collective a hand-written variant launches, with its kind
#: (``all_reduce``, ``reduce_scatter``, ``all_gather``) and tensor: the seam through which
#: ``ddpprof record --fault`` acts on collectives (``workloads/faults.py``); empty otherwise.
#: PyTorch DDP's and FSDP's collectives are launched inside torch and do not pass here.
COLLECTIVE_HOOKS: list[Callable[[str, torch.Tensor], None]] = []


def _before_collective(kind: str, tensor: torch.Tensor) -> None:
    for hook in COLLECTIVE_HOOKS:
        hook(kind, tensor)


def ready_grad(param: nn.Parameter) -> torch.Tensor:
    """The gradient of a parameter a gradient hook fired for, or that was checked to have one."""
    if param.grad is None:
        raise RuntimeError(f"a parameter of shape {tuple(param.shape)} has no gradient")
    return param.grad


def wait_for(work: dist.Work) -> None:
    with torch.profiler.record_function(WAIT_SPAN):
        work.wait()


@overload
def all_reduce_sum(tensor: torch.Tensor, *, blocking: Literal[True]) -> None: ...
@overload
def all_reduce_sum(tensor: torch.Tensor, *, blocking: Literal[False]) -> dist.Work: ...
def all_reduce_sum(tensor: torch.Tensor, *, blocking: bool) -> dist.Work | None:
    """Sum ``tensor`` over ranks in place: blocking (async launch, then a visible wait), or
    returning the handle to wait on later."""
    _before_collective("all_reduce", tensor)
    work = dist.all_reduce(tensor, op=dist.ReduceOp.SUM, async_op=True)
    if not blocking:
        result: dist.Work | None = work
        return result
    wait_for(work)
    return None


# torch 2.13 renamed the single-tensor collectives; older releases have only the old names.
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def reduce_scatter_sum(output: torch.Tensor, input: torch.Tensor) -> dist.Work:
    """Launch the sum over ranks of ``input``, rank r receiving chunk r (``output``, which may be
    that chunk of ``input`` itself); returns the handle."""
    _before_collective("reduce_scatter", input)
    result: dist.Work = _reduce_scatter_single(output, input, op=dist.ReduceOp.SUM, async_op=True)
    return result


def all_gather(output: torch.Tensor, input: torch.Tensor) -> dist.Work:
    """Launch the gather of every rank's ``input`` into ``output`` (rank r's at chunk r;
    ``input`` may be that chunk of ``output`` itself); returns the handle."""
    _before_collective("all_gather", input)
    result: dist.Work = _all_gather_single(output, input, async_op=True)
    return result
