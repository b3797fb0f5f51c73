"""Metric definitions against hand-computed answers on synthetic traces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_builders import analyze_one, kernel, launch, span, step, write_trace

from ddpprof.analysis import analyze_paths, rank_row, run_row
from ddpprof.metrics import intervals as iv
from ddpprof.trace.classify import KernelClassifier, Kind
from ddpprof.trace.loader import load

analyze_trace = analyze_one


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


def test_covered_by_hand():
    a = iv.union(np.array([0, 10]), np.array([5, 20]))                # [0,5) [10,20)
    got = iv.covered(a, np.array([3, -5, 6, 4, 25, 7]), np.array([12, 0, 9, 30, 30, 7]))
    assert got.tolist() == [2 + 2, 0, 0, 5 - 4 + 10, 0, 0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 30)), max_size=12),
       st.lists(st.tuples(st.integers(-60, 60), st.integers(-5, 40)), min_size=1, max_size=8))
def test_covered_is_the_length_of_each_intersection(spans, windows):
    """Fuzz: the one-pass ``covered`` equals intersecting window by window."""
    a = iv.union(np.array([s for s, _ in spans], dtype=float),
                 np.array([s + d for s, d in spans], dtype=float))
    starts = np.array([s for s, _ in windows], dtype=float)
    ends = np.array([s + d for s, d in windows], dtype=float)
    expected = [iv.length(iv.intersect(a, (np.array([lo]), np.array([hi])))) if hi > lo else 0.0
                for lo, hi in zip(starts, ends, strict=True)]
    np.testing.assert_allclose(iv.covered(a, starts, ends), expected, atol=1e-9)


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
    assert KernelClassifier().kind(name) is kind
    assert KernelClassifier(hta_compat=True).kind(name) is kind


@pytest.mark.parametrize("name", [
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)",
    "void deep_ep::internode_ll::combine<false>(void*, int*)",
    "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)",
    "nvshmemi_transfer_rma_kernel", "void nvshmem_barrier_all_kernel()",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)",
    "void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*)",
    "rcclGenericKernel", "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
    "void mscclpp::allreduce6<__half>(...)",
])
def test_other_communication_libraries_are_communication(name):
    assert KernelClassifier().kind(name) is Kind.COMMUNICATION
    # HTA knows only NCCL's names; --hta-compat counts the rest as it does
    expected = Kind.COMMUNICATION if name.startswith("nccl") else Kind.COMPUTE
    assert KernelClassifier(hta_compat=True).kind(name) is expected


def test_user_patterns_add_communication():
    name = "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>"
    assert KernelClassifier().kind(name) is Kind.COMPUTE   # as HTA and TraceLens count it
    assert KernelClassifier(["multimem_all_reduce"]).kind(name) is Kind.COMMUNICATION


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
    assert b.exposed_comm_us == 38 and b.exposed_comm_pct == 19.0
    stats = result.collectives["all_reduce"]
    assert stats.calls == 2 and stats.total_us == 68
    assert stats.bytes_per_call == (100 * 4 + 50 * 4) / 2
    assert stats.algbw_gbps == pytest.approx(600 / 68e-6 / 1e9)
    assert stats.busbw_gbps == pytest.approx(stats.algbw_gbps * 2 * (2 - 1) / 2)
    row = rank_row(result).to_dict()
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
    one, two = first.breakdown, second.breakdown
    assert (first.step, one.compute_pct, one.non_compute_pct) == ("ProfilerStep#0", 30.0, 40.0)
    assert one.overlap_pct == 0.0
    # step 1: C = 40, non-compute [150,160) = 10, overlap 30 / 40
    assert (two.compute_pct, two.non_compute_pct, two.overlap_pct) == (40.0, 10.0, 75.0)


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


def test_gpu_nanosecond_traces_are_exact_by_default(tmp_path):
    # sgemm [20.4, 60.4): window 170 - 20.4, compute 40 + 10, overlap |[50,60.4)| / 40
    trace = load(write_trace(tmp_path / "rank0.json", gpu_trace_events(fractional=True)))
    b = analyze_trace(trace, drop_last_step=True).breakdown
    assert (b.window_us, b.compute_us) == (pytest.approx(149.6), pytest.approx(50))
    assert b.overlap_pct == pytest.approx(100 * 10.4 / 40)


def test_hta_compat_snaps_nanosecond_traces_inward_like_hta(tmp_path):
    # sgemm [20.4, 60.4) becomes [21, 60): compute 39 + 10, overlap |[50,60)| = 10 still
    trace = load(write_trace(tmp_path / "rank0.json", gpu_trace_events(fractional=True)))
    b = analyze_trace(trace, drop_last_step=True, hta_compat=True).breakdown
    assert (b.window_us, b.compute_us) == (149, 49)
    assert b.overlap_pct == 25.0


def test_hta_compat_keeps_htas_negative_sub_microsecond_groups(tmp_path):
    # HTA rounds a 0.6 µs kernel at [30.2, 30.8) to [31, 30): a group of length -1 that it
    # sums. Isolated, between sgemm [20, 25) and sgemm [40, 50): busy = 5 - 1 + 10 = 14.
    events = [launch(1, 1), launch(2, 2), launch(3, 3),
              kernel("sgemm", 20, 25, 1), kernel("tiny", 30.2, 30.8, 2),
              kernel("sgemm", 40, 50, 3)]
    trace = load(write_trace(tmp_path / "rank0.json", events))
    hta = analyze_trace(trace, hta_compat=True).breakdown
    assert (hta.window_us, hta.compute_us, hta.idle_us) == (30, 14, 16)
    exact = analyze_trace(trace).breakdown
    assert (exact.window_us, exact.compute_us) == (30, pytest.approx(15.6))


def test_run_summary_mean_min_max_and_straggler(tmp_path):
    run = tmp_path / "run"
    write_trace(run / "rank0.json", cpu_trace_events(), rank=0)
    # rank 1 also computes in [45,55), outside W = [40,45) ∪ [60,80): compute 80 of 200
    slow = [*cpu_trace_events(), span("aten::extra", 45, 55)]
    write_trace(run / "rank1.json", slow, rank=1)
    [result] = analyze_paths([run]).runs
    row = run_row(result).to_dict()
    assert row["ranks"] == 2 and row["missing_ranks"] is None
    assert row["compute_pct_min"] == 35.0 and row["compute_pct_max"] == 40.0
    assert row["compute_pct"] == 37.5
    assert row["straggler_rank"] == 1


def test_bus_bandwidth_uses_each_calls_own_group_size():
    from ddpprof.metrics.comm import CollectiveCalls, collective_stats, message_bytes

    # 1 MB all-reduce in a group of 2 (factor 1) and in a group of 8 (factor 1.75), 10 µs each
    calls = CollectiveCalls(kind=["all_reduce", "all_reduce"], start_us=np.array([0., 20.]),
                            end_us=np.array([10., 30.]), size_bytes=[10**6, 10**6],
                            group_size=[2, 8], group=["dp", "world"], sequence=[None, None])
    stats = collective_stats(calls)["all_reduce"]
    assert stats.algbw_gbps == pytest.approx(2e6 / 20e-6 / 1e9)
    assert stats.busbw_gbps == pytest.approx((1e6 * 1 + 1e6 * 1.75) / 20e-6 / 1e9)
    # nccl-tests' size of an all-gather is the gathered buffer
    assert message_bytes("all_gather", 100, None, 8) == 800
    assert message_bytes("all_gather", 100, 800, 8) == 800
    assert message_bytes("reduce_scatter", 800, 100, 8) == 800


def test_group_size_comes_from_the_process_group_when_the_kernel_does_not_say(tmp_path):
    events = [launch(1, 1), kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10, 20, 1,
                                   **{"Collective name": "allreduce", "In msg nelems": 250,
                                      "dtype": "Float", "Process Group Name": "7"})]
    path = tmp_path / "rank0.json"
    path.write_text(__import__("json").dumps({"traceEvents": events, "distributedInfo": {
        "rank": 0, "world_size": 16, "pg_config": [
            {"pg_name": "7", "pg_size": 4, "ranks": [0, 1, 2, 3]}]}}))
    stats = analyze_trace(load(path)).collectives["all_reduce"]
    # 1000 B in 10 µs = 0.1 GB/s, × 2·3/4 for a group of 4 (not 16)
    assert stats.busbw_gbps == pytest.approx(0.1 * 1.5)


def test_gloo_reduce_scatter_is_named_by_the_op_that_issued_it(tmp_path):
    """gloo runs a reduce-scatter as an all-reduce and names its span gloo:all_reduce; the
    training thread's c10d op says what it was."""
    shapes = {"Input Dims": [[1000]], "Input type": ["float"]}
    events = [step(0, 0, 100), step(1, 100, 200),
              span("c10d::_reduce_scatter_base_", 10, 12), span("c10d::_allgather_base_", 50, 52),
              span("gloo:all_reduce", 12, 40, cat="user_annotation", tid=5, **shapes),
              span("gloo:all_gather", 52, 60, cat="user_annotation", tid=6,
                   **{"Input Dims": [[500]], "Input type": ["float"]})]
    result = analyze_trace(load(write_trace(tmp_path / "rank0.json", events)))
    assert set(result.collectives) == {"reduce_scatter", "all_gather"}
    assert result.collectives["reduce_scatter"].bytes_per_call == 4000
    assert result.collectives["all_gather"].bytes_per_call == 500 * 4 * 2   # gathered buffer


def test_fsdp_all_gather_spans_are_waits_not_compute(tmp_path):
    events = [step(0, 0, 100), step(1, 100, 200),
              span("FSDP::pre_forward (0)", 0, 90, cat="user_annotation"),
              span("FSDP::all_gather (0)", 0, 50, cat="user_annotation"),
              span("FSDP::all_gather_copy_out (0)", 50, 60, cat="user_annotation"),
              span("aten::mm", 60, 90)]
    b = analyze_trace(load(write_trace(tmp_path / "rank0.json", events))).breakdown
    # compute: pre_forward minus the all-gather wait = [50, 90); non-compute: the wait
    assert (b.compute_us, b.non_compute_us, b.idle_us) == (40, 50, 10)
