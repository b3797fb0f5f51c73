"""Every variant trains to the same parameters as ``single`` on the same global batch."""

from __future__ import annotations

import gc
import itertools

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from ddpprof.core.units import MIB
from ddpprof.graph.edit import RankGradients, buckets_of
from ddpprof.graph.model import Gradient, Node, NodeKind, StepGraph
from ddpprof.run.manifest import BucketRecord
from ddpprof.simulate.steps import registration_positions
from ddpprof.variants import VARIANTS, VARIANTS_IN_ALL, make_variant, variant_class
from ddpprof.variants.bucket_ddp_async import BucketDDPAsync
from ddpprof.variants.buckets import parameter_buckets
from ddpprof.variants.zero1 import Piece, shard_pieces
from workloads.data import SyntheticImages, shard
from workloads.models import build_model, compute_loss
from workloads.train import train

GLOBAL_BATCH = 12  # divisible by 2 and 3 ranks times 2 micro-steps
STEPS = 3
# AdamW with weight decay: a parameter handed a zero gradient instead of none would still move.
ADAMW = {"lr": 0.01, "weight_decay": 0.1, "eps": 1e-4}


class PartlyUnused(nn.Module):
    """``skipped`` never receives a gradient on any rank: a step must neither hang nor touch it."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
        self.skipped = nn.Linear(784, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class UsedOnRankZero(PartlyUnused):
    """``skipped`` contributes on rank 0 only: every rank must still apply rank 0's gradient."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        return out + self.skipped(x) if dist.get_rank() == 0 else out


def _mlp() -> nn.Module:
    return build_model("mlp-tiny")[0]


def _build(variant: str, make, rank: int, bucket_cap_mib: float):
    # Ranks start from different weights: the variant's broadcast has to make them agree.
    torch.manual_seed(rank)
    module = make()
    if make is not _mlp and VARIANTS[variant].ddp_options:
        return variant_class(variant)(module, bucket_cap_mib=bucket_cap_mib,
                                      find_unused_parameters=True)
    return make_variant(variant, module, bucket_cap_mib=bucket_cap_mib)


def _train(variant: str, make, grad_accum: int, rank: int, world_size: int,
           bucket_cap_mib: float = 25.0):
    model = _build(variant, make, rank, bucket_cap_mib)
    optimizer = model.make_optimizer(torch.optim.AdamW, **ADAMW)
    data = SyntheticImages(n_samples=64)
    train(model, optimizer, data, steps=STEPS, global_batch=GLOBAL_BATCH,
          grad_accum=grad_accum, rank=rank, device=torch.device("cpu"))
    return model, data


def _flat(model) -> torch.Tensor:
    return torch.cat([p.flatten() for p in model.full_parameters()])


def _skipped_grads_after_a_sync(model, data, rank: int, world_size: int) -> list:
    """Run one more micro-step and its sync: the gradients the optimizer would then read for
    ``skipped`` (for zero1/zero2, those of the pieces of it that this rank updates)."""
    batch = shard(data.global_batch(STEPS, GLOBAL_BATCH), rank, world_size)
    compute_loss(model, batch).backward()
    model.finish_gradient_sync()
    skipped = {id(p) for name, p in model.named_parameters() if ".skipped." in name}
    assert len(skipped) == 2
    if hasattr(model, "shards"):
        return [param.grad for bucket in model.shards for piece, param in bucket.mine
                if id(bucket.params[piece.position]) in skipped]
    return [p.grad for name, p in model.named_parameters() if id(p) in skipped]


def _cases() -> list[tuple[str, object, int, float]]:
    cases = []
    for name in VARIANTS_IN_ALL[1:]:
        # 25 MiB: one bucket; 0.01 MiB: several, closed mid-layer-list (and mid-shard)
        caps = (25.0, 0.01) if VARIANTS[name].bucketed and "pytorch" not in name else (25.0,)
        cases += [(name, make, k, cap) for make in (_mlp, PartlyUnused) for k in (1, 2)
                  for cap in caps]
    return cases


CASES = _cases()
# The used flags travel with the bucketed hand-written variants' collectives; the others assume
# every rank runs the same graph (the hook variants must, FSDP2 does), and DDP finds it itself.
RANK_DEPENDENT = ["bucket_ddp_async", "zero1", "zero2", "pytorch_ddp", "pytorch_zero1"]


def _initial_skipped() -> torch.Tensor:
    """``skipped`` as every run starts it: rank 0's weights, broadcast."""
    torch.manual_seed(0)
    return torch.cat([p.detach().flatten() for p in PartlyUnused().skipped.parameters()])


def _compare(model, reference: torch.Tensor | None) -> dict:
    got = _flat(model)
    gathered = [torch.empty_like(got) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, got)
    skipped = torch.cat([p.flatten() for p in model.full_parameters()][-2:])
    return {"vs_single": None if reference is None else (got - reference).abs().max().item(),
            "across_ranks": max((g - got).abs().max().item() for g in gathered),
            "skipped_moved": not torch.equal(skipped, _initial_skipped())}


def _case(index: int, rank: int, world_size: int, references: dict) -> dict:
    name, make, k, cap = CASES[index]
    if (make, k) not in references:
        references[make, k] = _flat(_train("single", make, k, rank=0, world_size=1)[0])
    model, data = _train(name, make, k, rank, world_size, cap)
    result = _compare(model, references[make, k])
    if make is PartlyUnused:
        result["skipped_grads"] = [g is None for g in
                                   _skipped_grads_after_a_sync(model, data, rank, world_size)]
    return result


def _worker(rank: int, world_size: int, init_file: str, results: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world_size)
    torch.set_num_threads(1)
    try:
        references: dict = {}
        for index in range(len(CASES)):
            results[world_size, rank, index] = _case(index, rank, world_size, references)
        for name in RANK_DEPENDENT:
            results[world_size, rank, name] = _compare(
                _train(name, UsedOnRankZero, 1, rank, world_size, 0.01)[0], None)
    finally:
        # The variants' hooks make reference cycles; collect them while the interpreter is
        # whole (see workloads/train.py's main).
        gc.collect()
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3])  # 3: shards of unequal content, padded
def test_every_variant_matches_single_and_ranks_agree(tmp_path, world_size):
    results = mp.Manager().dict()
    mp.spawn(_worker, args=(world_size, str(tmp_path / "init"), results), nprocs=world_size,
             join=True)
    failures = []
    for index, (name, make, k, cap) in enumerate(CASES):
        label = f"{name} grad_accum={k} model={make.__name__} cap={cap}"
        for rank in range(world_size):
            result = results[world_size, rank, index]
            if not result["vs_single"] <= 1e-5:
                failures.append(f"{label} rank {rank}: differs from single by "
                                f"{result['vs_single']:.3g}")
            if result["across_ranks"] != 0.0:
                failures.append(f"{label}: ranks differ by {result['across_ranks']:.3g}")
            if make is PartlyUnused and result["skipped_moved"]:
                failures.append(f"{label} rank {rank}: the unused layer moved")
            if make is PartlyUnused and not all(result["skipped_grads"]):
                failures.append(f"{label} rank {rank}: the unused layer got a gradient")
    for name in RANK_DEPENDENT:
        for rank in range(world_size):
            result = results[world_size, rank, name]
            if result["across_ranks"] != 0.0 or not result["skipped_moved"]:
                failures.append(f"{name} rank {rank}, layer used on rank 0 only: {result}")
    assert not failures, "\n".join(failures)


def test_buckets_follow_reverse_order_and_close_at_cap():
    params = [nn.Parameter(torch.zeros(n)) for n in (10, 300, 5, 200, 50)]  # float32: 4 B each
    # cap 1000 B = 250 floats, from the last registered: [50, 200] reaches 250; [5, 300]
    # passes it; [10] is left over.
    assert parameter_buckets(params, 1000 / MIB) == [[4, 3], [2, 1], [0]]
    assert parameter_buckets(params, 1000) == [[4, 3, 2, 1, 0]]
    assert parameter_buckets(params, 1 / MIB) == [[4], [3], [2], [1], [0]]


def test_buckets_split_by_dtype():
    params = [nn.Parameter(torch.zeros(4)), nn.Parameter(torch.zeros(4, dtype=torch.float64)),
              nn.Parameter(torch.zeros(4))]
    assert parameter_buckets(params, 1) == [[2, 0], [1]]


def test_the_simulator_buckets_as_the_variants_do():
    """The same parameters, mixed dtypes, bucketed by a variant (from the tensors) and by the
    simulator (from what run.json records of them and the trace's gradient sizes): the same
    buckets, in the same order."""
    dtypes = [torch.float32, torch.bfloat16, torch.float32, torch.float32, torch.bfloat16,
              torch.float32, torch.bfloat16]
    params = [nn.Parameter(torch.zeros(n, dtype=d)) for n, d in zip(
        (300, 70, 40, 120, 500, 8, 60), dtypes, strict=True)]
    cap_mib = 1000 / MIB
    buckets = parameter_buckets(params, cap_mib)
    sizes = [p.numel() * p.element_size() for p in params]
    assert len(buckets) > 2 and any(len({dtypes[i] for i in b}) == 1 < len(b) for b in buckets)
    # what workloads/train.py writes of them, and the gradients as the trace shows them ready
    # (reverse registration order)
    recorded = [BucketRecord(params=[str(i) for i in b], param_index=b,
                             param_bytes=[sizes[i] for i in b], bytes=sum(sizes[i] for i in b),
                             param_dtypes=[str(dtypes[i]).removeprefix("torch.") for i in b])
                for b in buckets]
    ready = list(reversed(range(len(params))))
    registration, grad_dtypes, note = registration_positions([sizes[i] for i in ready],
                                                             recorded)
    assert note is None
    # gradient t of the step graph is ready at t + 1 µs
    graph = StepGraph("step", 0.0, [Node(0, "thread 1", NodeKind.COMPUTE, "AccumulateGrad",
                                         float(t), 1.0) for t in range(len(ready))], [])
    grads = RankGradients([Gradient(0, t, sizes[i]) for t, i in enumerate(ready)], registration,
                          grad_dtypes)
    launched, anchors, _ = buckets_of(graph, grads, cap_mib)
    assert launched == [sum(sizes[i] for i in b) for b in buckets]
    # each launches once its last gradient is ready and the buckets before it have launched
    assert anchors == list(itertools.accumulate(
        (max(ready.index(i) for i in b) for b in buckets), max))


def test_shards_are_equal_and_padded_and_pieces_cover_each_parameter_once():
    # 3 + 5 + 2 = 10 elements on 3 ranks: shards of ceil(10/3) = 4, [0,4) [4,8) [8,12),
    # the last holding elements 8, 9 and two of padding.
    shard_numel, pieces = shard_pieces([3, 5, 2], 3)
    assert shard_numel == 4
    assert pieces == [Piece(0, 0, 0, 3), Piece(1, 0, 3, 4), Piece(1, 1, 4, 8),
                      Piece(2, 2, 8, 10)]
    # fewer elements than ranks: one each, the rest padding
    assert shard_pieces([2], 4) == (1, [Piece(0, 0, 0, 1), Piece(0, 1, 1, 2)])
    assert shard_pieces([4, 4], 2) == (4, [Piece(0, 0, 0, 4), Piece(1, 1, 4, 8)])


def test_buckets_launch_in_index_order_whatever_the_hook_order(tmp_path, monkeypatch):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0,
                            world_size=1)
    try:
        model = BucketDDPAsync(build_model("mlp-tiny")[0], bucket_cap_mib=0.005)
        assert len(model.bucket_buffers) >= 3
        launched: list[int] = []
        real_all_reduce = dist.all_reduce

        def spy(tensor, *args, **kwargs):
            launched.append(next(i for i, b in enumerate(model.bucket_buffers) if b is tensor))
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
        assert launched == list(range(len(model.bucket_buffers)))
        model.finish_gradient_sync()
        assert launched == list(range(len(model.bucket_buffers)))  # nothing launched twice
    finally:
        dist.destroy_process_group()


# The c10d op each collective kind is recorded as, on the training thread.
C10D_OPS = {"all_reduce": "c10d::allreduce_", "reduce_scatter": "c10d::_reduce_scatter_base_",
            "all_gather": "c10d::_allgather_base_", "broadcast": "c10d::broadcast_"}


@pytest.mark.slow
def test_collectives_per_sync_is_what_each_step_of_the_trace_launches(all_variants):
    """``collectives_per_sync`` in run.json against the c10d ops of every profiled step."""
    import gzip
    import json

    out, _ = all_variants
    for variant in VARIANTS_IN_ALL:
        claimed = json.loads((out / variant / "run.json").read_text())["measured"][
            "collectives_per_sync"]
        with gzip.open(out / variant / "rank0.pt.trace.json.gz", "rt") as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
                 if e["name"].startswith("ProfilerStep#")]
        assert len(steps) == 2
        for start, end in steps:
            seen = {kind: sum(e["name"] == op and start <= e["ts"] <= end for e in events)
                    for kind, op in C10D_OPS.items()}
            assert {k: n for k, n in seen.items() if n} == claimed, variant
    # 1 MiB buckets of mlp-small: [b4 w4 b3 w3 b2 w2], then [b1 w1]; FSDP: 4 Linear layers
    config = {v: json.loads((out / v / "run.json").read_text())["measured"]
              for v in ("zero1", "fsdp", "pytorch_zero1")}
    assert config["zero1"]["collectives_per_sync"] == {"reduce_scatter": 2, "all_gather": 2}
    assert config["fsdp"]["collectives_per_sync"] == {"all_gather": 8, "reduce_scatter": 4}
    assert config["pytorch_zero1"]["collectives_per_sync"]["broadcast"] == 2


@pytest.mark.parametrize(("variant", "keeps_full"), [("zero1", True), ("zero2", False)])
def test_zero2_keeps_only_the_shard_of_the_gradients(tmp_path, variant, keeps_full):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0,
                            world_size=1)
    try:
        model = make_variant(variant, build_model("mlp-tiny")[0], bucket_cap_mib=0.005)
        assert len(model.shards) >= 3
        optimizer = model.make_optimizer(torch.optim.AdamW)
        batch = SyntheticImages(n_samples=8).global_batch(0, 8)
        compute_loss(model, batch).backward()
        model.finish_gradient_sync()
        assert all((s.grad_input is not None) == keeps_full for s in model.shards)
        # the shards the optimizer reads are there either way, autograd's copies are not
        assert all(p.grad is not None for group in optimizer.param_groups
                   for p in group["params"])
        assert all(p.grad is None for p in model.module.parameters())
    finally:
        dist.destroy_process_group()
