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

from scaling_inputs import span, step_events

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG = {"variant": "bucket_ddp_async", "model": "mlp-small", "world_size": 2,
          "nproc_per_node": 2, "nnodes": 1, "backend": "gloo", "grad_accum": 1,
          "bucket_cap_mb": 25.0, "global_batch": 64, "steps": 4}


def trace(rank: int, backward_us: float = 300, steps: int = 4,
          names: tuple[str, ...] = ()) -> dict[str, Any]:
    events = [e for s in range(steps) for e in step_events(s, 1000.0 * s, backward_us, mm_us=180)]
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
