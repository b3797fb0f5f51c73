"""``zero2``: ZeRO stage 2: ``zero1``, but a rank keeps only the gradient shard it owns.

A bucket's full gradient buffer is allocated when its first gradient of the sync arrives (each
gradient is copied in and autograd's ``param.grad`` dropped at once) and freed as soon as the
bucket's reduce-scatter completes: every backward hook first releases the buckets whose
reduce-scatter has finished, and the step's sync releases the rest. Only the reduced shard
(1/N of the bucket) persists.

Under ``no_sync`` (micro-steps 1..K-1 of gradient accumulation) there is no communication, so
the full gradients accumulate in ``param.grad`` until the last micro-step, as in FSDP.
"""

from __future__ import annotations

import torch

from .base import wait_for
from .zero1 import ShardedBucket, Zero1


class Zero2(Zero1):
    keeps_full_gradients = False

    def _store_grad(self, bucket: int, position: int, grad: torch.Tensor | None) -> None:
        for launched in self.shards[:self._next_to_launch]:
            if launched.work is not None and launched.work.is_completed():
                wait_for(launched.work)  # returns at once; surfaces a failed collective
                launched.work = None
                self._release_input(launched)
        super()._store_grad(bucket, position, grad)

    def _release_input(self, shard: ShardedBucket) -> None:
        shard.grad_input = None
