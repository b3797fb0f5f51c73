"""``ddpprof record`` end to end through torchrun, on tiny models."""

from __future__ import annotations

import gzip
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ddpprof.variants import VARIANTS_IN_ALL

pytestmark = pytest.mark.slow

from conftest import SCHEDULE  # noqa: E402


def load_trace(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def test_every_variant_records_traces_and_a_complete_manifest(all_variants):
    out, result = all_variants
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # CI=true: no progress display
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(VARIANTS_IN_ALL)
    for variant in VARIANTS_IN_ALL:
        manifest = json.loads((out / variant / "run.json").read_text())
        config, measured = manifest["config"], manifest["measured"]
        world = 1 if variant == "single" else 2
        assert manifest["status"] == "complete" and manifest["schema_version"] == 4
        assert config["variant"] == variant and config["nproc"] == measured["world_size"] == world
        assert config["backend"] == "gloo" and measured["parameters"] == 1_462_538
        assert config["grad_accum"] == (2 if variant == "simple_ddp_ga" else 1)
        assert measured["torch_version"] and len(measured["devices"]) == world
        assert measured["host_cores"] == len(os.sched_getaffinity(0))   # what simulate crowds
        assert measured["wall_s_over_ranks"] == "mean"
        assert manifest["traces"] == [f"rank{r}.pt.trace.json.gz" for r in range(world)]
        assert [s["phase"] for s in manifest["steps"]] == [
            "wait", "warmup", "active", "active", "after"]
        assert all(s["wall_s"] > 0 and math.isfinite(s["loss"]) for s in manifest["steps"])
        assert manifest["throughput"]["steps_used"] == [4]  # unprofiled, not the first
        assert manifest["throughput"]["samples_per_s"] == pytest.approx(
            64 / manifest["steps"][4]["wall_s"])


def test_all_variants_train_the_same_model(all_variants):
    """Same data, same initial weights (rank 0's), same maths: the losses agree."""
    out, _ = all_variants
    reference = [s["loss"] for s in json.loads((out / "single/run.json").read_text())["steps"]]
    # random labels over 10 classes: a fresh model's loss is about ln 10
    assert abs(reference[0] - math.log(10)) < 0.5
    for variant in VARIANTS_IN_ALL:
        losses = [s["loss"] for s in json.loads((out / variant / "run.json").read_text())["steps"]]
        # AdamW amplifies the rounding differences of summation order a little over 5 steps;
        # different data or weights would differ by far more than this
        assert losses == pytest.approx(reference, abs=1e-3), variant


def test_allreduces_per_sync_is_what_each_variant_launches(all_variants):
    out, _ = all_variants
    launched = {v: json.loads((out / v / "run.json").read_text())["measured"][
        "collectives_per_sync"].get("all_reduce", 0) for v in VARIANTS_IN_ALL}
    per_parameter = 8  # mlp-small: 4 Linear layers, weight and bias each
    # 1 MiB cap, reverse order: [b4 w4 b3 w3 b2 w2] reaches 2.6 MB, then [b1 w1]. The Reducer
    # rebuilds its buckets in gradient-ready order (the same reverse order here) with a first
    # bucket of 1 MiB (torch's default) and 1 MiB after: the same two buckets.
    assert launched == {"single": 0, "simple_ddp": per_parameter, "simple_ddp_ga": per_parameter,
                        "simple_ddp_hook": per_parameter, "simple_ddp_async": per_parameter,
                        "bucket_ddp_async": 2, "pytorch_ddp": 2,
                        "zero1": 0, "zero2": 0, "pytorch_zero1": 2, "fsdp": 0}


def test_traces_are_chrome_traces_with_steps_ranks_and_collective_shapes(all_variants):
    out, _ = all_variants
    for variant in ("single", "simple_ddp", "bucket_ddp_async"):
        for trace_path in sorted((out / variant).glob("rank*.pt.trace.json.gz")):
            trace = load_trace(trace_path)
            events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
            steps = sorted(e["name"] for e in events if e["name"].startswith("ProfilerStep#"))
            assert steps == ["ProfilerStep#2", "ProfilerStep#3"]  # the two active steps
            if variant == "single":
                continue
            assert trace["distributedInfo"]["rank"] == int(trace_path.name[4])
            assert trace["distributedInfo"]["world_size"] == 2
            allreduces = [e for e in events if e["name"] == "c10d::allreduce_"]
            assert allreduces and all(e["args"].get("Input Dims") for e in allreduces)


def test_summary_outputs(all_variants):
    out, result = all_variants
    summary = json.loads((out / "summary.json").read_text())
    assert summary["schema"] == "ddpprof.record" and summary["version"] == 2
    assert [r["variant"] for r in summary["runs"]] == list(VARIANTS_IN_ALL)
    assert result.stdout.startswith("### ddpprof record\n\n| run | variant | status |")
    assert result.stdout.count("| complete |") == len(VARIANTS_IN_ALL)


def test_a_crashed_rank_fails_the_run_without_hanging(tmp_path, ddpprof_cli):
    result = ddpprof_cli("record", "--variant", "simple_ddp", "--model", "mlp-tiny",
                         "--global-batch", "16", *SCHEDULE, "--out", str(tmp_path),
                         "--timeout-s", "60", env={"DDPPROF_FAIL_AT": "1:2"}, timeout=180)
    assert result.returncode == 1
    assert "rank 1: RuntimeError: injected failure at step 2" in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    manifest = json.loads((tmp_path / "simple_ddp" / "run.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["error"]["rank"] == 1
    assert "injected failure" in manifest["error"]["message"]
    assert not (tmp_path / "simple_ddp" / "worker_result.json").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_on_localhost_with_c10d_rendezvous(tmp_path):
    endpoint = f"127.0.0.1:{_free_port()}"
    common = ["record", "--variant", "bucket_ddp_async", "--model", "mlp-tiny", "--nproc", "1",
              "--nnodes", "2", "--rdzv-endpoint", endpoint, "--global-batch", "16", *SCHEDULE,
              "--out", str(tmp_path), "--name", "two-nodes"]
    env = {**os.environ, "CI": "true"}
    nodes = [subprocess.Popen([sys.executable, "-m", "ddpprof.cli", *common, "--node-rank",
                               str(node)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for node in (0, 1)]
    outputs = [node.communicate(timeout=240) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    run = tmp_path / "two-nodes"
    assert sorted(p.name for p in run.glob("rank*.pt.trace.json.gz")) == [
        "rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    for rank in (0, 1):
        info = load_trace(run / f"rank{rank}.pt.trace.json.gz")["distributedInfo"]
        assert (info["rank"], info["world_size"]) == (rank, 2)
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["status"] == "complete" and manifest["measured"]["world_size"] == 2
    assert manifest["config"]["nnodes"] == 2


def test_language_model_from_a_local_checkpoint_and_data_file(tmp_path, ddpprof_cli):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from workloads.models import SMOLLM2_CONFIGS

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**SMOLLM2_CONFIGS["smollm2-tiny"])).save_pretrained(
        tmp_path / "ckpt")
    corpus = Path(__file__).resolve().parent.parent / "workloads/sample_data/tiny_corpus.jsonl"
    result = ddpprof_cli("record", "--variant", "pytorch_ddp", "--model", "tiny-ckpt",
                         "--model-path", str(tmp_path / "ckpt"), "--data", str(corpus),
                         "--seq-len", "32", "--global-batch", "8", *SCHEDULE,
                         "--out", str(tmp_path / "traces"))
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "traces/pytorch_ddp/run.json").read_text())
    assert manifest["config"]["seq_len"] == manifest["measured"]["seq_len"] == 32
    assert manifest["measured"]["parameters"] == sum(
        p.numel() for p in LlamaForCausalLM.from_pretrained(tmp_path / "ckpt").parameters())
    assert manifest["throughput"]["tokens_per_s"] == pytest.approx(
        manifest["throughput"]["samples_per_s"] * 32)
