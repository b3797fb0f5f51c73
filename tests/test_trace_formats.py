"""Every trace shape found in the wild is read, and gives the numbers worked out by hand.

Each test writes a small trace of one shape (as the named tool writes it) and runs the whole
``ddpprof analyze`` path on it, as a user would.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from ddpprof.analysis import AnalysisOptions, analyze_paths, run_row


def _x(name: str, ts: float, end: float, cat: str | None = "cpu_op", pid: Any = 1,
       tid: Any = 1, **args: Any) -> dict[str, Any]:
    event = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": end - ts,
             "args": args}
    if cat is not None:
        event["cat"] = cat
    return event


def _analyze(folder: Path, **options):
    analysis = analyze_paths([folder], AnalysisOptions(jobs=1, **options))
    assert not analysis.errors, analysis.errors
    return analysis.runs


def _write(path: Path, document: Any, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(document).encode()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def test_legacy_autograd_profiler_trace(tmp_path):
    """torch.autograd.profiler's own export: a bare array, no categories, pid "CPU functions",
    no ProfilerStep, no rank: one CPU rank, the whole trace as one step."""
    events = [_x("aten::mm", 0.5, 10.5, cat=None, pid="CPU functions", tid=0),
              _x("aten::add", 2.5, 4.5, cat=None, pid="CPU functions", tid=0),
              _x("aten::relu", 20.5, 30.5, cat=None, pid="CPU functions", tid=0)]
    _write(tmp_path / "legacy" / "trace.json", events)
    [run] = _analyze(tmp_path / "legacy")
    [rank] = run.ranks
    # window [0.5, 30.5) = 30; compute [0.5,10.5) ∪ [20.5,30.5) = 20; nothing else
    b = rank.breakdown
    assert (rank.kind, rank.rank, rank.steps) == ("cpu", 0, 1)
    assert (b.window_us, b.compute_us, b.non_compute_us, b.idle_us) == (30, 20, 0, 10)
    assert any("no rank" in n for n in run.notes) and any("no ProfilerStep" in n
                                                          for n in run.notes)


def test_old_kernel_categories_with_stream_in_the_thread_id(tmp_path):
    """Kineto before 2021 (tb_plugin's samples): "Kernel", "Memcpy", "Memset" categories, no
    ``args.stream`` (the stream is the thread id "stream 7"), CPU ops without correlation
    ids (kernels link to them by ``external id``)."""
    events = [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("ProfilerStep#2", 100, 200, cat="user_annotation"),
        _x("aten::mm", 10, 20, **{"External id": 7}),
        _x("aten::copy_", 30, 35, **{"External id": 8}),
        _x("aten::mm", 120, 130, **{"External id": 9}),
        _x("volta_sgemm_128x64_nn", 15, 45, cat="Kernel", pid=0, tid="stream 7",
           device=0, correlation=1001, **{"external id": 7}),
        _x("Memcpy HtoD (Pageable -> Device)", 50, 60, cat="Memcpy", pid=0, tid="stream 7",
           device=0, correlation=1002, **{"external id": 8}),
        _x("Memset (Device)", 60, 62, cat="Memset", pid=0, tid="stream 7", device=0,
           correlation=1003, **{"external id": 8}),
        _x("volta_sgemm_128x64_nn", 125, 150, cat="Kernel", pid=0, tid="stream 7",
           device=0, correlation=1004, **{"external id": 9}),
    ]
    _write(tmp_path / "old" / "worker0.pt.trace.json", {"traceEvents": events})
    [run] = _analyze(tmp_path / "old")
    [rank] = run.ranks
    # the last step dropped: its kernel (launched by aten::mm at 120) goes. Kept: sgemm
    # [15,45), memcpy [50,60), memset [60,62): window 47, compute 30, memory 12, idle 5
    b = rank.breakdown
    assert rank.kind == "gpu" and run.last_step.value == "dropped"
    assert (b.window_us, b.compute_us, b.non_compute_us, b.idle_us) == (47, 30, 12, 5)
    assert any("External id" in n for n in run.notes)


def test_rocm_trace_with_rccl_kernels_and_hip_launches(tmp_path):
    """A ROCm trace: hipLaunchKernel / hipExtModuleLaunchKernel runtime events, RCCL kernels
    that keep NCCL's names, float-ns timestamps."""
    events = [
        _x("hipLaunchKernel", 1.5, 2.5, cat="cuda_runtime", correlation=1),
        _x("hipExtModuleLaunchKernel", 3.5, 4.5, cat="cuda_runtime", correlation=2),
        _x("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32", 10.25, 30.25, cat="kernel", pid=2, tid=0,
           stream=0, correlation=1),
        _x("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", 20.25, 50.25,
           cat="kernel", pid=2, tid=1, stream=1, correlation=2,
           **{"Collective name": "allreduce", "In msg nelems": 1024, "dtype": "BFloat16",
              "Group size": 4}),
    ]
    _write(tmp_path / "rocm" / "rank0.json.gz", {
        "traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 4,
                                                   "backend": "nccl"}}, gz=True)
    [run] = _analyze(tmp_path / "rocm")
    [rank] = run.ranks
    # window [10.25, 50.25) = 40; compute 20; comm 30 of which [20.25,30.25) overlaps
    b = rank.breakdown
    assert (b.window_us, b.compute_us, b.comm_us, b.overlap_us) == (40, 20, 30, 10)
    stats = rank.collectives["all_reduce"]
    assert stats.calls == 1 and stats.bytes_per_call == 2048
    # busbw = 2048 B / 30 µs × 2·3/4
    assert stats.busbw_gbps == pytest.approx(2048 / 30e-6 / 1e9 * 1.5)


def test_triton_torch_compile_and_cuda_graph_kernels(tmp_path):
    """torch.compile's Triton kernels (launched through the driver API, cuLaunchKernel) and a
    CUDA graph whose replay launches several kernels under one correlation id."""
    events = [
        _x("ProfilerStep#0", 0, 100, cat="user_annotation"),
        _x("ProfilerStep#1", 100, 200, cat="user_annotation"),
        _x("## Call CompiledFxGraph abc ##", 1, 50, cat="user_annotation"),
        _x("cuLaunchKernel", 2, 3, cat="cuda_driver", correlation=11),
        _x("cudaGraphLaunch", 5, 6, cat="cuda_runtime", correlation=12),
        _x("cudaGraphLaunch", 150, 151, cat="cuda_runtime", correlation=13),
        _x("triton_poi_fused_add_mul_0", 10, 20, cat="kernel", pid=0, tid=7, stream=7,
           correlation=11),
        _x("triton_red_fused__softmax_1", 25, 35, cat="kernel", pid=0, tid=7, stream=7,
           correlation=12),
        _x("ampere_bf16_s16816gemm", 35, 55, cat="kernel", pid=0, tid=7, stream=7,
           correlation=12),
        _x("ampere_bf16_s16816gemm", 160, 170, cat="kernel", pid=0, tid=7, stream=7,
           correlation=13),
    ]
    _write(tmp_path / "compiled" / "rank0.json", {"traceEvents": events,
                                                  "distributedInfo": {"rank": 0}})
    [run] = _analyze(tmp_path / "compiled", per_step=True)
    [rank] = run.ranks
    # step 0's graph replay brings both of its kernels; step 1's replay is dropped
    b = rank.breakdown
    assert (b.window_us, b.compute_us, b.idle_us) == (45, 40, 5)
    assert [row.step for row in rank.per_step] == ["ProfilerStep#0"]
    assert rank.per_step[0].breakdown.compute_us == 40


def test_kernels_without_a_launch_in_the_trace(tmp_path):
    """Kernels whose correlation id no host event carries (a truncated host side) or that
    have none at all: with no ProfilerStep the whole device timeline counts, as in HTA."""
    events = [
        _x("aten::mm", 0, 5),
        _x("gemm", 10, 30, cat="kernel", pid=0, tid=7, stream=7, correlation=999),
        _x("gemm", 40, 50, cat="kernel", pid=0, tid=7, stream=7),
        _x("ncclDevKernel_AllGather_RING_LL", 25, 45, cat="kernel", pid=0, tid=9, stream=9),
    ]
    _write(tmp_path / "orphans" / "rank0.json", {"traceEvents": events})
    [run] = _analyze(tmp_path / "orphans")
    b = run.ranks[0].breakdown
    # window [10, 50) = 40; compute 20 + 10; comm [25,45): overlap [25,30) + [40,45)
    assert (b.window_us, b.compute_us, b.comm_us, b.overlap_us) == (40, 30, 20, 10)


@pytest.mark.parametrize("name", ["nccl:all_reduce", "gloo:all_reduce"])
@pytest.mark.parametrize("category", ["cpu_op", "user_annotation"])
def test_collectives_recorded_as_annotations_or_ops_are_communication(tmp_path, name,
                                                                      category):
    """kineto issue 640: ``nccl:*`` spans may be ``user_annotation``s, not ``cpu_op``s."""
    events = [_x("aten::mm", 0, 40, tid=1), _x(name, 20, 60, cat=category, tid=2,
                                               **{"Input Dims": [[256]],
                                                  "Input type": ["float"]})]
    _write(tmp_path / "annotated" / "rank0.json", {"traceEvents": events})
    [run] = _analyze(tmp_path / "annotated")
    [rank] = run.ranks
    b = rank.breakdown
    assert (b.window_us, b.compute_us, b.comm_us, b.overlap_us) == (60, 40, 40, 20)
    assert rank.collectives["all_reduce"].calls == 1
    assert rank.collectives["all_reduce"].bytes_per_call == 1024


def test_deep_ep_is_the_only_communication(tmp_path):
    """An expert-parallel trace whose only communication is DeepEP's kernels."""
    events = [
        _x("cudaLaunchKernel", 1, 2, cat="cuda_runtime", correlation=1),
        _x("cudaLaunchKernel", 3, 4, cat="cuda_runtime", correlation=2),
        _x("cudaLaunchKernel", 5, 6, cat="cuda_runtime", correlation=3),
        _x("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)", 10, 12,
           cat="kernel", pid=0, tid=20, stream=20, correlation=1),
        _x("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)", 12, 30,
           cat="kernel", pid=0, tid=20, stream=20, correlation=2),
        _x("fused_moe_kernel", 20, 40, cat="kernel", pid=0, tid=7, stream=7, correlation=3),
    ]
    _write(tmp_path / "ep" / "rank0.json", {"traceEvents": events,
                                            "distributedInfo": {"rank": 0, "world_size": 8}})
    [run] = _analyze(tmp_path / "ep")
    [rank] = run.ranks
    # comm [10,30) = 20, compute [20,40) = 20, overlap [20,30) = 10
    b = rank.breakdown
    assert (b.comm_us, b.compute_us, b.overlap_us) == (20, 20, 10)
    assert set(rank.collectives) == {"ep_dispatch"} and rank.collectives[
        "ep_dispatch"].calls == 2
    assert any("HTA counts as compute" in n for n in run.notes)
    # HTA's classification sees no communication at all
    [compat] = _analyze(tmp_path / "ep", hta_compat=True)
    assert compat.ranks[0].breakdown.comm_us == 0


def test_user_pattern_counts_a_kernel_as_communication(tmp_path):
    events = [_x("cudaLaunchKernel", 1, 2, cat="cuda_runtime", correlation=1),
              _x("void multimem_all_reduce_kernel<bf16>", 10, 20, cat="kernel", pid=0, tid=7,
                 stream=7, correlation=1)]
    _write(tmp_path / "symm" / "rank0.json", {"traceEvents": events})
    [default] = _analyze(tmp_path / "symm")
    assert default.ranks[0].breakdown.compute_us == 10
    assert any("--comm-kernel" in n for n in default.notes)
    [widened] = _analyze(tmp_path / "symm", comm_kernels=("multimem_all_reduce",))
    assert widened.ranks[0].breakdown.comm_us == 10
    assert widened.ranks[0].collectives["all_reduce"].calls == 1


def test_gloo_with_cuda_tensors_counts_host_collectives_beside_kernels(tmp_path):
    """A GPU trace whose collectives run on the host (gloo with CUDA tensors): they count as
    communication, and their overlap with device compute is reported."""
    events = [
        _x("cudaLaunchKernel", 1, 2, cat="cuda_runtime", correlation=1),
        _x("gemm", 10, 50, cat="kernel", pid=0, tid=7, stream=7, correlation=1),
        _x("gloo:all_reduce", 40, 70, cat="user_annotation", tid=3,
           **{"Input Dims": [[1000]], "Input type": ["float"]}),
    ]
    _write(tmp_path / "mixed" / "rank0.json", {
        "traceEvents": events, "distributedInfo": {"rank": 0, "backend": "gloo"}})
    [run] = _analyze(tmp_path / "mixed")
    b = run.ranks[0].breakdown
    # window [10, 70) = 60; busy 60; compute 40; comm 30, overlap [40,50) = 10
    assert (b.window_us, b.compute_us, b.non_compute_us, b.idle_us) == (60, 40, 20, 0)
    assert (b.comm_us, b.overlap_us, b.exposed_comm_us) == (30, 10, 20)
    # with a device backend of its own (nccl), gloo carries CPU-side bookkeeping only
    _write(tmp_path / "nccl" / "rank0.json", {
        "traceEvents": events, "distributedInfo": {"rank": 0, "backend": "nccl"}})
    [nccl] = _analyze(tmp_path / "nccl")
    assert nccl.ranks[0].breakdown.comm_us == 0


def test_nccl_spans_without_kernels_get_a_note(tmp_path):
    events = [
        _x("cudaLaunchKernel", 1, 2, cat="cuda_runtime", correlation=1),
        _x("gemm", 10, 50, cat="kernel", pid=0, tid=7, stream=7, correlation=1),
        _x("nccl:all_reduce", 40, 45, cat="cpu_op", tid=1),
    ]
    _write(tmp_path / "filtered" / "rank0.json", {
        "traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 2,
                                                   "backend": "nccl"}})
    [run] = _analyze(tmp_path / "filtered")
    b = run.ranks[0].breakdown
    assert (b.window_us, b.compute_us, b.comm_us) == (40, 40, 0)   # as HTA computes it
    assert any("nccl:* host spans but no communication kernels" in n for n in run.notes)


def test_a_lone_trace_without_rank_is_rank_0_and_a_folder_of_them_is_split(tmp_path):
    one = [_x("aten::mm", 0, 10)]
    _write(tmp_path / "alone" / "model.json", {"traceEvents": one})
    [run] = _analyze(tmp_path / "alone")
    assert run.name == "alone" and run.ranks[0].rank == 0
    for name in ("bert.json", "qwen.json.gz", "llama.pt.trace.json"):
        _write(tmp_path / "models" / name, {"traceEvents": one})
    runs = _analyze(tmp_path / "models")
    assert sorted(r.name for r in runs) == ["models/bert", "models/llama", "models/qwen"]
    assert all(len(r.ranks) == 1 and r.ranks[0].rank == 0 for r in runs)
    rows = [run_row(r).to_dict() for r in runs]
    assert all(row["ranks"] == 1 for row in rows)


def test_an_unranked_trace_beside_ranked_ones_is_an_error(tmp_path, ddpprof_cli):
    _write(tmp_path / "run" / "rank0.json", {"traceEvents": [_x("aten::mm", 0, 10)],
                                             "distributedInfo": {"rank": 0}})
    _write(tmp_path / "run" / "extra.json", {"traceEvents": [_x("aten::mm", 0, 10)]})
    result = ddpprof_cli("analyze", str(tmp_path / "run"))
    assert result.returncode == 2
    assert f"{tmp_path / 'run' / 'extra.json'}: no rank" in result.stderr


def test_per_step_without_profiler_steps_is_one_row(tmp_path, ddpprof_cli):
    _write(tmp_path / "flat" / "rank0.json", {"traceEvents": [_x("aten::mm", 0, 10),
                                                               _x("aten::mm", 20, 30)]})
    result = ddpprof_cli("analyze", "--per-step", str(tmp_path / "flat"))
    assert result.returncode == 0, result.stderr
    step_lines = [line for line in result.stdout.splitlines() if "whole trace" in line]
    assert len(step_lines) == 1


def test_gzip_bomb_stops_at_the_limit(tmp_path, ddpprof_cli):
    bomb = tmp_path / "bomb" / "rank0.json.gz"
    bomb.parent.mkdir()
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (64 * 1024 * 1024) + b"]}"))
    result = ddpprof_cli("analyze", str(bomb.parent),
                         env={"DDPPROF_MAX_TRACE_BYTES": str(16 * 1024 * 1024)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{bomb}: inflates to more than" in result.stderr


def test_claimed_world_of_a_billion_ranks(tmp_path, ddpprof_cli):
    _write(tmp_path / "huge" / "rank3.json", {
        "traceEvents": [_x("aten::mm", 0, 10)],
        "distributedInfo": {"rank": 3, "world_size": 10**9}})
    result = ddpprof_cli("analyze", str(tmp_path / "huge"))
    assert result.returncode == 0, result.stderr
    assert "missing ranks 0-2, 4-999999999" in result.stderr


@pytest.mark.parametrize("gz", [False, True])
def test_a_utf8_byte_order_mark_is_skipped(tmp_path, gz):
    """A trace re-saved by a Windows editor or PowerShell starts with a UTF-8 BOM: the same
    numbers as without it."""
    document = {"traceEvents": [_x("aten::mm", 0, 10), _x("aten::mm", 20, 30)],
                "distributedInfo": {"rank": 0, "world_size": 1}}
    raw = b"\xef\xbb\xbf" + json.dumps(document).encode()
    path = tmp_path / "bom" / ("rank0.json.gz" if gz else "rank0.json")
    path.parent.mkdir()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    [run] = _analyze(tmp_path / "bom")
    [rank] = run.ranks
    # CPU, no step: window [0, 30) = 30, compute [0,10) ∪ [20,30) = 20, idle 10
    b = rank.breakdown
    assert (rank.kind, b.window_us, b.compute_us, b.idle_us) == ("cpu", 30, 20, 10)


def test_bare_non_finite_numbers_read_as_absent(tmp_path):
    """Kineto wrote ``"memory bandwidth (GB/s)": inf`` for a zero-length memcpy (kineto issue
    105) and Python's json writes ``NaN``: not JSON, but only those values are lost. An event
    whose ``dur`` is NaN has no duration and is skipped with the usual note."""
    text = ('{"traceEvents": ['
            '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, '
            '"dur": 10, "args": {"memory bandwidth (GB/s)": inf, "x": [-Infinity, nan]}},\n'
            '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, '
            '"dur": 10, "args": {}},\n'
            '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 12, '
            '"dur": NaN, "args": {}}], '
            '"distributedInfo": {"rank": 0, "world_size": 1}}')
    path = tmp_path / "inf" / "rank0.json"
    path.parent.mkdir()
    path.write_text(text)
    [run] = _analyze(tmp_path / "inf")
    [rank] = run.ranks
    # the NaN-long aten::add is dropped: window [0, 30) = 30, compute [0,10) ∪ [20,30) = 20
    b = rank.breakdown
    assert (rank.kind, b.window_us, b.compute_us, b.idle_us) == ("cpu", 30, 20, 10)
    assert any("1 complete events without a start or a duration" in n for n in run.notes)


def test_json_that_is_not_a_trace_beside_traces_is_skipped(tmp_path, ddpprof_cli):
    """HTA's test data keeps an execution trace (``*_et.json.gz``, ``"nodes"``, no
    ``traceEvents``) beside its Kineto trace: the run is the Kineto trace alone, with a note.
    A folder of such files alone is still refused, naming one."""
    _write(tmp_path / "both" / "simple_add_trace.json.gz",
           {"traceEvents": [_x("aten::mm", 0, 10), _x("aten::mm", 20, 30)]}, gz=True)
    _write(tmp_path / "both" / "simple_add_et.json.gz",
           {"schema": "1.0.2-chakra.0.0.4", "nodes": [{"id": 1, "name": "x"}]}, gz=True)
    [run] = _analyze(tmp_path / "both")
    [rank] = run.ranks
    # the one trace, rank 0: window [0, 30) = 30, compute [0,10) ∪ [20,30) = 20
    assert (rank.rank, rank.breakdown.window_us, rank.breakdown.compute_us) == (0, 30, 20)
    assert ("skipped 1 JSON file(s) that are not traces (no traceEvents): "
            "simple_add_et.json.gz") in run.notes

    _write(tmp_path / "alone" / "et.json", {"nodes": []})
    result = ddpprof_cli("analyze", str(tmp_path / "alone"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{tmp_path / 'alone' / 'et.json'}: not a trace (no traceEvents array)" in (
        result.stderr)


def test_a_trace_beside_a_subfolder_of_other_json_is_analyzed(tmp_path, ddpprof_cli):
    """TraceLens keeps its output beside the trace it analyzed (``X.json`` and
    ``analysis_output_ref/plot_data.json``): the trace is the run, the subfolder of plot data
    is skipped with a note. JSON kept beside run folders (ddpprof's own ``analysis.json``)
    leaves no run and no note; a trace kept there is one more run."""
    folder = tmp_path / "bert_analysis_output"
    _write(folder / "bert.json", {"traceEvents": [_x("aten::mm", 0, 10), _x("aten::mm", 20, 40)]})
    _write(folder / "analysis_output_ref" / "plot_data.json", {"series": [1, 2, 3]})
    result = ddpprof_cli("analyze", str(folder), "--json", str(tmp_path / "out.json"))
    assert result.returncode == 0, result.stderr
    [run] = json.loads((tmp_path / "out.json").read_text())["runs"]
    # window [0, 40) = 40 µs, compute [0,10) ∪ [20,40) = 30 µs: 75% compute, 25% idle
    assert (run["run"], run["compute_pct"], run["idle_pct"]) == ("bert_analysis_output", 75.0,
                                                                 25.0)
    assert "analysis_output_ref: skipped: no trace among its JSON files" in result.stderr

    runs = tmp_path / "runs"
    for name in ("a", "b"):
        _write(runs / name / "rank0.json", {"traceEvents": [_x("aten::mm", 0, 10)]})
    _write(runs / "analysis.json", {"schema": "ddpprof.analyze", "runs": []})
    result = ddpprof_cli("analyze", str(runs), "--json", str(tmp_path / "runs.json"))
    assert result.returncode == 0, result.stderr
    assert [r["run"] for r in json.loads((tmp_path / "runs.json").read_text())["runs"]] == [
        "a", "b"]
    assert "skipped" not in result.stderr

    _write(runs / "stray.json", {"traceEvents": [_x("aten::mm", 0, 10)]})
    result = ddpprof_cli("analyze", str(runs), "--json", str(tmp_path / "runs.json"))
    assert result.returncode == 0, result.stderr
    assert [r["run"] for r in json.loads((tmp_path / "runs.json").read_text())["runs"]] == [
        "a", "b", "runs"]
