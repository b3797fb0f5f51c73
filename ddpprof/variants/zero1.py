"""``zero1``: ZeRO stage 1, as seed 004 describes it: optimizer state sharded across ranks.

* Gradients are bucketed as in ``bucket_ddp_async`` (:mod:`.buckets`: fixed buckets, launched in
  order from the backward hooks, ``bucket_cap_mib``), but each bucket is **reduce-scattered**
  (async, overlapping the rest of backward) instead of all-reduced: rank r receives the summed
  chunk r of the bucket.
* Each bucket's parameters live end to end in one flat buffer (``param.data`` is a view of it),
  split into ``world_size`` equal shards of ceil(numel / world_size) elements, the last padded
  with zeros. Rank r's optimizer holds only the pieces of parameters inside shard r
  (:func:`shard_pieces`), one optimizer parameter per piece, so its state covers 1/N of the
  model, and a parameter no rank used keeps ``grad is None`` on its pieces: the optimizer skips
  it, as it skips an unused parameter under DDP.
* After the step every rank all-gathers the updated shards back into the flat buffers, in place
  (one all-gather per bucket, launched together and waited on before the step ends).
* Full gradients stay allocated: the bucket's reduce-scatter input is a persistent buffer of the
  whole bucket, and the reduced shard is a view of its own chunk. (Autograd's ``param.grad`` is
  copied in and dropped, so it is not held twice.) ``zero2`` keeps only the shard.

The reduce-scatter input is ``world_size`` segments of ``[shard gradients | one used flag per
parameter of the bucket]``, so each rank receives, beside its gradients, how many ranks used
each parameter: no extra collective is needed to tell "unused everywhere" from "zero".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from . import DEFAULT_BUCKET_CAP_MIB
from .base import all_gather, reduce_scatter_sum, wait_for
from .buckets import BucketedDataParallel


@dataclass(frozen=True)
class Piece:
    """Elements ``[start, stop)`` of a bucket's flat layout: the part of the bucket's parameter
    ``position`` that lies in ``rank``'s shard."""

    position: int
    rank: int
    start: int
    stop: int


def shard_pieces(sizes: list[int], world_size: int) -> tuple[int, list[Piece]]:
    """Lay parameters of ``sizes`` elements end to end, cut the result into ``world_size``
    shards of ``ceil(sum(sizes) / world_size)`` elements (the last ones padded), and return that
    shard size and every nonempty piece: a parameter's intersection with one rank's shard."""
    shard_numel = max(1, -(-sum(sizes) // world_size))
    pieces = []
    start = 0
    for position, size in enumerate(sizes):
        stop = start + size
        for rank in range(start // shard_numel, min(world_size, -(-stop // shard_numel))):
            lo, hi = max(start, rank * shard_numel), min(stop, (rank + 1) * shard_numel)
            if lo < hi:
                pieces.append(Piece(position, rank, lo, hi))
        start = stop
    return shard_numel, pieces


@dataclass
class ShardedBucket:
    params: list[nn.Parameter]
    offsets: list[int]                      # each parameter's start in the flat layout
    shard_numel: int
    pieces_of: list[list[Piece]]            # per parameter: its pieces on every rank
    flat_param: torch.Tensor                # world_size * shard_numel; params are views of it
    grad_shard: torch.Tensor                # shard_numel + flags: the reduce-scatter's output
    grad_input: torch.Tensor | None = None  # world_size segments of (shard_numel + flags)
    mine: list[tuple[Piece, nn.Parameter]] = field(default_factory=list)
    work: dist.Work | None = None

    @property
    def segment_numel(self) -> int:
        return self.shard_numel + len(self.params)


class Zero1(BucketedDataParallel):
    #: Whether the whole bucket's gradient buffer persists (stage 1) or only the shard (stage 2).
    keeps_full_gradients = True

    def __init__(self, module: nn.Module, bucket_cap_mib: float = DEFAULT_BUCKET_CAP_MIB) -> None:
        super().__init__(module, bucket_cap_mib)
        self.shards = [self._flatten(members) for members in self.bucket_params]

    def _flatten(self, members: list[nn.Parameter]) -> ShardedBucket:
        sizes = [p.numel() for p in members]
        shard_numel, pieces = shard_pieces(sizes, self.world_size)
        dtype, device = members[0].dtype, members[0].device
        flat = torch.zeros(self.world_size * shard_numel, dtype=dtype, device=device)
        offsets = [0]
        with torch.no_grad():
            for param, size in zip(members, sizes, strict=True):
                start = offsets[-1]
                flat[start:start + size].copy_(param.reshape(-1))
                param.data = flat[start:start + size].view_as(param)
                offsets.append(start + size)
        segment_numel = shard_numel + len(members)
        grad_input = torch.zeros(self.world_size * segment_numel, dtype=dtype, device=device) \
            if self.keeps_full_gradients else None
        bucket = ShardedBucket(
            members, offsets[:-1], shard_numel,
            [[p for p in pieces if p.position == position] for position in range(len(members))],
            flat, grad_shard=grad_input.view(self.world_size, -1)[self.rank]
            if grad_input is not None else torch.zeros(segment_numel, dtype=dtype, device=device),
            grad_input=grad_input)
        # The optimizer's parameters: views of this rank's shard, so its step updates ``flat``.
        bucket.mine = [(p, nn.Parameter(flat[p.start:p.stop])) for p in pieces
                       if p.rank == self.rank]
        return bucket

    def make_optimizer(self, optimizer_class: type[torch.optim.Optimizer],
                       **kwargs: Any) -> torch.optim.Optimizer:
        return optimizer_class([param for bucket in self.shards for _, param in bucket.mine],
                               **kwargs)

    def collectives_per_sync(self) -> dict[str, int | None]:
        return {"reduce_scatter": len(self.shards), "all_gather": len(self.shards)}

    def _store_grad(self, bucket: int, position: int, grad: torch.Tensor | None) -> None:
        shard = self.shards[bucket]
        if shard.grad_input is None:
            shard.grad_input = torch.zeros(self.world_size * shard.segment_numel,
                                           dtype=shard.flat_param.dtype,
                                           device=shard.flat_param.device)
        segments = shard.grad_input.view(self.world_size, shard.segment_numel)
        start = shard.offsets[position]
        flat_grad = None if grad is None else grad.reshape(-1)
        for piece in shard.pieces_of[position]:
            base = piece.rank * shard.shard_numel
            target = segments[piece.rank, piece.start - base:piece.stop - base]
            if flat_grad is None:
                target.zero_()
            else:
                target.copy_(flat_grad[piece.start - start:piece.stop - start])
        segments[:, shard.shard_numel + position] = float(grad is not None)
        if grad is not None:
            shard.params[position].grad = None  # its values live in the bucket now

    def _launch(self, bucket: int) -> None:
        shard = self.shards[bucket]
        if shard.grad_input is None:
            raise RuntimeError(f"bucket {bucket} launched before its gradients were stored")
        shard.work = reduce_scatter_sum(shard.grad_shard, shard.grad_input)

    def _complete(self, bucket: int) -> None:
        shard = self.shards[bucket]
        if shard.work is not None:
            wait_for(shard.work)
            shard.work = None
        self._release_input(shard)
        grads = shard.grad_shard[:shard.shard_numel]
        grads.div_(self.world_size)
        used = self._used_anywhere(bucket, shard.grad_shard[shard.shard_numel:])
        base = self.rank * shard.shard_numel
        for piece, param in shard.mine:
            param.grad = (grads[piece.start - base:piece.stop - base] if used[piece.position]
                          else None)

    def _release_input(self, shard: ShardedBucket) -> None:
        """Stage 1 keeps the full gradient buffer."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()
        works = [all_gather(s.flat_param, s.flat_param[self.rank * s.shard_numel:
                                                        (self.rank + 1) * s.shard_numel])
                 for s in self.shards]
        for work in works:
            wait_for(work)
