"""The analysis side never imports torch: it costs a second and ~190 MiB before a trace is read,
and a machine that only analyzes traces need not have it. Nor does ``analyze`` of traces
ddpprof did not record import the step-graph machinery that only a replay needs (``simulate.run``
is imported where a replay is made: 20 ms of every analyze)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from trace_builders import kernel, launch, span, step, write_trace

HTA_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hta-gpu"

# Runs the CLI in-process, then reports which heavy modules it imported.
PROBE = """
import json, sys
from ddpprof.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
else:
    code = 0
heavy = sorted(m for m in ("torch", "transformers", "ddpprof.variants.base", "workloads.models",
                                "workloads.train")
               if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy, "graphs": "ddpprof.graph.build" in sys.modules}))
"""


def _probe(*args: str, graphs: bool = False) -> dict:
    """The exit code and the heavy modules imported; the step-graph machinery must be
    imported where ``graphs`` says (a replay), and only there."""
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                            text=True, timeout=120, env={"CI": "true", "PATH": "/usr/bin:/bin"})
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome.pop("graphs") == graphs, args
    return outcome


@pytest.fixture
def cpu_run(tmp_path):
    events = [step(0, 0, 100), step(1, 100, 200),
              span("aten::mm", 10, 60), span("aten::mm", 110, 160),
              span("gloo:all_reduce", 40, 90, tid=9, **{"Input Dims": [[1024]],
                                                       "Input type": ["float"]}),
              span("gloo:all_reduce", 140, 190, tid=9, **{"Input Dims": [[4096]],
                                                         "Input type": ["float"]})]
    for rank in (0, 1):
        write_trace(tmp_path / "run" / f"rank{rank}.json", events, rank=rank)
    return tmp_path / "run"


def test_analyze_with_every_output_imports_no_torch(cpu_run, tmp_path):
    outcome = _probe("analyze", str(cpu_run), "--json", str(tmp_path / "a.json"),
                     "--csv", str(tmp_path / "a.csv"), "--html-out", str(tmp_path / "a.html"),
                     "--per-step")
    assert outcome == {"code": 0, "heavy": []}


def test_analyze_gpu_trace_imports_no_torch():
    assert _probe("analyze", str(HTA_FIXTURES / "two-rank")) == {"code": 0, "heavy": []}


def test_gate_imports_no_torch(cpu_run, tmp_path):
    baseline = tmp_path / "baseline.json"
    assert _probe("analyze", str(cpu_run), "--json", str(baseline))["code"] == 0
    assert _probe("gate", str(cpu_run), "--baseline", str(baseline)) == {"code": 0, "heavy": []}


def test_diff_and_a_failing_gate_import_no_torch(cpu_run, tmp_path):
    baseline = tmp_path / "baseline.json"
    assert _probe("analyze", str(cpu_run), "--json", str(baseline))["code"] == 0
    assert _probe("diff", str(cpu_run), str(baseline), "--html-out",
                  str(tmp_path / "d.html")) == {"code": 0, "heavy": []}
    # a failing rule explains itself with a diff
    assert _probe("gate", str(cpu_run), "--baseline", str(baseline), "--rule",
                  "step_ms < baseline") == {"code": 1, "heavy": []}


def test_simulate_imports_no_torch(tmp_path):
    grads = [span("torch::autograd::AccumulateGrad", 300 + 100 * i, 350 + 100 * i,
                  **{"Input Dims": [[1000 * (i + 1)]], "Input type": ["float"]})
             for i in range(3)]
    events = [step(0, 0, 1000), step(1, 1000, 2000), *grads,
              span("autograd::engine::evaluate_function: AddmmBackward0", 250, 700),
              kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 400, 450, 1),
              launch(395, 1)]
    write_trace(tmp_path / "run" / "rank0.json", events)
    outcome = _probe("simulate", str(tmp_path / "run"), "--latency-us", "10",
                     "--bandwidth-gbps", "1", graphs=True)
    assert outcome == {"code": 0, "heavy": []}
