"""Current PyTorch traces read as the trace records them, against an oracle written here from
the trace format alone (not from ddpprof's code): the shares, the step and the calls of every
rank of real jobs others published (PyTorch 2.10, ``torch.compile``, 8 × H100; an MI300X DDP
rank), and hand-built traces for each rule: host ops that name a stream, the device-side
copies of ProfilerSteps, device work no launch in the trace accounts for, and traces that
are not what they seem."""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path

import pytest
import trace_builders as tb

from ddpprof.analysis import AnalysisOptions, analyze_paths

REAL = Path(__file__).parent / "fixtures" / "real-traces"
NANOGPT = REAL / "modded-nanogpt-8rank-compile"
#: Kineto's categories of device records, and of the host calls that launch them.
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCHERS = ("cuda_runtime", "cuda_driver")
STEP = re.compile(r"^ProfilerStep#\d+$")


def _union_us(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


@functools.cache
def oracle(path: Path) -> dict[str, float]:
    """What the trace records, by the definitions of docs/metrics.md, from the JSON alone:
    the host ProfilerSteps but the last are analyzed; the device records (Kineto's
    categories) whose launch (same correlation id) started before the last host step did;
    the window from the first such record's start to the last one's end; compute = the union
    of the kernels that are not NCCL's; busy = the union of them all."""
    with gzip.open(path, "rt") as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in events if e.get("cat") in ("cpu_op", "user_annotation")
                    and STEP.match(e["name"])), key=lambda e: e["ts"])
    cut = steps[-1]["ts"]
    launched = {e["args"]["correlation"] for e in events if e.get("cat") in LAUNCHERS
                and e["ts"] < cut and "correlation" in e.get("args", {})}
    device = [e for e in events if e.get("cat") in DEVICE
              and e.get("args", {}).get("correlation") in launched]
    lo = min(e["ts"] for e in device)
    window = max(e["ts"] + e["dur"] for e in device) - lo
    busy = _union_us([(e["ts"], e["ts"] + e["dur"]) for e in device])
    compute = _union_us([(e["ts"], e["ts"] + e["dur"]) for e in device
                         if e["cat"] == "kernel" and not e["name"].startswith("nccl")])
    all_gathers = sum(e["cat"] == "kernel" and e["name"].startswith("ncclDevKernel_AllGather")
                      for e in device)
    analyzed = len(steps) - 1
    return {"compute_pct": 100 * compute / window,
            "non_compute_pct": 100 * (busy - compute) / window,
            "idle_pct": 100 * (window - busy) / window,
            "host_step_ms": sum(e["dur"] for e in steps[:-1]) / analyzed / 1e3,
            "device_step_ms": window / analyzed / 1e3,
            "all_gathers_per_step": all_gathers / analyzed}


@functools.cache
def _analyzed(folder: Path):
    return _ranks(folder)


def _ranks(folder: Path, **options):
    analysis = analyze_paths([folder], AnalysisOptions(jobs=1, **options))
    assert not analysis.errors, analysis.errors
    [run] = analysis.runs
    return run, {rank.rank: rank for rank in run.ranks}


@pytest.mark.parametrize("folder", ["modded-nanogpt-8rank-compile", "modded-nanogpt-hook-pair",
                                    "tracelens-mi300-ddp-resnet"])
def test_every_rank_equals_the_oracle(folder):
    """Each rank's shares within 0.05 pp of the oracle, its window over the steps equal to
    the oracle's device step, and (the 8-rank job) the all-gathers per step equal to those
    launched in the window: 6 (3 steps of 6 issued), on every rank, where reading the
    device-side step copies as steps gave 6 on some ranks and 9.3 on others."""
    # the hook pair's two files are rank 0 of two runs: each is analyzed alone
    one_run = folder != "modded-nanogpt-hook-pair"
    for path in sorted((REAL / folder).rglob("*.json.gz")):
        expected = oracle(path)
        every = _analyzed(REAL / folder if one_run else path)[1].values()
        [rank] = [r for r in every if Path(r.path).name == path.name]
        b = rank.breakdown
        for metric in ("compute_pct", "non_compute_pct", "idle_pct"):
            assert getattr(b, metric) == pytest.approx(expected[metric], abs=0.05), (
                path.name, metric)
        assert b.window_us / rank.steps / 1e3 == pytest.approx(expected["device_step_ms"],
                                                               rel=1e-9)
        if folder == "modded-nanogpt-8rank-compile":
            assert expected["all_gathers_per_step"] == 6
            assert rank.collectives["all_gather"].calls / rank.steps == 6


def test_the_step_of_a_job_is_its_host_steps():
    """The 8-rank job's step (the mean over ranks of each rank's device window per step)
    is within 2% of its host steps' mean over ranks (41.5 ms), where cutting at the device
    copies of the ProfilerSteps made the window hold most of the dropped step; the hook
    pair's 61 ms step likewise (101 ms before)."""
    host = [oracle(path)["host_step_ms"] for path in sorted(NANOGPT.glob("*.json.gz"))]
    ranks = _analyzed(NANOGPT)[1]
    step_ms = sum(r.breakdown.window_us / r.steps for r in ranks.values()) / len(ranks) / 1e3
    assert step_ms == pytest.approx(sum(host) / len(host), rel=0.02)
    for path in sorted((REAL / "modded-nanogpt-hook-pair").rglob("*.json.gz")):
        [rank] = _analyzed(path)[1].values()
        assert rank.breakdown.window_us / rank.steps / 1e3 == pytest.approx(
            oracle(path)["host_step_ms"], rel=0.02)


def test_the_notes_say_what_no_launch_accounts_for():
    """Rank 0 of the 8-rank job ran 20 NCCL kernels (354 device records in all) launched
    before the profiler started: outside every step, said in one note for all ranks."""
    run, _ = _analyzed(NANOGPT)
    [note] = [n for n in run.notes if "have no launch in the trace" in n]
    assert note.startswith("354 to 1041 device records (20 to 28 communication kernels)")


def _inductor_trace(tmp_path: Path, copies: bool = True) -> Path:
    """Two steps (0-100, 100-200, the last dropped) on one rank of a compiled model: Inductor's
    host-side Triton launch op (``cpu_op``, ``"stream": 0``, 10-40) around a driver launch
    (12-14) of a kernel 20-30 on stream 7; a plain kernel 50-60; the step's device copy
    starting at 20; step 2's launch at 110 of a kernel 150-190. With ``copies``, the GPU-side
    copies of both steps, starting at the steps' first kernels (20 and 150)."""
    events = [
        tb.step(1, 0, 100), tb.step(2, 100, 200),
        {"ph": "X", "cat": "cpu_op", "name": "triton_poi_fused_add_0", "pid": 1, "tid": 1,
         "ts": 10, "dur": 30, "args": {"stream": 0, "grid": [1, 1, 1],
                                       "kernel_backend": "triton"}},
        tb.span("cuLaunchKernel", 12, 14, cat="cuda_driver", correlation=1),
        tb.kernel("triton_poi_fused_add_0", 20, 30, 1),
        tb.launch(45, 2), tb.kernel("sm90_xmma_gemm", 50, 60, 2),
        tb.launch(110, 3), tb.kernel("sm90_xmma_gemm", 150, 190, 3)]
    if copies:
        events += [{"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}",
                    "pid": 0, "tid": 7, "ts": ts, "dur": 40} for n, ts in ((1, 20), (2, 150))]
    return tb.write_trace(tmp_path / "rank0.json", events)


def test_a_host_op_naming_a_stream_is_not_device_work(tmp_path):
    """Step 1's device work: kernels 20-30 and 50-60 launched in it: a 40 µs window, 20 µs of
    compute (50%), 20 µs idle. HTA counts the Triton op (10-40) as a compute kernel: a window
    of 50 µs from 10 to 60, busy and computing 10-40 and 50-60: compute 40 of 50 (80%), idle
    10 (20%); ``--hta-compat`` reproduces that."""
    path = _inductor_trace(tmp_path, copies=False)
    [rank] = _ranks(path)[1].values()
    assert rank.breakdown.window_us == pytest.approx(40)
    assert rank.breakdown.compute_pct == pytest.approx(50)
    assert rank.breakdown.idle_pct == pytest.approx(50)
    [compat] = _ranks(path, hta_compat=True)[1].values()
    assert compat.breakdown.window_us == pytest.approx(50)
    assert compat.breakdown.compute_pct == pytest.approx(80)
    assert compat.breakdown.idle_pct == pytest.approx(20)


def test_the_last_step_is_cut_at_its_host_span(tmp_path):
    """The last step's host span starts at 100; its device copy at 150. Cut at the host span
    (the default) the window holds step 1's kernels only (20-60); cut at the latest start of
    either (HTA's rule, ``--hta-compat``) step 2's launch at 110 is inside the window, so its
    kernel 150-190 is analyzed too, and the Triton op (10-40) as HTA counts it: a window of
    180 µs (10 to 190)."""
    path = _inductor_trace(tmp_path)
    [rank] = _ranks(path)[1].values()
    assert rank.breakdown.window_us == pytest.approx(40)
    [compat] = _ranks(path, hta_compat=True)[1].values()
    assert compat.breakdown.window_us == pytest.approx(180)


def test_per_step_rows_tile_the_device_timeline(tmp_path):
    """Three steps; step 2's first kernel starts at 150 although it was launched at 110:
    step 1 is 20-150 on the device (compute 20 of 130 µs), step 2 150-300 (its kernels
    150-190 and 250-300: compute 90 of 150), whatever the host steps' spans; the rows add up
    to the window (20-300)."""
    events = [tb.step(1, 0, 100), tb.step(2, 100, 200), tb.step(3, 200, 300),
              tb.launch(12, 1), tb.kernel("gemm_a", 20, 30, 1),
              tb.launch(45, 2), tb.kernel("gemm_b", 50, 60, 2),
              tb.launch(110, 3), tb.kernel("gemm_c", 150, 190, 3),
              tb.launch(120, 4), tb.kernel("gemm_d", 250, 300, 4),
              tb.launch(210, 5), tb.kernel("gemm_e", 320, 330, 5)]
    path = tb.write_trace(tmp_path / "rank0.json", events)
    [rank] = _ranks(path, per_step=True)[1].values()
    one, two = rank.per_step
    assert one.breakdown.window_us == pytest.approx(130)
    assert one.breakdown.compute_us == pytest.approx(20)
    assert two.breakdown.window_us == pytest.approx(150)
    assert two.breakdown.compute_us == pytest.approx(90)
    assert one.breakdown.window_us + two.breakdown.window_us == pytest.approx(
        rank.breakdown.window_us)


def test_a_chrome_trace_from_another_tool_says_what_was_assumed(tmp_path):
    """CUDA driver calls recorded by an eBPF tool: no schemaVersion, no profiler categories,
    launches but no device records: two notes."""
    path = tmp_path / "ebpf.json"
    path.write_text(json.dumps([
        {"name": "cuLaunchKernel", "ph": "X", "ts": 10, "dur": 5, "pid": 1, "tid": 1},
        {"name": "cuStreamSynchronize", "ph": "X", "ts": 30, "dur": 50, "pid": 1, "tid": 1}]))
    run, _ = _ranks(path)
    assert any(n.startswith("not a PyTorch profiler trace (no schemaVersion") for n in run.notes)
    assert any(n.startswith("device activity not recorded (1 launches") for n in run.notes)


def test_a_kineto_trace_without_device_activity_says_its_figures_are_the_hosts(tmp_path):
    events = [tb.step(1, 0, 100), tb.step(2, 100, 200), tb.span("aten::mm", 5, 90),
              tb.launch(20, 1), tb.launch(120, 2)]
    run, _ = _ranks(tb.write_trace(tmp_path / "rank0.json", events))
    assert any(n.startswith("device activity not recorded (2 launches") for n in run.notes)
    assert not any(n.startswith("not a PyTorch profiler trace") for n in run.notes)
