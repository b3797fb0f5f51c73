"""``fsdp``: ZeRO stage 3 through PyTorch's FSDP2, ``torch.distributed.fsdp.fully_shard``.

Every block is sharded on its own (each decoder layer of a language model, each ``nn.Linear``
of an MLP), then the root, which takes the parameters no block holds (embeddings, final norm).
Each rank keeps 1/N of every parameter (dim 0 split, padded to equal shards), with its
gradients and optimizer state: a block's parameters are all-gathered before its forward and
again before its backward, and its gradients reduce-scattered after its backward, overlapping
the rest of it. The root is not resharded between forward and backward (FSDP2's default).

Under ``no_sync`` FSDP skips the reduce-scatter and accumulates unsharded gradients; the last
micro-step reduces them. FSDP waits for its collectives inside its own code, so those waits
carry no ``ddpprof::wait`` span. Ranks are assumed to run the same blocks (FSDP2's own
assumption); a parameter no rank used keeps ``grad is None``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from .base import DataParallel

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


def decoder_layers(module: nn.Module) -> nn.ModuleList | None:
    """A language model's decoder layers (``model.layers``, as transformers' Llama and its
    kin hold them), or None."""
    layers = getattr(getattr(module, "model", None), "layers", None)
    return layers if isinstance(layers, nn.ModuleList) else None


def shard_units(module: nn.Module) -> list[nn.Module]:
    """The blocks sharded one by one: a language model's decoder layers, else every
    ``nn.Linear``."""
    layers = decoder_layers(module)
    if layers is not None:
        return list(layers)
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


class FSDP(DataParallel):
    def __init__(self, module: nn.Module, mesh: DeviceMesh | None = None,
                 split_layers: Callable[[], object] | None = None) -> None:
        """``mesh``: the ranks FSDP shards over (default: all of them); ``split_layers``: run
        once rank 0's weights are broadcast and before sharding (``fsdp_tp``'s tensor
        parallelism, which needs the weights whole)."""
        super().__init__(module)  # broadcasts rank 0's weights while they are still whole
        # torch: only where a rank trains or a run is checked for it
        from torch.distributed.fsdp import fully_shard

        if split_layers is not None:
            split_layers()
        self.units = shard_units(module)
        for unit in self.units:
            fully_shard(unit, mesh=mesh)
        self.sharded = fully_shard(module, mesh=mesh)   # the module itself, now an FSDPModule
        self._shard_ranks = mesh.size() if mesh is not None else self.world_size
        unit_params = {id(p) for unit in self.units for p in unit.parameters()}
        self._unit_groups = sum(any(p.requires_grad for p in unit.parameters())
                                for unit in self.units)
        self._root_group = any(p.requires_grad and id(p) not in unit_params
                               for p in module.parameters())
        self._forwards = 0
        self._forwards_last_step = 1

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._forwards += 1
        return self.module(*args, **kwargs)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        self.sharded.set_requires_gradient_sync(False)
        try:
            with super().no_sync():
                yield
        finally:
            self.sharded.set_requires_gradient_sync(True)

    def _sync_gradients(self) -> None:
        # FSDP's reduce-scatters finish inside backward (its final callback waits for them).
        self._forwards_last_step, self._forwards = max(self._forwards, 1), 0

    def collectives_per_sync(self) -> dict[str, int | None]:
        """Per micro-step, one all-gather per sharded group before its forward and one more
        before its backward for every group but the root; one reduce-scatter per group per
        step. Counted for the last step's micro-steps, assuming every block ran. Nothing over one
        rank: FSDP2 then communicates nothing."""
        if self._shard_ranks == 1:
            return {}
        groups = self._unit_groups + self._root_group
        return {"all_gather": self._forwards_last_step * (groups + self._unit_groups),
                "reduce_scatter": groups}

    def gradient_buckets(self) -> list[list[nn.Parameter]] | None:
        """One reduce-scatter per sharded group, in backward's order: the blocks last to
        first, then the root's own parameters (None over one rank: none)."""
        if self._shard_ranks == 1:
            return None
        in_units = {id(p) for unit in self.units for p in unit.parameters()}
        groups = [[p for p in unit.parameters() if p.requires_grad]
                  for unit in reversed(self.units)]
        groups.append([p for p in self.module.parameters()
                       if p.requires_grad and id(p) not in in_units])
        return [group for group in groups if group]

    def full_parameters(self) -> list[torch.Tensor]:
        # FSDP2 made every parameter a DTensor
        return [cast(DTensor, p).full_tensor().detach() for p in self.module.parameters()]
