"""The step graph, its critical path and its replay on every real GPU fixture (NCCL, RCCL, the
8-rank all-to-all job, PyTorch 2.10 compiled jobs): a path for every analyzed step, no
refusal, the split adding up, idle that names its cause, and one step of each checked by hand
against the trace's own JSON (read here, not through ddpprof)."""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path

import pytest

from ddpprof.graph.build import join_steps, rank_steps
from ddpprof.graph.model import EdgeKind, NodeKind, StepGraph
from ddpprof.graph.path import (
    BETWEEN_KERNELS,
    COMMUNICATION,
    HOST,
    IDLE,
    INHERITED,
    NOTHING_RECORDED,
    WAITING,
    CriticalPath,
    critical_path,
    period_us,
    replay,
)
from ddpprof.trace.loader import load

FIXTURES = Path(__file__).parent / "fixtures"
HOOK = ("real-traces/modded-nanogpt-hook-pair/hook/"
        "modded-nanogpt-hook-gpu-rank-00-chrome-trace.json.gz")
GPU_FIXTURES = ["hta-gpu/nccl-data", "hta-gpu/two-rank", "real-traces/param-dlrm-8rank-alltoall",
                "real-traces/tracelens-b200-eager-ws8", "real-traces/tbplugin-micro-nccl",
                "real-traces/tracelens-mi300-ddp-resnet", HOOK,
                "real-traces/modded-nanogpt-8rank-compile"]
STEP = re.compile(r"^ProfilerStep#\d+$")


def _files(name: str) -> list[Path]:
    path = FIXTURES / name
    return sorted(path.glob("*.json*")) if path.is_dir() else [path]


@functools.cache
def graphs(name: str) -> tuple[list[StepGraph], list[str]]:
    """Every analyzed step's graph (the 8-rank job's middle step only: it has 90,000 nodes a
    step)."""
    at_most = 1 if name.endswith("8rank-compile") else None
    traces = {}
    for position, path in enumerate(_files(name)):
        trace = load(path)
        traces[trace.rank if trace.rank is not None else position] = trace
    return join_steps({rank: rank_steps(trace, rank, at_most=at_most)
                       for rank, trace in traces.items()})


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]


def _host_steps(path: Path) -> list[dict]:
    return sorted((e for e in _events(path) if e.get("cat") == "user_annotation"
                   and STEP.match(e["name"])), key=lambda e: e["ts"])


def queued_us(graph: StepGraph, path: CriticalPath) -> float:
    """The queue the step inherited, as its path shows it: the path's time from the home
    rank's step start to the end of its last inherited piece (0: none)."""
    start = next(n.start_us for n in graph.nodes
                 if n.rank == path.home_rank and n.kind == NodeKind.STEP_START)
    return max((p.start_us + p.duration_us - (start - graph.origin_us)
                for p in path.pieces if p.category == INHERITED), default=0.0)


@pytest.mark.parametrize("name", GPU_FIXTURES)
def test_every_step_has_a_path_that_adds_up(name):
    """No step refused; the pieces tile the path; the path is no longer than the longer of
    the home rank's host step and its own device work by more than the queue it inherited
    (the path's time until its last inherited piece); idle with no recorded cause stays
    under 1% of the path unless a note says the trace lacks what the device waited for."""
    found, notes = graphs(name)
    assert found, notes
    lacking = any("the trace does not show what they waited for" in n for n in notes)
    for graph in found:
        path = critical_path(graph)
        assert sum(path.split_us.values()) == pytest.approx(path.length_us, abs=1e-6)
        schedule = replay(graph)
        home = [n for n in graph.nodes if n.rank == path.home_rank]
        start = next(n.start_us for n in home if n.kind == NodeKind.STEP_START)
        end = next(n.start_us for n in home if n.kind == NodeKind.STEP_END)
        own = max(end - start, period_us(graph, schedule))
        assert path.length_us - queued_us(graph, path) <= own * 1.01 + 1.0, graph.step
        unexplained = sum(p.duration_us for p in path.pieces
                          if p.category == IDLE and p.name == f"idle: {NOTHING_RECORDED}")
        assert lacking or unexplained <= 0.01 * path.length_us, graph.step


def test_a_host_bound_single_rank_is_its_host_step():
    """HTA's NCCL sample (rank 0 of 2, its GPU 18% busy computing): ProfilerStep#4's path is
    the host's, from its start to its end: 222,442.191 µs, the span the trace records."""
    [graph, _] = graphs("hta-gpu/nccl-data")[0]
    path = critical_path(graph)
    first = _host_steps(_files("hta-gpu/nccl-data")[0])[0]
    assert graph.step == first["name"] == "ProfilerStep#4"
    assert path.length_us == pytest.approx(first["dur"], abs=1e-3)
    assert path.total(HOST) == pytest.approx(path.length_us)


def test_the_all_to_all_job_waits_for_the_rank_that_started_last():
    """DLRM on 8 V100s: rank 4's ProfilerStep#10 ends last (at 442,028 µs of the trace's
    clock, the others by 441,992), so it is the home rank and the step is its 17,979 µs; rank
    7 started its step last (428,718, 4,669 µs after rank 4): the path's waiting is for rank
    7."""
    ends, starts = {}, {}
    for path in _files("real-traces/param-dlrm-8rank-alltoall"):
        rank = int(re.search(r"worker(\d)", path.name).group(1))
        [step] = _host_steps(path)
        starts[rank], ends[rank] = step["ts"], step["ts"] + step["dur"]
    home = max(ends, key=ends.get)
    [graph] = graphs("real-traces/param-dlrm-8rank-alltoall")[0]
    path = critical_path(graph)
    assert path.home_rank == home == 4
    assert path.length_us == pytest.approx(ends[home] - starts[home], abs=1e-3)
    waited = {rank for (category, rank), us in path.split_us.items()
              if category == WAITING and us > 0}
    assert waited == {max(starts, key=starts.get)} == {7}


def test_the_nccl_micro_trace_is_its_all_reduce():
    """tb_plugin's NCCL sample (rank 0; tb_plugin's own test expects its all-reduce at 1,558
    µs): the whole trace's path is that kernel's transfer, as long as the trace records it."""
    [graph] = graphs("real-traces/tbplugin-micro-nccl")[0]
    path = critical_path(graph)
    kernel = next(e for e in _events(_files("real-traces/tbplugin-micro-nccl")[0])
                  if e["name"].startswith("ncclKernel_AllReduce"))
    on_path = [p for p in path.pieces if p.name == kernel["name"]]
    assert sum(p.duration_us for p in on_path) == pytest.approx(kernel["dur"], abs=1.0)
    assert path.total(COMMUNICATION) >= kernel["dur"] - 1.0


def test_a_device_bound_step_begins_with_the_queue_it_inherited():
    """The MI300X DDP rank's GPU runs about 29 ms behind its host: ProfilerStep#15's own work
    starts only after an RCCL all-reduce of 9,181 µs ends, one whose launch the trace does not
    hold (its correlation id is on no runtime call). That kernel is on the path as inherited
    work, the step's own all-reduces as communication (over a quarter of the path)."""
    graph = graphs("real-traces/tracelens-mi300-ddp-resnet")[0][0]
    path = critical_path(graph)
    events = _events(_files("real-traces/tracelens-mi300-ddp-resnet")[0])
    launches = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"
                and "correlation" in e.get("args", {})}
    longest = max((p for p in path.pieces if p.category == INHERITED),
                  key=lambda p: p.duration_us)
    [kernel] = [e for e in events if e.get("cat") == "kernel"
                and abs(e["ts"] - graph.origin_us - longest.start_us) < 1.0]
    assert kernel["name"].startswith("ncclDevKernel") and kernel["name"] == longest.name
    assert kernel["dur"] == pytest.approx(longest.duration_us, abs=1.0) and kernel["dur"] > 9000
    assert kernel["args"]["correlation"] not in launches
    assert path.total(COMMUNICATION) > 0.25 * path.length_us


def test_a_queue_one_step_deep_is_inherited_not_host_time():
    """The H100 hook rank's GPU runs a whole step (61 ms) behind its host: ProfilerStep#11's
    path begins with the queue it inherited (more than 50 ms, not host time), and without it
    is the step (within 5% of its host step)."""
    graph = graphs(HOOK)[0][1]
    path = critical_path(graph)
    host = _host_steps(FIXTURES / HOOK)[1]
    assert graph.step == host["name"] == "ProfilerStep#11"
    assert queued_us(graph, path) > 50_000
    assert path.total(HOST) < 0.01 * path.length_us
    assert path.length_us - queued_us(graph, path) == pytest.approx(host["dur"], rel=0.05)
    causes = {p.name for p in path.pieces if p.category == IDLE}
    assert causes <= {f"idle: {BETWEEN_KERNELS}", "idle: another stream (an event wait)"}


def test_a_host_bound_rank_of_the_compiled_job_runs_backward_on_another_thread():
    """The 8 × H100 compiled job's middle step: its home rank runs the path on its host
    threads, handing backward to the autograd engine's device thread and back (two hand-off
    edges on the path), as the trace shows: the main thread records nothing while that thread
    runs backward."""
    [graph], _ = graphs("real-traces/modded-nanogpt-8rank-compile")
    path = critical_path(graph)
    lanes = {graph.nodes[n].lane for n in path.nodes if graph.nodes[n].rank == path.home_rank}
    assert len({lane for lane in lanes if lane.startswith("thread")}) >= 2
    handoffs = {(e.src, e.dst) for e in graph.edges if e.kind == EdgeKind.HANDOFF}
    on_path = sum((u, v) in handoffs for u, v in zip(path.nodes, path.nodes[1:], strict=False))
    assert on_path >= 2
