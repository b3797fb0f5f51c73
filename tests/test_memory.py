"""``ddpprof memory``: seed 004's table from the formulas, parameter counts from the model
definitions, and the estimate against what ranks really hold."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from ddpprof.core.errors import UsageError
from ddpprof.memory import estimate as estimator
from ddpprof.variants import VARIANTS, VARIANTS_IN_ALL, make_variant
from workloads.configs import MLP_WIDTHS, SMOLLM2_CONFIGS, model_parameter_count
from workloads.data import SyntheticImages
from workloads.memory import MemoryProbe, state_bytes
from workloads.models import build_model, count_parameters
from workloads.train import train


def _totals(parameters: int, world: int, precision: str, optimizer: str) -> list[int]:
    return [e.total_bytes for e in
            estimator.estimate_table(parameters, world, (precision,), (optimizer,))]


def test_mixed_precision_adamw_is_seed_004s_table():
    # Ψ = 8000, N = 8: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N
    assert _totals(8000, 8, "bf16-mixed", "adamw") == [128_000, 32_000 + 12_000,
                                                       16_000 + 14_000, 16_000]
    stage2 = estimator.estimate_stage(8000, 8, 2, "bf16-mixed", "adamw")
    assert (stage2.params_bytes, stage2.grads_bytes, stage2.optimizer_bytes) == (
        16_000, 2_000, 12_000)
    assert stage2.formula == "2Ψ + 14Ψ/N"


def test_fp32_and_sgd_bytes_per_parameter():
    # fp32 AdamW: 4 + 4 + 8; SGD with momentum: one fp32 buffer; plain SGD: no state.
    assert _totals(8000, 8, "fp32", "adamw") == [128_000, 64_000 + 8_000, 32_000 + 12_000,
                                                 16_000]
    assert _totals(8000, 8, "fp32", "sgd-momentum") == [96_000, 64_000 + 4_000,
                                                        32_000 + 8_000, 12_000]
    assert _totals(8000, 8, "fp32", "sgd") == [64_000, 64_000, 32_000 + 4_000, 8_000]
    # bf16-mixed SGD keeps an fp32 master copy (4), plus the momentum buffer (4)
    assert _totals(8000, 8, "bf16-mixed", "sgd") == [64_000, 32_000 + 4_000, 16_000 + 6_000,
                                                     8_000]
    assert _totals(8000, 8, "bf16-mixed", "sgd-momentum") == [96_000, 32_000 + 8_000,
                                                              16_000 + 10_000, 12_000]


def test_uneven_shards_round_up():
    # Ψ = 10 on N = 3: a rank holds ceil(10/3) = 4 elements of each sharded quantity
    stage3 = estimator.estimate_stage(10, 3, 3, "fp32", "adamw")
    assert (stage3.params_bytes, stage3.grads_bytes, stage3.optimizer_bytes) == (16, 16, 32)
    assert estimator.estimate_stage(10, 3, 1, "fp32", "adamw").total_bytes == 40 + 40 + 32


def test_communication_per_step_in_the_ring_model():
    # Ψ = 8000, N = 8, 2 bytes: (N-1)/N·Ψ·2 = 14,000 bytes per reduce-scatter or all-gather
    comm = [e.comm_bytes_per_step
            for e in estimator.estimate_table(8000, 8, ("bf16-mixed",), ("adamw",))]
    assert comm == [28_000, 28_000, 28_000, 42_000]
    # fp32 doubles it; a single rank sends nothing
    assert estimator.estimate_stage(8000, 8, 3, "fp32", "adamw").comm_bytes_per_step == 84_000
    assert estimator.estimate_stage(8000, 1, 0, "fp32", "adamw").comm_bytes_per_step == 0


def test_bad_world_size_is_a_usage_error():
    with pytest.raises(UsageError, match="--world-size"):
        estimator.estimate_stage(10, 0, 0, "fp32", "adamw")


@pytest.mark.parametrize("name", list(MLP_WIDTHS))
def test_mlp_counts_from_the_definition_match_the_built_model(name):
    assert model_parameter_count(name) == count_parameters(build_model(name)[0])


@pytest.mark.parametrize("name", list(SMOLLM2_CONFIGS))
def test_smollm2_counts_from_the_config_match_the_built_model(name):
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_CONFIGS[name]))
    assert model_parameter_count(name) == count_parameters(model)


def test_llama_count_with_untied_head_and_biases():
    from transformers import LlamaConfig, LlamaForCausalLM

    from workloads.configs import llama_parameter_count

    config = dict(SMOLLM2_CONFIGS["smollm2-tiny"], tie_word_embeddings=False,
                  attention_bias=True, mlp_bias=True, head_dim=32)
    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**config))
    assert llama_parameter_count(config) == count_parameters(model)


# --- counting what a rank holds ---------------------------------------------------------------

class _Flat(nn.Module):
    """Two parameters that are views of one flat buffer, as zero1 lays them out."""

    def __init__(self) -> None:
        super().__init__()
        flat = torch.zeros(10)
        self.a = nn.Parameter(torch.zeros(4))
        self.b = nn.Parameter(torch.zeros(6))
        self.a.data, self.b.data = flat[:4], flat[4:]


def test_state_bytes_counts_each_storage_once():
    from ddpprof.variants.single import Single

    model = Single(_Flat())
    optimizer = model.make_optimizer(torch.optim.AdamW)
    flat_grad = torch.ones(10)  # gradients that are views of one buffer, as zero1's pieces'
    model.module.a.grad, model.module.b.grad = flat_grad[:4], flat_grad[4:]
    optimizer.step()
    counted = state_bytes(model, optimizer)
    # one 10-float storage each for parameters and gradients; AdamW: exp_avg and exp_avg_sq
    # per parameter (4 + 6 floats each) and a float32 step scalar per parameter
    assert counted.params_bytes == 40
    assert counted.grads_bytes == 40
    assert counted.optimizer_bytes == 2 * 40 + 2 * 4


# --- the CLI ----------------------------------------------------------------------------------

def test_memory_command_json_for_a_named_model_without_torch(tmp_path):
    probe = ("import json, sys\nfrom ddpprof.cli import main\n"
             "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
             "else:\n    code = 0\n"
             "print(json.dumps({'code': code, 'torch': 'torch' in sys.modules}))\n")
    out = tmp_path / "m.json"
    result = subprocess.run([sys.executable, "-c", probe, "memory", "--model", "smollm2-360m",
                             "--world-size", "8", "--precision", "bf16-mixed", "--optimizer",
                             "adamw", "--json", str(out)], capture_output=True, text=True,
                            timeout=120, env={"CI": "true", "PATH": "/usr/bin:/bin"})
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"code": 0, "torch": False}
    document = json.loads(out.read_text())
    psi = 361_821_120
    stages = document["estimates"]
    assert {(s["model"], s["parameters"], s["world_size"]) for s in stages} == {
        ("smollm2-360m", psi, 8)}
    totals = [row["total_bytes"] for row in stages]
    shard = -(-psi // 8)
    assert totals == [16 * psi, 4 * psi + 12 * shard, 2 * psi + 14 * shard, 16 * shard]


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "gpt-5", "--world-size", "8"], "unknown model 'gpt-5'"),
    (["--model", "mlp-small"], "--world-size"),
    (["--world-size", "0", "--model", "mlp-small"], "--world-size"),
    (["RUNDIR", "--model", "mlp-small"], "give RUN folders, or --model"),
    (["RUNDIR"], "no run.json"),
    (["--model-path", "RUNDIR", "--world-size", "2"], "not a Hugging Face checkpoint"),
])
def test_memory_bad_input_is_one_line_and_exit_2(tmp_path, ddpprof_cli, args, message):
    result = ddpprof_cli("memory", *[str(tmp_path) if a == "RUNDIR" else a for a in args])
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.count("\n") == 1


def _write_run(folder, variant, world, parameters, rows, status="complete"):
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({
        "run": folder.name, "status": status,
        "config": {"variant": variant, "world_size": world, "parameters": parameters},
        "memory": rows}))


def test_memory_of_recorded_runs_puts_the_measurement_beside_the_estimate(tmp_path,
                                                                          ddpprof_cli):
    # zero2, Ψ = 1000, N = 2, fp32 AdamW: 4Ψ + 12·500 = 10,000 bytes estimated per rank
    rows = [{"rank": 0, "params_bytes": 4000, "grads_bytes": 2000, "optimizer_bytes": 4500},
            {"rank": 1, "params_bytes": 4000, "grads_bytes": 2000, "optimizer_bytes": 3500}]
    _write_run(tmp_path / "runs" / "zero2", "zero2", 2, 1000, rows)
    _write_run(tmp_path / "runs" / "ddp", "pytorch_ddp", 2, 1000,
               [{"rank": r, "params_bytes": 4000, "grads_bytes": 4000,
                 "optimizer_bytes": 8000} for r in (0, 1)])
    result = ddpprof_cli("memory", str(tmp_path / "runs"), "--json", str(tmp_path / "m.json"))
    assert result.returncode == 0, result.stderr
    runs = {run["variant"]: run for run in json.loads((tmp_path / "m.json").read_text())["runs"]}
    assert [(r["estimated_bytes"], r["measured_bytes"], r["error_pct"])
            for r in runs["zero2"]["ranks"]] == [(10_000, 10_500, 5.0), (10_000, 9_500, -5.0)]
    assert [r["error_pct"] for r in runs["pytorch_ddp"]["ranks"]] == [0.0, 0.0]
    assert runs["zero2"]["estimate"]["name"] == "ZeRO-2"


def test_memory_refuses_a_failed_run_or_one_without_measurements(tmp_path, ddpprof_cli):
    _write_run(tmp_path / "failed", "zero1", 2, 10, [], status="failed")
    _write_run(tmp_path / "old", "zero1", 2, 10, None)
    for name, message in (("failed", "not complete"), ("old", "no 'memory' measurements")):
        result = ddpprof_cli("memory", str(tmp_path / name))
        assert result.returncode == 2 and message in result.stderr, result.stderr


# --- the estimate against what every variant's ranks hold -------------------------------------

STEPS = 2


def _held(name: str, rank: int, world_size: int, results: dict) -> None:
    torch.manual_seed(rank)
    model = make_variant(name, build_model("mlp-small")[0])
    optimizer = model.make_optimizer(torch.optim.AdamW, lr=1e-3)
    probe = MemoryProbe(model, optimizer, torch.device("cpu"), sample_at_step=STEPS - 1)
    train(model, optimizer, SyntheticImages(n_samples=64), steps=STEPS, global_batch=12,
          grad_accum=1, rank=rank, device=torch.device("cpu"))
    results[world_size, rank, name] = probe.state
    if name == "pytorch_zero1":
        assigned = optimizer._partition_parameters()[rank]
        results[world_size, rank, "zero_assigned"] = sum(
            p.numel() for group in assigned for p in group["params"])


def _measure(rank: int, world_size: int, init_file: str, results: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world_size)
    torch.set_num_threads(1)
    try:
        for name in VARIANTS_IN_ALL[1:]:
            _held(name, rank, world_size, results)
    finally:
        gc.collect()  # the variants' reference cycles, while the interpreter is whole
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3])
def test_every_variant_holds_what_the_estimate_says(tmp_path, world_size):
    results = mp.Manager().dict()
    mp.spawn(_measure, args=(world_size, str(tmp_path / "init"), results), nprocs=world_size,
             join=True)
    psi = model_parameter_count("mlp-small")
    for name in VARIANTS_IN_ALL[1:]:
        estimate = estimator.estimate_stage(psi, world_size, VARIANTS[name].zero_stage, "fp32",
                                            "adamw")
        for rank in range(world_size):
            held = results[world_size, rank, name]
            if name == "pytorch_zero1" and world_size == 3:
                # Whole parameters per rank: on a 4-layer MLP the 1024x784 weight alone is over
                # Ψ/3, so the shards are far from equal; the count is what ZeRO assigned.
                assigned = results[world_size, rank, "zero_assigned"]
                assert held.optimizer_bytes == pytest.approx(8 * assigned, abs=4 * 8)
                continue
            error = abs(held.total_bytes - estimate.total_bytes) / estimate.total_bytes
            assert error < 0.05, f"{name} rank {rank}: {held} vs {estimate}"
    if world_size == 2:  # hand-computed: one bucket of 8 parameters, shards of 731,269
        zero1, zero2 = results[2, 0, "zero1"], results[2, 0, "zero2"]
        assert zero1.params_bytes == 4 * 1_462_538
        assert zero1.grads_bytes == 4 * 2 * (731_269 + 8)   # whole bucket, 8 used-flags each
        assert zero2.grads_bytes == 4 * (731_269 + 8)       # the shard only
        assert zero1.optimizer_bytes == 8 * 731_269 + 4 * 8  # its pieces' moments and steps


@pytest.mark.slow
def test_recorded_runs_agree_with_the_estimate_within_5_percent(all_variants, ddpprof_cli,
                                                                tmp_path):
    out, _ = all_variants
    result = ddpprof_cli("memory", str(out), "--json", str(tmp_path / "m.json"))
    assert result.returncode == 0, result.stderr
    runs = json.loads((tmp_path / "m.json").read_text())["runs"]
    assert sorted(run["variant"] for run in runs) == sorted(VARIANTS_IN_ALL)
    for run in runs:
        world = 1 if run["variant"] == "single" else 2
        assert [r["rank"] for r in run["ranks"]] == list(range(world))
        for rank in run["ranks"]:
            assert abs(rank["error_pct"]) < 5, (run["variant"], rank)
            measured = rank["measured"]
            assert measured["device"] == "cpu" and measured["peak_allocated_bytes"] is None
            assert measured["step_peak_rise_bytes"] > 0 and measured["peak_rss_bytes"] > 0
