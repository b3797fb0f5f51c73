"""The step graph across ranks, its critical path and its replay: hand-computed synthetic
traces (tests/fixtures/critical-path/), hand-built graphs, invariants as fuzz tests, and the
real multi-rank fixtures."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import trace_builders as tb
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpprof.graph.build import step_graphs
from ddpprof.graph.model import EdgeKind, Node, NodeKind, StepGraph, recorded_graph
from ddpprof.graph.path import (
    COMMUNICATION,
    COMPUTE,
    HOST,
    WAITING,
    critical_path,
    period_us,
    replay,
    step_length_us,
)
from ddpprof.graph.whatif import Edit, edited_step_us
from ddpprof.trace.loader import load

FIXTURES = Path(__file__).parent / "fixtures"


def graphs_of(folder: Path) -> list[StepGraph]:
    traces = {}
    for position, path in enumerate(sorted(folder.glob("*.json*"))):
        trace = load(path)
        traces[trace.rank if trace.rank is not None else position] = trace
    graphs, _ = step_graphs(traces)
    return graphs


def split_of(path) -> dict[tuple[str, int], float]:
    return {key: round(us, 6) for key, us in path.split_us.items() if round(us, 6)}


def test_cpu_gloo_two_ranks_hand_computed():
    """Rank 0: mm 0-40, c10d 40-42, wait 42-80, gloo 45-78 (thread 2), add_ 82-95. Rank 1: mm
    0-60, c10d 60-62, wait 62-80, gloo 63-78, add_ 81-90. Steps 0-100 on both.

    Rank 1 arrives last (63), so both transfers are 63-78. The step ends at 100 on both;
    rank 0's step end is taken (lowest rank). Back from it: the 5 µs after add_ (host), add_
    82-95 (compute, rank 0), 80-82 (host: the wait returned, then the next op), 78-80
    (host: completion), the transfer 63-78 (communication, rank 0), then rank 1: the issue
    gap 62-63 and c10d 60-62 (host) and mm 0-60 (compute). Rank 0 sat in the all-reduce
    from 45 to 63: the last 18 µs of path before the hop (mm 45-60, c10d, gap) are waiting
    for rank 1. So: compute rank 1 = 45, waiting for rank 1 = 18, communication = 15,
    host rank 0 = 5 + 2 + 2 = 9, compute rank 0 = 13; 100 in all."""
    (graph,) = graphs_of(FIXTURES / "critical-path" / "cpu-two-rank")
    path = critical_path(graph)
    assert path.length_us == pytest.approx(100)
    assert path.home_rank == 0
    assert split_of(path) == {(COMPUTE, 1): 45, (WAITING, 1): 18, (COMMUNICATION, 0): 15,
                              (HOST, 0): 9, (COMPUTE, 0): 13}
    names = [graph.nodes[n].name for n in path.nodes]
    assert names == ["step start", "aten::mm", "c10d::allreduce_", "gloo:all_reduce",
                     "gloo:all_reduce", "ddpprof::wait", "aten::add_", "step end"]
    assert [graph.nodes[n].rank for n in path.nodes] == [1, 1, 1, 1, 0, 0, 0, 0]
    # rank 0's mm (0-40) could end 23 µs later before the step grew: it arrives at 45 and the
    # transfer waits for rank 1 until 63
    mm0 = next(i for i, n in enumerate(graph.nodes) if n.rank == 0 and n.name == "aten::mm")
    assert path.slack_us[mm0] == pytest.approx(18)
    assert all(path.slack_us[n] == pytest.approx(0) for n in path.nodes)


def test_gpu_nccl_two_ranks_hand_computed():
    """Each rank: launches 10-12 (corr 1) and 20-22 (corr 2) on its step 0-100; rank 0: GEMM
    15-50, all-reduce kernel 50-80; rank 1: GEMM 15-60, all-reduce 60-85; the kernels share
    group 0, sequence 1.

    Both transfers start at 60 (rank 1 arrives last). Back from rank 0's step end: 80-100
    host (the host step outlives its device work), the transfer 60-80, then rank 1: GEMM 15-60,
    the launch latency 12-15, the launch 10-12 and the 10 µs of its thread before it, from its
    step start (host: untraced CPU time). Rank 0 sat in the all-reduce 50-60: 10 µs of rank
    1's GEMM are waiting for rank 1."""
    (graph,) = graphs_of(FIXTURES / "critical-path" / "gpu-two-rank")
    path = critical_path(graph)
    assert split_of(path) == {(HOST, 1): 15, (COMPUTE, 1): 35, (WAITING, 1): 10,
                              (COMMUNICATION, 0): 20, (HOST, 0): 20}
    kinds = {EdgeKind(e.kind) for e in graph.edges}
    assert {EdgeKind.LAUNCH, EdgeKind.ARRIVAL, EdgeKind.PROGRAM, EdgeKind.STEP} <= kinds


def test_a_faster_collective_or_a_delayed_rank_moves_the_step():
    """In the CPU fixture the transfer (15 µs) is on the path: a network 40% faster saves
    6 µs. Rank 0's work after the wait (add_ ending at 95, then 5 µs to the step end) is
    what ends the step, so delaying rank 1's start by 10 µs delays its arrival to 73, the
    transfers to 73-88, rank 0's add_ to 92-105 and the step end to 110. GEMMs (aten::mm)
    20% faster: rank 1's mm 0-48, arrival 51, transfer 51-66 and rank 0's step ends at 88."""
    (graph,) = graphs_of(FIXTURES / "critical-path" / "cpu-two-rank")
    assert edited_step_us(graph, []) == pytest.approx(100)
    assert edited_step_us(graph, [Edit("faster-network", "", 40)]) == pytest.approx(94)
    assert edited_step_us(graph, [Edit("rank-delay", "1", 10)]) == pytest.approx(110)
    assert edited_step_us(graph, [Edit("faster", "gemm", 20)]) == pytest.approx(88)


def test_graph_is_json_with_its_schema():
    (graph,) = graphs_of(FIXTURES / "critical-path" / "cpu-two-rank")
    document = msgspec.json.decode(msgspec.json.encode(graph))
    assert document["schema"] == "ddpprof.step-graph"
    assert set(document["nodes"][0]) == {"rank", "lane", "kind", "name", "start_us",
                                         "duration_us", "release_us"}
    assert msgspec.json.decode(msgspec.json.encode(graph), type=StepGraph) == graph


def test_hand_built_graph_with_a_known_path():
    """a (rank 0, 0-10) -> c (rank 0, 20-25); b (rank 1, 0-15) -> c (an arrival); a -> d
    (10-11). c's binding edge is b's (ends 15, gap 5); the path is b, c: 15 µs of compute on
    rank 1, the 5 µs gap of the arrival edge (communication), 5 µs of compute on rank 0. No
    rank-0 arrive node precedes c, so nothing is relabelled as waiting. Slack: a could end at
    20 (10), d at 25 (14)."""
    nodes = [Node(0, "thread 1", NodeKind.COMPUTE, "a", 0, 10),
             Node(1, "thread 1", NodeKind.COMPUTE, "b", 0, 15),
             Node(0, "thread 1", NodeKind.COMPUTE, "c", 20, 5),
             Node(0, "thread 2", NodeKind.COMPUTE, "d", 10, 1)]
    graph = recorded_graph("s", 0.0, nodes, [(0, 2, EdgeKind.PROGRAM),
                                             (1, 2, EdgeKind.ARRIVAL),
                                             (0, 3, EdgeKind.PROGRAM)])
    path = critical_path(graph)
    assert [graph.nodes[n].name for n in path.nodes] == ["b", "c"]
    assert path.length_us == 25
    assert path.slack_us.tolist() == [10, 0, 0, 14]
    assert split_of(path) == {(COMPUTE, 0): 5, (COMMUNICATION, 0): 5, (COMPUTE, 1): 15}


def test_the_step_is_the_home_ranks_own_step():
    """Rank 0 starts its step at 0, rank 1 at 30. Rank 0: x 0-10 then waits in a collective
    that rank 1 joins at 50 (after y 30-50); both transfers 50-60; the steps end at 60. The
    node that ends last is rank 0's step end (ties: lowest rank), so the step is rank 0's, 60
    µs. If rank 1 ends last (its step end at 61), the step is rank 1's own, 31 µs: the part of
    the path before rank 1 started (nothing here) is not counted."""
    def graph(end_1: float) -> StepGraph:
        nodes = [Node(0, "thread 1", NodeKind.STEP_START, "step start", 0, 0),
                 Node(0, "thread 1", NodeKind.COMPUTE, "x", 0, 10),
                 Node(0, "thread 2", NodeKind.ARRIVE, "ar", 10, 0),
                 Node(0, "thread 2", NodeKind.COMMUNICATION, "ar", 50, 10),
                 Node(0, "thread 1", NodeKind.STEP_END, "step end", 60, 0),
                 Node(1, "thread 1", NodeKind.STEP_START, "step start", 30, 0),
                 Node(1, "thread 1", NodeKind.COMPUTE, "y", 30, 20),
                 Node(1, "thread 2", NodeKind.ARRIVE, "ar", 50, 0),
                 Node(1, "thread 2", NodeKind.COMMUNICATION, "ar", 50, 10),
                 Node(1, "thread 1", NodeKind.STEP_END, "step end", end_1, 0)]
        edges = [(0, 1, EdgeKind.PROGRAM), (1, 2, EdgeKind.ISSUE), (2, 3, EdgeKind.PROGRAM),
                 (7, 3, EdgeKind.ARRIVAL), (3, 4, EdgeKind.STEP), (5, 6, EdgeKind.PROGRAM),
                 (6, 7, EdgeKind.ISSUE), (7, 8, EdgeKind.PROGRAM), (2, 8, EdgeKind.ARRIVAL),
                 (8, 9, EdgeKind.STEP)]
        return recorded_graph("s", 0.0, nodes, edges)

    path = critical_path(graph(60))
    assert (path.home_rank, path.length_us) == (0, 60)
    # the path: rank 1's late start (0-30: its first node is its step start, and rank 1 is not
    # the home rank, so this is waiting for rank 1), y 30-50 (waiting for rank 1 too: rank 0
    # sat in the collective 10-50), the transfer 50-60
    assert split_of(path) == {(WAITING, 1): 50, (COMMUNICATION, 0): 10}
    path = critical_path(graph(61))
    assert (path.home_rank, path.length_us) == (1, 31)
    assert split_of(path) == {(COMPUTE, 1): 20, (COMMUNICATION, 1): 10, (HOST, 1): 1}
    assert edited_step_us(graph(61), [Edit("rank-delay", "1", 5)]) == pytest.approx(31)


# ---- invariants --------------------------------------------------------------------------

@st.composite
def random_graphs(draw) -> StepGraph:
    """Any recorded times (overlapping, out of order: clock skew) and forward edges."""
    n = draw(st.integers(1, 14))
    nodes = []
    for _ in range(n):
        rank = draw(st.integers(0, 2))
        lane = draw(st.sampled_from(["thread 1", "thread 2", "stream 7"]))
        kind = draw(st.sampled_from([k for k in NodeKind if k != NodeKind.STEP_START]))
        start = draw(st.floats(0, 100, allow_nan=False))
        duration = 0.0 if kind in (NodeKind.ARRIVE, NodeKind.WAIT, NodeKind.STEP_END) else \
            draw(st.floats(0, 50, allow_nan=False))
        nodes.append(Node(rank, lane, kind, f"n{len(nodes)}", start, duration))
    edges = []
    for dst in range(1, n):
        for src in draw(st.sets(st.integers(0, dst - 1), max_size=3)):
            edges.append((src, dst, draw(st.sampled_from(list(EdgeKind)))))
    origin = min(node.start_us for node in nodes) - draw(st.floats(0, 10, allow_nan=False))
    return recorded_graph("fuzz", origin, nodes, edges)


@settings(max_examples=300, deadline=None)
@given(random_graphs())
def test_path_invariants(graph):
    schedule = replay(graph)
    # replaying the recorded graph unchanged gives back its recorded times
    for i, node in enumerate(graph.nodes):
        assert schedule.start_us[i] == pytest.approx(node.start_us, abs=1e-6)
        assert schedule.end_us[i] == pytest.approx(node.end_us, abs=1e-6)
    path = critical_path(graph)
    makespan = max(node.end_us for node in graph.nodes) - graph.origin_us
    # the critical path's length is the replayed makespan, and its split sums to it
    assert path.length_us == pytest.approx(makespan, abs=1e-6)
    assert sum(path.split_us.values()) == pytest.approx(path.length_us, abs=1e-6)
    assert all(piece.duration_us >= 0 for piece in path.pieces)
    # the path is a chain of dependent nodes, each on no slack
    pairs = {(e.src, e.dst) for e in graph.edges}
    assert all((a, b) in pairs for a, b in zip(path.nodes, path.nodes[1:], strict=False))
    assert all(path.slack_us[n] == pytest.approx(0, abs=1e-6) for n in path.nodes)
    assert (path.slack_us >= 0).all()


@settings(max_examples=150, deadline=None)
@given(random_graphs(), st.floats(0, 99), st.floats(0, 99))
def test_faster_work_never_lengthens_the_step(graph, compute_pct, network_pct):
    before = edited_step_us(graph, [])
    assert before == pytest.approx(period_us(graph, replay(graph)), abs=1e-6)
    after = edited_step_us(graph, [Edit("faster", "compute", compute_pct),
                                   Edit("faster-network", "", network_pct)])
    assert after <= before + 1e-6


# ---- real multi-rank traces --------------------------------------------------------------

@pytest.mark.parametrize("folder", [
    FIXTURES / "hta-gpu" / "two-rank",
    *sorted((FIXTURES / "real-traces").glob("tbplugin-micro-*"))], ids=lambda p: p.name)
def test_real_multi_rank_traces(folder):
    graphs = graphs_of(folder)
    assert graphs
    for graph in graphs:
        path = critical_path(graph)
        assert path.length_us == pytest.approx(step_length_us(graph, replay(graph)))
        # the home rank's own step, or longer where device work outlives it
        start, end = (next(n for n in graph.nodes if n.rank == path.home_rank and n.kind == k)
                      for k in (NodeKind.STEP_START, NodeKind.STEP_END))
        assert path.length_us >= end.start_us - start.start_us - 1e-6
        assert sum(path.split_us.values()) == pytest.approx(path.length_us, rel=1e-9)
        pairs = {(e.src, e.dst) for e in graph.edges}
        assert all((a, b) in pairs for a, b in zip(path.nodes, path.nodes[1:], strict=False))
        assert len({n.rank for n in graph.nodes}) == len(list(folder.glob("*.json*")))


def test_two_rank_nccl_collectives_are_matched_across_ranks():
    """HTA's two-rank trace: every NCCL kernel of one rank has its partner on the other
    (group and sequence number), so each transfer depends on the other rank's arrival."""
    (graph,) = graphs_of(FIXTURES / "hta-gpu" / "two-rank")
    transfers = [i for i, n in enumerate(graph.nodes) if n.kind == NodeKind.COMMUNICATION]
    arrivals = {e.dst for e in graph.edges if e.kind == EdgeKind.ARRIVAL}
    assert transfers and set(transfers) <= arrivals


# ---- the commands ------------------------------------------------------------------------

def test_critical_path_command_json_graph_and_page(ddpprof_cli, tmp_path):
    import json

    folder = FIXTURES / "critical-path" / "cpu-two-rank"
    result = ddpprof_cli("critical-path", str(folder), "--json", "-", "--faster", "gemm=20",
                         "--faster-network", "40", "--graph-json", str(tmp_path / "g.json"),
                         "--html-out", str(tmp_path / "page.html"))
    assert result.returncode == 0, result.stderr
    (step,) = json.loads(result.stdout)["steps"]
    assert step["step_us"] == pytest.approx(100)
    assert {(r["category"], r["rank"]): r["us"] for r in step["split"]} == pytest.approx(
        {(COMPUTE, 1): 45, (WAITING, 1): 18, (COMMUNICATION, 0): 15, (HOST, 0): 9,
         (COMPUTE, 0): 13})
    assert [(w["edit"], round(w["step_us"], 6)) for w in step["what_if"]] == [
        ("gemm 20% faster", 88), ("network 40% faster", 94)]
    assert step["work"][0] == {"rank": 1, "category": COMPUTE, "name": "aten::mm", "us": 45.0,
                               "pct": 45.0}
    graphs = json.loads((tmp_path / "g.json").read_text())["runs"]["cpu-two-rank"]
    assert msgspec.convert(graphs[0], StepGraph) == graphs_of(folder)[0]
    assert "plotly" in (tmp_path / "page.html").read_text()


@pytest.mark.parametrize("args, message", [
    (["--faster", "gemm"], "'gemm' is not CLASS=PCT"),
    (["--faster", "tensor=20"], "the class is one of gemm, compute"),
    (["--faster-network", "100"], "the percentage must be in [0, 100)"),
    (["--rank-delay", "x=5"], "RANK must be a rank number"),
])
def test_bad_edits_are_one_line_and_exit_2(ddpprof_cli, args, message):
    result = ddpprof_cli("critical-path", str(FIXTURES / "critical-path" / "cpu-two-rank"),
                         *args)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("ddpprof: error: ") and args[0] in line and message in line


def test_analyze_critical_path_section_and_findings(ddpprof_cli, tmp_path):
    import json

    result = ddpprof_cli("analyze", str(FIXTURES / "critical-path" / "gpu-two-rank"),
                         "--critical-path", "--json", "-", "--html-out",
                         str(tmp_path / "report.html"))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    (step,) = document["critical_path"]["steps"]
    assert sum(r["us"] for r in step["split"]) == pytest.approx(step["step_us"], rel=0.01)
    assert {(r["category"], r["rank"]): r["us"] for r in step["split"]} == pytest.approx(
        {(HOST, 1): 15, (COMPUTE, 1): 35, (WAITING, 1): 10, (COMMUNICATION, 0): 20,
         (HOST, 0): 20})
    messages = {f["code"]: f["message"] for f in document["findings"]}
    assert "On the critical path of ProfilerStep#1, communication is 20.0% of the step, " \
        "longest ncclDevKernel_AllReduce_Sum_f32_RING_LL on rank 0 (20.0%). Replayed with a " \
        "network twice as fast, ProfilerStep#1 would take" in messages["no_overlap"]
    # the replay halves the 20 µs all-reduce on the path: at most 10 µs shorter, and shorter
    (evidence,) = (f["evidence"] for f in document["findings"] if f["code"] == "no_overlap")
    assert evidence["predicted_step_ms"] < step["step_us"] / 1e3
    # rank 1's gemm is slower than rank 0's: the rank the others wait for, on the path
    assert "waiting for rank 1 is 10.0% of the step, longest sm90_xmma_gemm_f32 on rank 1" \
        in messages["slow_rank_contended"]
    page = (tmp_path / "report.html").read_text()
    assert "ProfilerStep#1: critical path over the ranks' timelines" in page


def test_an_untraced_wait_ends_when_its_collective_does():
    """Both ranks: mm 0-300, c10d 300-320, gloo 330-700 (thread 2), then nothing traced until
    add_ 720-900, 20 µs after the collective ended: the thread was blocked (as in DDP's
    reducer). Path from rank 0's step end: 100 host, add_ 180, 20 host (completion), the
    transfer 370, 10 host (issue), c10d 20, mm 300. With the network 50% faster the transfer
    is 185 µs, add_ runs 535-715 and the step ends at 815."""
    (graph,) = graphs_of(FIXTURES / "critical-path" / "cpu-untraced-wait")
    path = critical_path(graph)
    assert split_of(path) == {(COMPUTE, 0): 480, (COMMUNICATION, 0): 370, (HOST, 0): 150}
    assert edited_step_us(graph, [Edit("faster-network", "", 50)]) == pytest.approx(815)


@pytest.mark.parametrize(("wake_up_us", "awaited"), [(200, True), (300, False)])
def test_an_untraced_wait_allows_the_scheduler_its_wake_up(tmp_path, wake_up_us, awaited):
    """As above, but add_ starts ``wake_up_us`` after the collective ended: within
    ``WAKE_UP_SLACK_US`` (250 µs) the thread counts as woken by it (the DDP reducer's thread
    ran again 51 to 206 µs after its all-reduce on a busy 2-core machine), so with the
    network 50% faster (the transfer 185 µs shorter) the step is 185 µs shorter; beyond it, the
    gap is the thread's own and the step stays as recorded."""
    for rank in (0, 1):
        resume = 700 + wake_up_us
        tb.write_trace(tmp_path / f"rank{rank}.json", [
            tb.step(1, 0, resume + 280), tb.span("aten::mm", 0, 300),
            tb.span("c10d::allreduce_", 300, 320), tb.span("gloo:all_reduce", 330, 700, tid=2),
            tb.span("aten::add_", resume, resume + 180)], rank=rank)
    (graph,) = graphs_of(tmp_path)
    completions = [e for e in graph.edges if e.kind == EdgeKind.COMPLETE]
    assert [graph.nodes[e.dst].name for e in completions] == ["aten::add_"] * 2 * awaited
    recorded = edited_step_us(graph, [])
    assert recorded == pytest.approx(wake_up_us + 980)
    assert edited_step_us(graph, [Edit("faster-network", "", 50)]) == pytest.approx(
        recorded - 185 * awaited)


def test_a_c10d_op_that_blocks_until_its_collective_ended_is_a_wait():
    """Both ranks: mm 0-300, c10d::allreduce_ 300-710 holding the whole gloo all-reduce
    310-700, add_ 720-900. The op is an issue 300-310 and a wait that returns at 710: path
    100 host, add_ 180, 10 + 10 host, the transfer 390, the issue 10, mm 300. With the network
    50% faster: the transfer ends at 505, the wait at 515, add_ at 705, the step at 805."""
    (graph,) = graphs_of(FIXTURES / "critical-path" / "cpu-blocking-issue")
    path = critical_path(graph)
    assert split_of(path) == {(COMPUTE, 0): 480, (COMMUNICATION, 0): 390, (HOST, 0): 130}
    assert edited_step_us(graph, [Edit("faster-network", "", 50)]) == pytest.approx(805)


@pytest.mark.slow
def test_recorded_variants(all_variants, ddpprof_cli, tmp_path):
    """Every recorded variant (2 gloo ranks): the critical path covers the home rank's own
    step (analyze's window for that step) and its split sums to it within 1%. Compared step
    by step with analyze's ``--per-step`` figures of the home rank:

    * in every variant, the path's time off the home rank's compute is at least the home
      rank's exposed communication in that step: while the home rank's communication is
      exposed the home rank computes nothing, so the path must be somewhere else then;
    * in the blocking variants most of that exposed time is communication or waiting for a
      rank on the path: at least 3/4 of it. Not all of it: gloo runs a rank's collectives on
      two threads, so the home rank can sit in collective n-1 while the path follows
      collective n through the peer's issue of it (host time on the peer). Over 21 steps of
      these variants recorded beside two busy processes, the least share was 0.85. (Against
      the mean of the run's steps instead of the step itself, one loaded CI run gave 0.46.)
    * the one-process run has no communication on its path."""
    import json

    out, _ = all_variants
    result = ddpprof_cli("analyze", str(out), "--critical-path", "--per-step", "--json",
                         str(tmp_path / "a.json"))
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "a.json").read_text())
    runs = {run["run"]: run for run in document["runs"]}
    steps = document["critical_path"]["steps"]
    assert {step["run"] for step in steps} == set(runs)
    for step in steps:
        run = runs[step["run"]]
        home = next(r for r in run["per_rank"] if r["rank"] == step["home_rank"])
        (own,) = (s for s in home["per_step"] if s["step"] == step["step"])
        assert step["step_us"] == pytest.approx(own["window_us"], rel=0.01)
        assert sum(r["us"] for r in step["split"]) == pytest.approx(step["step_us"], rel=0.01)
        home_compute_us = sum(r["us"] for r in step["split"]
                              if r["category"] == COMPUTE and r["rank"] == step["home_rank"])
        assert step["step_us"] - home_compute_us >= 0.99 * own["exposed_comm_us"], step
        on_path_us = sum(r["us"] for r in step["split"]
                         if r["category"] in (COMMUNICATION, WAITING))
        if run["variant"] in ("simple_ddp", "simple_ddp_hook", "simple_ddp_ga"):
            assert own["exposed_comm_us"] > 0, step
            assert on_path_us >= 0.75 * own["exposed_comm_us"], step
        if run["variant"] == "single":
            assert on_path_us == 0


def test_collectives_matched_against_program_order_are_repaired_with_a_note(ddpprof_cli,
                                                                           tmp_path):
    """Rank 0 runs sequence 1 then 2 on its gloo thread (20-40, 50-70), rank 1 runs 2 then 1:
    matched by sequence number, each transfer waits for an arrival (at 50) that comes after
    that transfer's own end (40) on the other rank: a cycle. The two arrivals the recorded
    times contradict (by 10 µs each) are dropped, said in a note, and the step still has its
    path: 100 µs, rank 0's step (the lowest of equal ends), its split summing to it."""
    for rank, order in ((0, (1, 2)), (1, (2, 1))):
        tb.write_trace(tmp_path / "run" / f"rank{rank}.json", [
            tb.step(1, 0, 100), tb.span("aten::mm", 0, 10),
            *(tb.span("gloo:all_reduce", 20 + 30 * k, 40 + 30 * k, tid=2, Seq=seq,
                   **{"Process Group Name": "0"}) for k, seq in enumerate(order))], rank=rank)
    result = ddpprof_cli("critical-path", str(tmp_path / "run"), "--json", "-")
    assert result.returncode == 0, result.stderr
    assert ("ProfilerStep#1: 2 arrivals across ranks contradicted the recorded times (they "
            "made a cycle) and were left out") in result.stderr
    [step] = msgspec.json.decode(result.stdout)["steps"]
    assert step["step_us"] == pytest.approx(100)
    assert sum(row["us"] for row in step["split"]) == pytest.approx(100)
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("option", ["--graph-json", "--json"])
def test_an_output_onto_an_input_trace_is_refused(ddpprof_cli, tmp_path, option):
    import shutil

    run = shutil.copytree(FIXTURES / "critical-path" / "cpu-two-rank", tmp_path / "run")
    before = (run / "rank0.json").read_bytes()
    result = ddpprof_cli("critical-path", str(run), option, str(run / "rank0.json"))
    assert result.returncode == 2
    assert f"{option} {run / 'rank0.json'}: is a trace being analyzed" in result.stderr
    assert (run / "rank0.json").read_bytes() == before
