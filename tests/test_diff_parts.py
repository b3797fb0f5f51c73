"""The exact partition of steps into parts (``metrics.partition``, ``analysis.parts``) and the
run profiles built on it: worked out by hand on synthetic traces, and fuzzed."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_builders import (
    gloo_reduce,
    grad,
    kernel,
    launch,
    span,
    step,
    synchronized_steps,
    write_trace,
)

from ddpprof.analysis import analyze_paths
from ddpprof.analysis.parts import PartKey, innermost_pieces
from ddpprof.analysis.profile import profile_json, profile_of_row, run_profile
from ddpprof.metrics.partition import density_integral, partition
from ddpprof.trace import classify


def test_partition_by_hand():
    # windows [0,10) and [10,20); A [2,8) and B [5,12) compute (class 0), C [6,15) comm (1)
    shares = partition(np.array([0.0, 10.0]), np.array([10.0, 20.0]),
                       np.array([2.0, 5.0, 6.0]), np.array([8.0, 12.0, 15.0]),
                       np.array([0, 0, 1]), densities=(1,))
    got = {(int(p), int(w)): s for p, w, s in zip(shares.piece, shares.window, shares.share,
                                                  strict=True)}
    # window 0: A alone [2,5) 3, A and B share [5,8) 1.5 each, B alone [8,10) 2, C hidden
    # under compute; idle [0,2). Window 1: B [10,12) 2, C [12,15) 3, idle [15,20) 5.
    assert got == {(0, 0): 4.5, (1, 0): 3.5, (1, 1): 2.0, (2, 0): 0.0, (2, 1): 3.0}
    assert shares.idle.tolist() == [2.0, 5.0]
    lo, hi, density = shares.density[1]
    assert (lo.tolist(), hi.tolist(), density.tolist()) == ([12.0], [15.0], [1.0])
    # C's share of [6, 13): 1 µs (12-13), the rest hidden
    assert density_integral(shares.density[1], np.array([6.0]), np.array([13.0])) == [1.0]


def test_windows_with_nothing_in_them_are_idle_floats():
    # no piece (or only empty ones) in the windows: all idle, in float like any share
    for start, end in ((np.empty(0), np.empty(0)), (np.array([0.0, 1.0]), np.array([0.0, 1.0]))):
        shares = partition(np.array([0.0, 1.0]), np.array([1.0, 3.0]), start, end,
                           np.zeros(start.size, dtype=np.int64))
        assert shares.idle.dtype == np.float64 and shares.idle.tolist() == [1.0, 2.0]
        by_window = shares.by_window(np.zeros(start.size, dtype=np.int64), 1, 2)
        assert by_window.dtype == np.float64 and by_window.tolist() == [[0.0, 0.0]]


intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(1, 60), st.integers(0, 3)),
                     min_size=0, max_size=30)


@settings(max_examples=300, deadline=None)
@given(pieces=intervals, cuts=st.lists(st.integers(0, 260), min_size=2, max_size=6,
                                       unique=True))
def test_every_window_is_shared_out_exactly(pieces, cuts):
    bounds = np.array(sorted(cuts), dtype=float)
    starts = np.array([a for a, _, _ in pieces], dtype=float)
    ends = starts + np.array([d for _, d, _ in pieces], dtype=float)
    klass = np.array([k for _, _, k in pieces], dtype=np.int64)
    shares = partition(bounds[:-1], bounds[1:], starts, ends, klass, densities=(1,))
    per_window = np.bincount(shares.window, weights=shares.share, minlength=bounds.size - 1)
    # parts add up to each window, nothing is negative, no piece gets more than its length
    assert np.allclose(per_window + shares.idle, np.diff(bounds))
    assert (shares.share >= -1e-9).all() and (shares.idle >= -1e-9).all()
    per_piece = np.bincount(shares.piece, weights=shares.share, minlength=starts.size)
    assert (per_piece <= ends - starts + 1e-9).all()
    # a class-1 piece's share is its density's integral over its extent (inside the windows)
    for k in np.flatnonzero(klass == 1):
        lo, hi = max(starts[k], bounds[0]), min(ends[k], bounds[-1])
        if hi > lo:
            assert density_integral(shares.density[1], np.array([lo]), np.array([hi]))[0] \
                == pytest.approx(per_piece[k], abs=1e-9)


def test_innermost_pieces_split_nested_spans():
    # thread 1: P [0,10) holds C [2,5) which holds G [3,4); P also holds D [6,12) (cut at 10)
    start = np.array([0.0, 2.0, 3.0, 6.0])
    end = np.array([10.0, 5.0, 4.0, 12.0])
    lo, hi, span_of, flags = innermost_pieces(start, end, np.ones(4, dtype=np.int64),
                                              np.array([1, 0, 2, 0]))
    pieces = sorted(zip(lo.tolist(), hi.tolist(), span_of.tolist(), flags.tolist(),
                        strict=True))
    assert pieces == [(0, 2, 0, 1), (2, 3, 1, 1), (3, 4, 2, 3), (4, 5, 1, 1), (5, 6, 0, 1),
                      (6, 10, 3, 1)]


def test_work_categories():
    category = classify.work_category
    assert category("aten::mm") == category("sm90_xmma_gemm_bf16bf16_tn") == "gemm"
    assert category("void pytorch_flash::flash_fwd_kernel<...>") == "attention"
    assert category("sm80_xmma_fprop_implicit_gemm_f32") == "conv"
    assert category("void fbgemm_gpu::split_embedding_codegen_forward") == "embedding"
    assert category("void at::native::vectorized_layer_norm_kernel<float>") == "norm"
    assert category("aten::relu") == category("aten::add_") == "elementwise"
    assert category("void at::native::multi_tensor_apply_kernel<...>") == "optimizer"
    assert category("aten::copy_") == "copy" and category("aten::view") == "other"


def _parts(run) -> dict[str, float]:
    profile = run_profile(run)
    return {k.label: round(v, 9) for k, v in zip(profile.parts, profile.part_ms, strict=True)}


def test_cpu_step_by_hand(tmp_path):
    # two ranks, mm 40 and 60 µs: rank 0 arrives at 43, rank 1 at 63; the all-reduce ends at
    # 93; the step is 63 + 30 + 16 = 109 µs
    folder, length = synchronized_steps(tmp_path / "run", [40, 60], [0, 0])
    [run] = analyze_paths([folder]).runs
    assert length == 109
    profile = run_profile(run)
    # per rank: mm; add_ 10; c10d 2 + wait alone 1 + 1; gloo after the last arrival 30; rank 0
    # waits 20 for rank 1; idle 5 at the end
    assert profile.rank_step_ms == [0.109, 0.109]
    by_rank = {k.label: [round(v * 1e3, 6) for v in row]
               for k, row in zip(profile.parts, profile.rank_part_ms, strict=True)}
    assert by_rank == {"compute: gemm": [40, 60], "compute: elementwise": [10, 10],
                       "all_reduce": [30, 30], "waiting for rank 1": [20, 0],
                       "host: communication calls": [4, 4], "idle: nothing traced": [5, 5]}
    assert sum(profile.part_ms) == pytest.approx(profile.step_ms)
    # the breakdown's compute is the partition's compute
    for rank in run.ranks:
        parts = rank.parts
        compute = sum(parts.part_us[k].sum() for k, key in enumerate(parts.parts)
                      if key.group == "compute")
        assert compute == pytest.approx(rank.breakdown.compute_us)
        assert parts.step_us.sum() == pytest.approx(rank.breakdown.window_us)


def test_work_inside_a_backend_collective_is_communication(tmp_path):
    """gloo runs ops of its own (a copy) inside its collective's span on its worker thread:
    they are communication, as the breakdown counts them, not compute. Each 100 µs step: mm
    [0,40), c10d [40,42), wait [42,91) around gloo's all-reduce [43,90) on thread 9 with a
    copy [60,70) inside it, add_ [91,96), nothing [96,100)."""
    events = []
    for s in range(3):
        o = 100 * s
        events += [step(s, o, o + 100), span("aten::mm", o, o + 40),
                   span("c10d::allreduce_", o + 40, o + 42),
                   span("ddpprof::wait", o + 42, o + 91, cat="user_annotation"),
                   gloo_reduce(o + 43, o + 90), span("aten::copy_", o + 60, o + 70, tid=9),
                   span("aten::add_", o + 91, o + 96)]
    write_trace(tmp_path / "run" / "rank0.json", events, world_size=1)
    [run] = analyze_paths([tmp_path / "run"]).runs
    # host communication calls: [40,43) and [90,91); the copy is inside the all-reduce's 47
    assert _parts(run) == {"compute: gemm": 0.04, "compute: elementwise": 0.005,
                           "all_reduce": 0.047, "host: communication calls": 0.004,
                           "idle: nothing traced": 0.004}
    [rank] = run.ranks
    assert rank.breakdown.compute_us == 2 * 45


def test_gpu_step_by_hand(tmp_path):
    """GPU-bound: the host launches three kernels (at +1, +4, +7) and synchronises from +10
    until the device is done; the device runs a GEMM from +20 for 100 µs, an elementwise
    kernel for 50 and an NCCL all-reduce for 80 on another stream; 5 µs after it the step
    ends, and the next starts."""
    events, start = [], 0.0
    for s in range(3):
        gemm, elementwise, nccl = start + 20, start + 120, start + 170
        done = nccl + 80
        events += [step(s, start, done + 5),
                   launch(start + 1, 3 * s + 1), launch(start + 4, 3 * s + 2),
                   launch(start + 7, 3 * s + 3),
                   span("cudaDeviceSynchronize", start + 10, done + 5, cat="cuda_runtime"),
                   kernel("sm90_xmma_gemm_f32", gemm, gemm + 100, 3 * s + 1),
                   kernel("void at::native::vectorized_elementwise_kernel<4>", elementwise,
                          elementwise + 50, 3 * s + 2),
                   kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", nccl, done, 3 * s + 3,
                          stream=8)]
        start = done + 5
    write_trace(tmp_path / "gpu" / "rank0.json", events, world_size=1, backend="nccl")
    [run] = analyze_paths([tmp_path / "gpu"]).runs
    [rank] = run.ranks
    # windows: step 0 from its GEMM to step 1's (255 µs); step 1 from its GEMM to the last
    # analyzed event (230 µs): the analyzed window over 2 steps
    assert rank.parts.step_us.tolist() == [255, 230]
    assert rank.parts.step_us.sum() == rank.breakdown.window_us
    parts = dict(zip(rank.parts.parts, rank.parts.part_us.sum(axis=1).tolist(), strict=True))
    # between the steps: device idle [250,275): host in the sync until 255 (5), launches
    # 2+2+2 and the start of the next sync 10 (host-bound 21), and four 1 µs gaps (idle 4)
    assert parts == {PartKey("idle", "nothing traced"): 4, PartKey("compute", "gemm"): 200,
                     PartKey("compute", "elementwise"): 100,
                     PartKey("communication", "all_reduce"): 160,
                     PartKey("device", "memory"): 0, PartKey("device", "sync and other"): 0,
                     PartKey("data loading"): 0, PartKey("host-bound"): 21}


def test_optimizer_and_data_loading_are_their_own_parts(tmp_path):
    events = []
    for s in range(3):
        o = 100 * s
        events += [step(s, o, o + 100),
                   span("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", o,
                        o + 20, cat="user_annotation"),
                   span("aten::index", o + 5, o + 15),
                   span("aten::mm", o + 20, o + 60),
                   span("Optimizer.step#AdamW.step", o + 60, o + 90, cat="user_annotation"),
                   span("aten::mul_", o + 65, o + 85)]
    write_trace(tmp_path / "run" / "rank0.json", events, world_size=1)
    [run] = analyze_paths([tmp_path / "run"]).runs
    # the data loader's op is data loading, whatever its name; the optimizer's own span and
    # its ops are the optimizer; 10 µs at the end of each step are idle
    assert _parts(run) == {"compute: gemm": 0.04, "compute: optimizer": 0.03,
                           "data loading": 0.02, "idle: nothing traced": 0.01}


def test_profile_survives_the_analyze_document(tmp_path):
    folder, _ = synchronized_steps(tmp_path / "run", [40, 60], [0, 0])
    [run] = analyze_paths([folder]).runs
    profile = run_profile(run)
    back = profile_of_row({"run": "run", "profile": profile_json(profile)}, "doc")
    # every item listed (few enough): nothing was left out
    assert back == msgspec.structs.replace(profile, items_left_out_ms=[0.0] * len(profile.parts))


def test_buckets_are_profiled(tmp_path):
    events = [step(s, 1000 * s, 1000 * (s + 1)) for s in range(3)]
    for s in range(3):
        o = 1000 * s
        events += [grad(o + 190, o + 200, 1000), grad(o + 290, o + 300, 1000),
                   gloo_reduce(o + 205, o + 260), gloo_reduce(o + 305, o + 360)]
    write_trace(tmp_path / "run" / "rank0.json", events, world_size=1)
    [run] = analyze_paths([tmp_path / "run"]).runs
    buckets = run_profile(run).buckets
    # launched 5 and 105 µs after the first gradient was ready (at 200)
    assert [(b.index, b.size_bytes, round(b.launch_in_backward_ms, 6)) for b in buckets] == [
        (0, 4000, 0.005), (1, 4000, 0.105)]


FIXTURES = Path(__file__).parent / "fixtures"
REAL = sorted({p.parent for p in FIXTURES.rglob("*.json*")
               if p.name.endswith(".json.gz") or p.name.startswith(("rank", "worker"))})


@pytest.mark.parametrize("folder", REAL, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_real_traces_are_cut_into_parts_that_add_up(folder):
    """On every real trace (GPU and CPU, with and without ProfilerSteps): each rank's parts
    add up to its analyzed window step by step, its compute parts to the breakdown's compute,
    and the run's parts to its step."""
    analysis = analyze_paths([folder])
    assert analysis.runs, analysis.errors
    for run in analysis.runs:
        for rank in run.ranks:
            parts = rank.parts
            assert np.allclose(parts.part_us.sum(axis=0), parts.step_us)
            assert parts.step_us.sum() == pytest.approx(rank.breakdown.window_us)
            compute = sum(parts.part_us[k].sum() for k, key in enumerate(parts.parts)
                          if key.group in ("compute", "data loading"))
            if rank.kind == "gpu":   # the device's compute; data loading is host time
                compute = sum(parts.part_us[k].sum() for k, key in enumerate(parts.parts)
                              if key.group == "compute")
            assert compute == pytest.approx(rank.breakdown.compute_us, rel=1e-9, abs=1e-6)
            assert (parts.part_us >= -1e-6).all()
        profile = run_profile(run)
        assert sum(profile.part_ms) == pytest.approx(profile.step_ms)
