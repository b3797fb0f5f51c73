"""Every variant trains to the same parameters as ``single`` on the same global batch."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from ddpprof.variants import VARIANT_NAMES, make_variant
from ddpprof.variants.bucket_ddp_async import BucketDDPAsync, assign_buckets
from workloads.data import SyntheticImages
from workloads.models import build_model
from workloads.train import train

WORLD_SIZE = 2
GLOBAL_BATCH = 16
STEPS = 3


class PartlyUnused(nn.Module):
    """``skipped`` never receives a gradient: a step must neither hang nor go wrong."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
        self.skipped = nn.Linear(784, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _train_flat(variant: str, make_module, grad_accum: int, rank: int, world_size: int,
                bucket_cap_mb: float) -> torch.Tensor:
    # Ranks start from different weights: the variant's broadcast has to make them agree.
    torch.manual_seed(rank)
    module = make_module()
    model = make_variant(variant, module, bucket_cap_mb=bucket_cap_mb)
    # SGD: the update is linear in the gradient, so parameters differ only by float rounding.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train(model, optimizer, SyntheticImages(n_samples=128), steps=STEPS,
          global_batch=GLOBAL_BATCH, grad_accum=grad_accum, rank=rank, world_size=world_size,
          device=torch.device("cpu"))
    return torch.cat([p.detach().flatten() for p in module.parameters()])


def _mlp() -> nn.Module:
    return build_model("mlp-tiny")[0]


CASES = [(name, make, k, cap)
         for name in VARIANT_NAMES[1:]
         for make in (_mlp, PartlyUnused)
         for k in (1, 2)
         # 25 MiB: one bucket; 0.01 MiB: several, closed mid-layer-list
         for cap in ((25.0, 0.01) if name == "bucket_ddp_async" else (25.0,))
         if not (name == "pytorch_ddp" and make is PartlyUnused)]  # needs find_unused_parameters


def _worker(rank: int, init_file: str, results: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD_SIZE)
    try:
        for index, (name, make, k, cap) in enumerate(CASES):
            reference = _train_flat("single", make, k, rank=0, world_size=1, bucket_cap_mb=cap)
            got = _train_flat(name, make, k, rank=rank, world_size=WORLD_SIZE, bucket_cap_mb=cap)
            gathered = [torch.empty_like(got) for _ in range(WORLD_SIZE)]
            dist.all_gather(gathered, got)
            if rank == 0:
                results[index] = ((got - reference).abs().max().item(),
                                  (gathered[0] - gathered[1]).abs().max().item())
    finally:
        dist.destroy_process_group()


def test_every_variant_matches_single_and_ranks_agree(tmp_path):
    results = mp.Manager().dict()
    mp.spawn(_worker, args=(str(tmp_path / "init"), results), nprocs=WORLD_SIZE, join=True)
    failures = []
    for index, (name, make, k, cap) in enumerate(CASES):
        vs_single, across_ranks = results[index]
        label = f"{name} grad_accum={k} model={make.__name__} cap={cap}"
        if not vs_single <= 1e-5:
            failures.append(f"{label}: differs from single by {vs_single:.3g}")
        if across_ranks != 0.0:
            failures.append(f"{label}: ranks differ by {across_ranks:.3g}")
    assert not failures, "\n".join(failures)
    assert len(results) == len(CASES)


def test_buckets_follow_reverse_order_and_close_at_cap():
    params = [nn.Parameter(torch.zeros(n)) for n in (10, 300, 5, 200, 50)]  # float32: 4 B each
    order = list(reversed(params))  # what BucketDDPAsync passes
    # cap 1000 B = 250 floats: [50, 200] reaches 250; [5, 300] passes it; [10] is left over.
    assert assign_buckets(order, cap_bytes=1000) == [[0, 1], [2, 3], [4]]
    assert assign_buckets(order, cap_bytes=10**9) == [[0, 1, 2, 3, 4]]
    assert assign_buckets(order, cap_bytes=1) == [[0], [1], [2], [3], [4]]


def test_buckets_split_by_dtype():
    params = [nn.Parameter(torch.zeros(4)), nn.Parameter(torch.zeros(4, dtype=torch.float64)),
              nn.Parameter(torch.zeros(4))]
    assert assign_buckets(params, cap_bytes=10**6) == [[0, 2], [1]]


def test_buckets_launch_in_index_order_whatever_the_hook_order(tmp_path, monkeypatch):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0,
                            world_size=1)
    try:
        model = BucketDDPAsync(build_model("mlp-tiny")[0], bucket_cap_mb=0.005)
        assert len(model.buckets) >= 3
        launched: list[int] = []
        real_all_reduce = dist.all_reduce

        def spy(tensor, *args, **kwargs):
            launched.append(next(i for i, b in enumerate(model.buckets) if b.buffer is tensor))
            return real_all_reduce(tensor, *args, **kwargs)

        monkeypatch.setattr(dist, "all_reduce", spy)
        for p in model.trainable_parameters():
            p.grad = torch.ones_like(p)
        # Fire hooks in registration order, the reverse of the bucket order: the last buckets
        # fill first but must wait until bucket 0, completed by the very last hook, launches.
        *early, last = model.trainable_parameters()
        for p in early:
            model._on_grad_ready(p)
        assert launched == [], "a bucket launched before the buckets ahead of it were ready"
        model._on_grad_ready(last)
        assert launched == list(range(len(model.buckets)))
        model.finish_gradient_sync()
        assert launched == list(range(len(model.buckets)))  # nothing launched twice
    finally:
        dist.destroy_process_group()
