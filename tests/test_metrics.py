"""Metric definitions against hand-computed answers on synthetic traces."""

from __future__ import annotations

import numpy as np
import pytest
from trace_builders import kernel, launch, span, step, write_trace

from ddpprof.analysis import analyze_paths, analyze_trace, rank_row, run_row
from ddpprof.metrics import intervals as iv
from ddpprof.trace.classify import Kind, kernel_kind
from ddpprof.trace.loader import load


def test_union_merges_overlapping_nested_and_touching_intervals():
    merged = iv.union(np.array([5, 0, 1, 10, 20, 15]), np.array([6, 2, 3, 15, 20, 18]))
    assert merged[0].tolist() == [0, 5, 10] and merged[1].tolist() == [3, 6, 18]
    assert iv.length(merged) == 3 + 1 + 8  # [20, 20) is empty


def test_intersect_and_subtract():
    a = iv.union(np.array([0, 10]), np.array([5, 20]))
    b = iv.union(np.array([3, 12]), np.array([11, 14]))
    assert iv.length(iv.intersect(a, b)) == 2 + 1 + 2     # [3,5) [10,11) [12,14)
    assert iv.length(iv.subtract(a, b)) == 3 + 1 + 6      # [0,3) [11,12) [14,20)
    assert iv.length(iv.subtract(a, iv.EMPTY)) == 15
    assert iv.length(iv.intersect(a, iv.EMPTY)) == 0


@pytest.mark.parametrize(("name", "kind"), [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     Kind.COMMUNICATION),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     Kind.COMMUNICATION),
    ("Memcpy HtoD (Pageable -> Device)", Kind.MEMORY),
    ("Memset (Device)", Kind.MEMORY),
    ("dmaCopy", Kind.MEMORY),
    ("cudaStreamSync kernel", Kind.OTHER),
    ("void at::native::vectorized_elementwise_kernel<4>", Kind.COMPUTE),
    ("sm90_xmma_gemm_f32f32_tf32f32", Kind.COMPUTE),
])
def test_kernel_kinds_follow_hta(name, kind):
    assert kernel_kind(name) is kind


def cpu_trace_events(with_comm: bool = True) -> list[dict]:
    """Main thread 1, gloo worker threads 2 and 3; steps 0 and 1 analyzed, step 2 dropped."""
    events = [
        step(0, 0, 100), step(1, 100, 200), step(2, 200, 300),
        span("aten::mm", 10, 40), span("aten::add", 20, 30),        # nested in mm
        span("c10d::allreduce_", 40, 45),                           # a wait/comm span W
        span("ddpprof::wait", 60, 80, cat="user_annotation"),       # W
        span("aten::relu", 110, 150),
        span("aten::late", 250, 290),                               # in the dropped step
    ]
    if with_comm:
        events += [
            span("gloo:all_reduce", 42, 70, cat="user_annotation", tid=2,
                 **{"Input Dims": [[100]], "Input type": ["float"]}),
            span("gloo:all_reduce", 120, 160, cat="user_annotation", tid=3,
                 **{"Input Dims": [[50]], "Input type": ["float"]}),
            span("gloo:all_reduce", 260, 280, cat="user_annotation", tid=2,
                 **{"Input Dims": [[50]], "Input type": ["float"]}),
        ]
    return events


def test_cpu_breakdown_by_hand(tmp_path):
    # window = [0,200) = 200
    # C = [10,40) ∪ [110,150) minus W = 30 + 40 = 70
    # K = [42,70) ∪ [120,160) = 28 + 40 = 68;  W = [40,45) ∪ [60,80)
    # (K ∪ W) \ C = [40,80) + [150,160) = 40 + 10 = 50 -> non_compute
    # idle = 200 - 70 - 50 = 80;  overlap = |[120,150)| / 68 = 30 / 68
    # exposed = |K \ C| = 28 + 10 = 38
    trace = load(write_trace(tmp_path / "rank0.json", cpu_trace_events()))
    result = analyze_trace(trace, drop_last_step=True)
    b = result.breakdown
    assert result.kind == "cpu" and result.steps == 2 and result.total_steps == 3
    assert (b.window_us, b.compute_us, b.non_compute_us, b.idle_us) == (200, 70, 50, 80)
    assert (b.compute_pct, b.non_compute_pct, b.idle_pct) == (35.0, 25.0, 40.0)
    assert b.overlap_pct == pytest.approx(100 * 30 / 68)
    assert b.exposed_comm_us == 38 and b.comm_overhead_pct == 19.0
    stats = result.collectives["all_reduce"]
    assert stats.calls == 2 and stats.total_us == 68
    assert stats.bytes_per_call == (100 * 4 + 50 * 4) / 2
    assert stats.algbw_gbps == pytest.approx(600 / 68e-6 / 1e9)
    assert stats.busbw_gbps == pytest.approx(stats.algbw_gbps * 2 * (2 - 1) / 2)
    row = rank_row(result)
    assert row["all_reduce_calls_per_step"] == 1.0
    assert row["all_reduce_ms_per_step"] == pytest.approx(0.034)
    assert row["exposed_comm_ms_per_step"] == pytest.approx(0.019)


def test_cpu_breakdown_keeping_the_last_step(tmp_path):
    # window [0,300); C adds [250,290) = 40; K adds [260,280) wholly inside C
    trace = load(write_trace(tmp_path / "rank0.json", cpu_trace_events()))
    b = analyze_trace(trace, drop_last_step=False).breakdown
    assert (b.window_us, b.compute_us, b.non_compute_us) == (300, 110, 50)
    assert b.overlap_pct == pytest.approx(100 * (30 + 20) / (68 + 20))


def test_cpu_without_communication_has_no_overlap(tmp_path):
    trace = load(write_trace(tmp_path / "rank0.json", cpu_trace_events(with_comm=False),
                             world_size=1))
    result = analyze_trace(trace, drop_last_step=True)
    b = result.breakdown
    assert b.overlap_pct is None and b.comm_us == 0
    # (K ∪ W) \ C = W = [40,45) ∪ [60,80) = 25
    assert (b.compute_us, b.non_compute_us, b.idle_us) == (70, 25, 105)
    assert result.collectives == {}


def test_cpu_per_step(tmp_path):
    trace = load(write_trace(tmp_path / "rank0.json", cpu_trace_events()))
    first, second = analyze_trace(trace, drop_last_step=True, per_step=True).per_step
    # step 0: C = 30, (K ∪ W) \ C = [40,80) = 40, K = 28 with no overlap
    assert (first["step"], first["compute_pct"], first["non_compute_pct"]) == (
        "ProfilerStep#0", 30.0, 40.0)
    assert first["overlap_pct"] == 0.0
    # step 1: C = 40, non-compute [150,160) = 10, overlap 30 / 40
    assert (second["compute_pct"], second["non_compute_pct"], second["overlap_pct"]) == (
        40.0, 10.0, 75.0)


def gpu_trace_events(fractional: bool = False) -> list[dict]:
    """Kernels launched in step 0 (kept) and step 1 (the last: dropped by default)."""
    nudge = 0.4 if fractional else 0.0
    return [
        step(0, 0, 100), step(1, 100, 200),
        launch(10, 1), launch(15, 2), launch(20, 3), launch(90, 5), launch(120, 4),
        kernel("sgemm", 20 + nudge, 60 + nudge, 1),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50, 90, 2, stream=20,
               **{"Collective name": "allreduce", "In msg nelems": 1000, "dtype": "Float",
                  "Group size": 2}),
        kernel("Memcpy HtoD (Pageable -> Device)", 95, 100, 3, cat="gpu_memcpy"),
        kernel("elementwise", 160, 170, 5),   # launched in step 0, runs after it: kept
        kernel("sgemm", 130, 150, 4),         # launched in the last step: dropped
    ]


def test_gpu_breakdown_by_hand(tmp_path):
    # kept kernels: sgemm [20,60), nccl [50,90), memcpy [95,100), elementwise [160,170)
    # window = 170 - 20 = 150; |⋃ all| = 70 + 5 + 10 = 85 -> idle 65
    # compute = 40 + 10 = 50; non_compute = 85 - 50 = 35
    # overlap = |[50,60)| / 40 = 25 %; exposed comm = 30
    trace = load(write_trace(tmp_path / "rank0.json", gpu_trace_events(), backend="nccl"))
    result = analyze_trace(trace, drop_last_step=True)
    b = result.breakdown
    assert result.kind == "gpu" and result.steps == 1
    assert (b.window_us, b.idle_us, b.compute_us, b.non_compute_us) == (150, 65, 50, 35)
    assert b.overlap_pct == 25.0 and b.exposed_comm_us == 30
    stats = result.collectives["all_reduce"]
    assert (stats.calls, stats.total_us, stats.bytes_per_call) == (1, 40, 4000)
    assert stats.busbw_gbps == pytest.approx(4000 / 40e-6 / 1e9)


def test_gpu_keeping_the_last_step(tmp_path):
    # sgemm [130,150) joins: |⋃ all| = 105, compute = 70, window unchanged
    trace = load(write_trace(tmp_path / "rank0.json", gpu_trace_events(), backend="nccl"))
    b = analyze_trace(trace, drop_last_step=False).breakdown
    assert (b.window_us, b.idle_us, b.compute_us, b.non_compute_us) == (150, 45, 70, 35)


def test_gpu_nanosecond_traces_are_snapped_inward_like_hta(tmp_path):
    # sgemm [20.4, 60.4) becomes [21, 60): compute 39 + 10, overlap |[50,60)| = 10 still
    trace = load(write_trace(tmp_path / "rank0.json", gpu_trace_events(fractional=True)))
    b = analyze_trace(trace, drop_last_step=True).breakdown
    assert (b.window_us, b.compute_us) == (149, 49)
    assert b.overlap_pct == 25.0


def test_run_summary_mean_min_max_and_straggler(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "rank0.json", cpu_trace_events(), rank=0)
    # rank 1 also computes in [45,55), outside W = [40,45) ∪ [60,80): compute 80 of 200
    slow = [*cpu_trace_events(), span("aten::extra", 45, 55)]
    write_trace(run / "rank1.json", slow, rank=1)
    [result] = analyze_paths([run]).runs
    row = run_row(result)
    assert row["ranks"] == 2 and row["missing_ranks"] == []
    assert row["compute_pct_min"] == 35.0 and row["compute_pct_max"] == 40.0
    assert row["compute_pct"] == 37.5
    assert row["straggler_rank"] == 1
