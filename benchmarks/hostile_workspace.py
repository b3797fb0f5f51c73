"""The small, well-formed workspace every hostile case starts from (a copy of it each), so that
a case changes one thing and the rest is known to work:

* ``run/`` and ``run2/``: complete two-rank gloo runs (two traces and a ``run.json``) of four
  1000 µs steps with two gradients each, all-reduced as they are ready (``run2``'s backward is
  slower, for ``diff``);
* ``cp/``: the two-rank CPU run of ``tests/fixtures/critical-path/cpu-two-rank``;
* ``analysis.json``: ``ddpprof analyze run --json`` (the gate's baseline, ``diff``'s input);
* ``sweep.json`` (``simulate --measured``) and ``calibration.json`` (``--calibration``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG = {"variant": "bucket_ddp_async", "model": "mlp-small", "world_size": 2,
          "nproc_per_node": 2, "nnodes": 1, "backend": "gloo", "grad_accum": 1,
          "bucket_cap_mb": 25.0, "global_batch": 64, "steps": 4}


def span(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op",
         **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def training_step(number: int, base: float, backward_us: float) -> list[dict[str, Any]]:
    """A 1000 µs step: forward, a backward producing two gradients (1 KiB and 4 KiB, each
    all-reduced as it is ready), the optimizer."""
    events = [span(f"ProfilerStep#{number}", base, 1000, cat="user_annotation"),
              span("aten::mm", base + 10, 180),
              span("autograd::engine::evaluate_function: MmBackward0", base + 200, backward_us)]
    for ready, numel, took in ((300, 256, 40), (500, 1024, 90)):
        dims = {"Input Dims": [[numel]], "Input type": ["float"]}
        events += [span("torch::autograd::AccumulateGrad", base + ready - 20, 20, **dims),
                   span("c10d::allreduce_", base + ready + 1, 2),
                   span("gloo:all_reduce", base + ready + 5, took, tid=9, **dims)]
    events.append(span("Optimizer.step#AdamW.step", base + 700, 100, cat="user_annotation"))
    return events


def trace(rank: int, backward_us: float = 300, steps: int = 4,
          names: tuple[str, ...] = ()) -> dict[str, Any]:
    events = [e for s in range(steps) for e in training_step(s, 1000.0 * s, backward_us)]
    events += [span(name, 20 + 5 * i, 3) for i, name in enumerate(names)]
    return {"traceEvents": events,
            "distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo"}}


def manifest(name: str, status: str = "complete") -> dict[str, Any]:
    memory = [{"rank": rank, "device": "cpu", "params_bytes": 4_000_000, "grads_bytes": 4_000_000,
               "optimizer_bytes": 8_000_000, "peak_rss_bytes": 500_000_000} for rank in (0, 1)]
    return {"schema_version": 3, "status": status, "run": name, "config": CONFIG,
            "measured": {"parameters": 1_000_000, "world_size": 2}, "memory": memory}


def write_run(folder: Path, name: str | None = None, backward_us: float = 300,
              names: tuple[str, ...] = (), status: str = "complete") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        (folder / f"rank{rank}.json").write_text(json.dumps(trace(rank, backward_us,
                                                                  names=names)))
    (folder / "run.json").write_text(json.dumps(manifest(name or folder.name, status)))
    return folder


def build(root: Path) -> Path:
    root.mkdir(parents=True)
    write_run(root / "run")
    write_run(root / "run2", backward_us=340)
    shutil.copytree(REPO_ROOT / "tests/fixtures/critical-path/cpu-two-rank", root / "cp")
    (root / "sweep.json").write_text(json.dumps({"schema": "ddpprof.sweep", "rows": [
        {"variant": "bucket_ddp_async", "bucket_cap_mib": cap, "step_ms": 1.0 + cap / 100}
        for cap in (1, 5, 25)]}))
    (root / "calibration.json").write_text(json.dumps({
        "schema": "ddpprof.calibration", "version": 1, "status": "complete",
        "backend": "gloo", "world_size": 2,
        "fit": {"alpha_us": 20.0, "beta_busbw_gbps": 1.0, "r2": 0.99}}))
    result = subprocess.run([sys.executable, "-m", "ddpprof.cli", "analyze", "run", "--json",
                             "analysis.json"], cwd=root, capture_output=True, text=True,
                            env={**os.environ, "CI": "true", "PYTHONPATH": str(REPO_ROOT)})
    if result.returncode != 0:
        raise SystemExit(f"the workspace's analysis failed: {result.stderr}")
    return root
