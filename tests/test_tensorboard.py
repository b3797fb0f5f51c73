"""Recorded traces open in TensorBoard's PyTorch profiler plugin (torch-tb-profiler), loaded
as TensorBoard loads them: every rank, the profiled steps, the communication."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch_tb_profiler", reason="torch-tb-profiler is a test extra")
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("variant", ["bucket_ddp_async", "single"])
def test_tensorboard_plugin_sees_every_rank_step_and_collective(all_variants, variant):
    out, _ = all_variants
    manifest = json.loads((out / variant / "run.json").read_text())
    world = manifest["measured"]["world_size"]
    active = [str(s["step"]) for s in manifest["steps"] if s["phase"] == "active"]
    result = subprocess.run([sys.executable, str(Path(__file__).with_name("tensorboard_view.py")),
                             str(out / variant)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert sorted(seen["workers"]) == [f"rank{r}" for r in range(world)]
    for worker in seen["workers"].values():
        assert "Overview" in worker["views"] and "Trace" in worker["views"]
        # ProfilerStep#N is the N-th optimizer step of the run: the active ones
        assert worker["steps"] == active
        assert worker["has_communication"] is (world > 1)
    if world > 1:
        assert seen["distributed"]["workers"] == [f"rank{r}" for r in range(world)]
        assert "rank0" in seen["distributed"]["comm_ops"]
