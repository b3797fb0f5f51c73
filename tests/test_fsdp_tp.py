"""``fsdp_tp`` on a 2 × 2 mesh of gloo ranks: it trains what ``single`` trains, its ranks of one
tensor-parallel group share a data shard, and ``ddpprof record`` records its mesh."""

from __future__ import annotations

import gc
import gzip
import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddpprof.run.manifest import read_manifest
from ddpprof.variants import make_variant
from ddpprof.variants.fsdp_tp import tensor_parallel_layout, tensor_parallel_problem
from ddpprof.variants.mesh import MeshRecord
from workloads.data import SyntheticImages, SyntheticTokens
from workloads.models import build_model, build_model_skeleton
from workloads.train import train

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "fsdp-tp-gloo" / "fsdp_tp"
WORLD_SIZE, TP = 4, 2
STEPS, GRAD_ACCUM, GLOBAL_BATCH = 3, 2, 8
ADAMW = {"lr": 0.01, "weight_decay": 0.1, "eps": 1e-4}  # as in test_variants
SEQ_LEN = 16


def _data(model_name: str):
    if model_name.startswith("mlp"):
        return SyntheticImages(n_samples=64)
    return SyntheticTokens(vocab_size=512, seq_len=SEQ_LEN)


def _train(variant: str, model_name: str, rank: int) -> tuple:
    torch.manual_seed(rank)  # ranks start apart: rank 0's broadcast must make them agree
    model = make_variant(variant, build_model(model_name)[0], tp=TP)
    optimizer = model.make_optimizer(torch.optim.AdamW, **ADAMW)
    losses = train(model, optimizer, _data(model_name), steps=STEPS, global_batch=GLOBAL_BATCH,
                   grad_accum=GRAD_ACCUM, rank=rank, device=torch.device("cpu"))
    flat = torch.cat([p.flatten() for p in model.full_parameters()])
    return model, flat, [float(loss) for loss in losses]


MODELS = ("mlp-tiny", "smollm2-tiny")


def _worker(rank: int, init_file: str, results: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD_SIZE)
    torch.set_num_threads(1)
    try:  # both models in one launch: starting 4 processes costs more than training them
        for model_name in MODELS:
            model, flat, losses = _train("fsdp_tp", model_name, rank)
            results[model_name, rank] = {
                "shard": model.data_shard(), "losses": losses, "parameters": flat,
                "per_dim": model.collectives_per_dim()}
    finally:
        gc.collect()  # the variants' reference cycles, while the interpreter is whole
        dist.destroy_process_group()


# Tensor-parallel all-reduces per micro-step, from the layouts: forward, one per row-wise
# layer; backward, one per column-wise layer whose input needs a gradient (an MLP's first layer
# reads the data, which needs none).
#   mlp-tiny, Linears 0 2 4 6 as col row col row: 2 forward + 1 backward (layer 4)
#   smollm2-tiny, 2 layers of q k v gate up (col) and o down (row): 2 x 2 + 2 x 5
TP_ALL_REDUCES_PER_MICRO_STEP = {"mlp-tiny": 3, "smollm2-tiny": 14}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    results = mp.Manager().dict()
    mp.spawn(_worker, args=(str(tmp_path_factory.mktemp("mesh") / "init"), results),
             nprocs=WORLD_SIZE, join=True)
    return dict(results)


@pytest.mark.slow
@pytest.mark.parametrize("model_name", MODELS)
def test_fsdp_tp_matches_single_on_a_2x2_mesh(trained, model_name):
    results = {rank: trained[model_name, rank] for rank in range(WORLD_SIZE)}
    _, reference_parameters, reference = _train("single", model_name, rank=0)
    # rank r sits at (r // 2, r % 2): ranks 0 and 1 form tensor-parallel group 0, which is
    # data-parallel coordinate 0; both read its shard
    assert [results[r]["shard"] for r in range(WORLD_SIZE)] == [(0, 2), (0, 2), (1, 2), (1, 2)]
    for rank, result in results.items():
        differs_by = (result["parameters"] - reference_parameters).abs().max().item()
        assert differs_by <= 1e-5, (rank, differs_by)
        assert torch.equal(result["parameters"], results[0]["parameters"])
        partner = results[rank ^ 1]  # the other rank of its tensor-parallel group
        assert result["losses"] == partner["losses"]
        assert result["per_dim"]["tp"] == {
            "all_reduce": GRAD_ACCUM * TP_ALL_REDUCES_PER_MICRO_STEP[model_name]}
    # each step's loss is the mean over the data-parallel shards: single's, on the whole batch
    mean = [(a + b) / 2 for a, b in zip(results[0]["losses"], results[2]["losses"], strict=True)]
    assert mean == pytest.approx(reference, abs=1e-5)
    assert results[0]["losses"] != results[2]["losses"]  # the shards do differ


def test_the_layout_splits_pairs_and_refuses_what_tp_does_not_divide():
    mlp_medium = build_model_skeleton("mlp-medium")  # 5 Linears: the last stays whole
    assert tensor_parallel_layout(mlp_medium, 2) == {
        "0": "colwise", "2": "rowwise", "4": "colwise", "6": "rowwise"}
    assert tensor_parallel_problem(mlp_medium, 6, 4) == "does not divide the world size 6"
    assert tensor_parallel_problem(build_model_skeleton("mlp-small"), 6, 3) == \
        "layer 0 has 1024 output features, not divisible by 3 ranks"
    tiny = build_model_skeleton("smollm2-tiny")  # 4 heads, 2 key-value heads
    assert tensor_parallel_problem(tiny, 4, 2) is None
    assert tensor_parallel_problem(tiny, 4, 4) == "2 key-value heads, not divisible by 4 ranks"
    assert len(tensor_parallel_layout(tiny, 2)) == 2 * 7
    with pytest.raises(ValueError, match="no tensor-parallel layout for a Linear"):
        tensor_parallel_layout(torch.nn.Linear(2, 2), 2)


# --- a recorded run: its mesh, and the group of every collective in its traces -----------------

#: The c10d op of each collective kind on the training thread (as test_variants has them).
C10D_KINDS = {"c10d::allreduce_": "all_reduce", "c10d::_reduce_scatter_base_": "reduce_scatter",
              "c10d::_allgather_base_": "all_gather"}


def _collectives_by_group(trace_path: Path) -> list[dict[str | None, dict[str, int]]]:
    """Per ProfilerStep, the c10d collectives by the mesh dimension of the ``ddpprof::group``
    span around them (None: none) and by kind."""
    with gzip.open(trace_path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    labels = [e for e in events if e["name"].startswith("ddpprof::group ")]
    steps = []
    for step in (e for e in events if e["name"].startswith("ProfilerStep#")):
        found: dict[str | None, dict[str, int]] = {}
        for e in events:
            if e["name"] not in C10D_KINDS or not step["ts"] <= e["ts"] <= step["ts"] + step["dur"]:
                continue
            around = [label["name"].split()[-1] for label in labels if label["tid"] == e["tid"]
                      and label["ts"] <= e["ts"] and
                      e["ts"] + e["dur"] <= label["ts"] + label["dur"]]
            dim = around[0] if len(around) == 1 else None
            kinds = found.setdefault(dim, {})
            kinds[C10D_KINDS[e["name"]]] = kinds.get(C10D_KINDS[e["name"]], 0) + 1
        steps.append(found)
    return steps


def check_recorded_mesh(run: Path, expected_steps: int) -> MeshRecord:
    """run.json's mesh is the 2 x 2 mesh, and every rank's trace shows in each profiled step
    exactly the collectives the mesh claims per dimension, each inside its dimension's span."""
    manifest = read_manifest(run / "run.json")
    mesh = manifest.mesh
    assert mesh is not None and manifest.config.world_size == WORLD_SIZE
    assert [(d.name, d.size) for d in mesh.dims] == [("dp", 2), ("tp", 2)]
    assert mesh.ranks == [0, 1, 2, 3]
    groups = {d.name: {g.name: g.ranks for g in d.groups} for d in mesh.dims}
    assert groups == {"dp": {"dp0": [0, 2], "dp1": [1, 3]}, "tp": {"tp0": [0, 1], "tp1": [2, 3]}}
    claimed = {d.name: d.collectives_per_step for d in mesh.dims}
    assert [d.span for d in mesh.dims] == ["ddpprof::group dp", "ddpprof::group tp"]
    total: dict[str, int] = {}
    for counts in claimed.values():
        total.update(counts or {})
    assert manifest.measured.collectives_per_sync == total
    for rank in range(WORLD_SIZE):
        trace = run / f"rank{rank}.pt.trace.json.gz"
        assert _collectives_by_group(trace) == [claimed] * expected_steps, rank
        # the trace names this rank's groups as c10d does, and so does run.json
        with gzip.open(trace, "rt") as f:
            pg_config = json.load(f)["distributedInfo"]["pg_config"]
        for dim in mesh.dims:
            [group] = [g for g in dim.groups if rank in g.ranks]
            [listed] = [g for g in pg_config if g["pg_desc"] == f"mesh_{dim.name}"]
            assert (listed["pg_name"], listed["ranks"]) == (group.pg_name, group.ranks)
    return mesh


def test_the_fixture_holds_the_ground_truth_of_every_collectives_group(ddpprof_cli):
    mesh = check_recorded_mesh(FIXTURE, expected_steps=2)
    # mlp-small's Linears 0 2 4 6, col row col row: FSDP gathers each unit before forward and
    # before backward and reduce-scatters it once; 2 forward + 1 backward all-reduces
    assert {d.name: d.collectives_per_step for d in mesh.dims} == {
        "dp": {"all_gather": 8, "reduce_scatter": 4}, "tp": {"all_reduce": 3}}
    assert mesh.tp_split_parameters == 1_462_538 - 512 - 10  # all but the row-wise biases
    analyzed = ddpprof_cli("analyze", str(FIXTURE.parent))
    assert analyzed.returncode == 0, analyzed.stderr
    assert "fsdp_tp" in analyzed.stdout


@pytest.mark.slow
def test_record_fsdp_tp_writes_its_mesh_and_ranks_agree(tmp_path, ddpprof_cli):
    out = tmp_path / "traces"
    recorded = ddpprof_cli("record", "--variant", "fsdp_tp", "--nproc", "4", "--model",
                           "mlp-tiny", "--global-batch", "16", "--steps", "3", "--wait", "0",
                           "--warmup", "1", "--active", "2", "--out", str(out))
    assert recorded.returncode == 0, recorded.stderr
    run = out / "fsdp_tp"
    check_recorded_mesh(run, expected_steps=2)
    manifest = read_manifest(run / "run.json")
    config = manifest.config
    assert manifest.status == "complete" and (config.tp, config.data_parallel_size) == (2, 2)
    assert len({s.loss for s in manifest.steps}) == 3  # it trains
    analyzed = ddpprof_cli("analyze", str(run), "--json", str(tmp_path / "a.json"))
    assert analyzed.returncode == 0, analyzed.stderr
    memory = ddpprof_cli("memory", str(run), "--json", str(tmp_path / "m.json"))
    assert memory.returncode == 0, memory.stderr
    [compared] = json.loads((tmp_path / "m.json").read_text())["runs"]
    assert all(abs(rank["error_pct"]) < 1 for rank in compared["ranks"])


def test_what_cannot_run_fsdp_tp_refuses_in_one_line(ddpprof_cli, tmp_path):
    out = ["--out", str(tmp_path / "out")]
    for args, message in [
            (["record", "--variant", "fsdp_tp", "--nproc", "3", *out],
             "--tp 2: does not divide the world size 3"),
            (["record", "--variant", "fsdp_tp", "--nproc", "3", "--tp", "3", "--model",
              "mlp-small", *out], "--tp 3: layer 0 has 1024 output features, not divisible"),
            (["bench", "--variant", "single,fsdp_tp", *out], "--variant fsdp_tp: bench scales"),
            (["simulate", str(FIXTURE)], "simulate replays the collectives of one process group")]:
        result = ddpprof_cli(*args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
