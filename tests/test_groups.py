"""Communication per process group: each collective attributed to its group, the figures of
each group against hand-computed traces, the recorded 2 × 2 mesh's own ground truth, the gate's
group selectors, communication found by structure, and findings in the user's own terms."""

from __future__ import annotations

import gzip
import json
import math
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_builders import analyze_one, kernel, launch, span, write_trace

from ddpprof.advice import findings
from ddpprof.analysis import AnalysisOptions, analyze_paths, to_json_document
from ddpprof.core.errors import UsageError
from ddpprof.gate.rules import evaluate, parse_rule, runs_of
from ddpprof.metrics import intervals as iv
from ddpprof.metrics.comm import CollectiveCalls, GroupRef
from ddpprof.metrics.groups import group_figures, queued, send_imbalance, split_imbalance
from ddpprof.run.manifest import read_manifest
from ddpprof.trace.loader import load
from ddpprof.variants import VARIANT_NAMES

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FSDP_TP = FIXTURES / "fsdp-tp-gloo" / "fsdp_tp"
DLRM = FIXTURES / "real-traces" / "param-dlrm-8rank-alltoall"
DP = {"Process Group Name": "1", "Process Group Description": "mesh_dp",
      "Process Group Ranks": "[0, 2]", "Group size": 2}
TP = {"Process Group Name": "3", "Process Group Description": "mesh_tp",
      "Process Group Ranks": "[0, 1]", "Group size": 2}


def collective(name: str, ts: float, end: float, group: dict, nelems: int, seq: int,
               correlation: int) -> dict:
    return kernel(name, ts, end, correlation, stream=20, **{
        "Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
        "dtype": "Float", "Seq": seq, **group})


def two_group_trace(path: Path, rank: int = 0, tp_delay: float = 0.0) -> Path:
    """Compute on stream 7 over [0, 100] and [160, 210]; a dp all-reduce of 1000 floats over
    [50, 150]; tp all-reduces of 500 floats over [120, 170] and [200, 220] (each starting
    ``tp_delay`` later on this rank)."""
    events = [kernel("gemm_a", 0, 100, 1), kernel("gemm_b", 160, 210, 2),
              collective("ncclDevKernel_AllReduce_Sum_f32", 50, 150,
                         DP if rank == 0 else {**DP, "Process Group Name": "2",
                                               "Process Group Ranks": "[1, 3]"}, 1000, 1, 3),
              collective("ncclDevKernel_AllReduce_Sum_f32", 120 + tp_delay, 170, TP, 500, 1, 4),
              collective("ncclDevKernel_AllReduce_Sum_f32", 200 + tp_delay, 220, TP, 500, 2, 5)]
    return write_trace(path, events, rank=rank, world_size=4, backend="nccl")


def test_two_named_groups_have_their_own_hand_computed_figures(tmp_path):
    """C = [0, 100] ∪ [160, 210]. dp: lane [50, 150], 100 µs, exposed [100, 150] = 50 µs,
    overlap 50 %, 4000 B in 100 µs: algbw 0.04 GB/s, busbw × 2·(2 − 1)/2 = 0.04. tp: lane
    [120, 170] ∪ [200, 220], 70 µs; hidden [160, 170] and [200, 210], 20 µs: overlap 2/7,
    exposed 50 µs; 4000 B in 70 µs: 4/70 GB/s."""
    result = analyze_one(load(two_group_trace(tmp_path / "rank0.json")))
    figures = {f.group.name: f for f in result.process_groups}
    assert sorted(figures) == ["dp", "tp"]
    dp, tp = figures["dp"], figures["tp"]
    assert (dp.group.key, dp.group.description, dp.group.ranks, dp.group.source) == (
        "1", "mesh_dp", (0, 2), "trace arguments")
    assert (dp.calls, dp.bytes, dp.comm_us, dp.exposed_us, dp.overlap_pct) == (
        1, 4000, 100, 50, 50)
    assert dp.algbw_gbps == pytest.approx(0.04) and dp.busbw_gbps == pytest.approx(0.04)
    assert (tp.calls, tp.bytes, tp.comm_us, tp.exposed_us) == (2, 4000, 70, 50)
    assert tp.overlap_pct == pytest.approx(100 * 20 / 70)
    assert tp.algbw_gbps == pytest.approx(4000 / 70 / 1e3)
    assert tp.calls_by_kind == {"all_reduce": 2}
    assert sum(f.calls for f in figures.values()) == result.calls.n == 3


def test_a_run_matches_each_groups_calls_by_sequence_and_names_its_straggler(tmp_path, ddpprof_cli):
    """Rank 1 starts both tp all-reduces 10 µs later: rank 0 waits 10 + 10 µs of its 70,
    transfers 50; rank 1 waits none and caused it all: the tp group's straggler. The dp groups
    differ ({0, 2} and {1, 3}: c10d names 1 and 2), so nothing in dp is matched."""
    two_group_trace(tmp_path / "run" / "rank0.json")
    two_group_trace(tmp_path / "run" / "rank1.json", rank=1, tp_delay=10)
    [run] = analyze_paths([tmp_path / "run"], AnalysisOptions(jobs=1)).runs
    groups = {g.name: g for g in run.process_groups}
    tp = groups["tp"]
    assert tp.members == [(0, 1)] and tp.size == 2 and tp.straggler_rank == 1
    assert (tp.wait[0].wait_us, tp.wait[0].transfer_us) == (20, 50)
    assert (tp.wait[1].wait_us, tp.wait[1].caused_wait_us) == (0, 20)
    assert groups["dp"].members == [(0, 2), (1, 3)] and groups["dp"].wait[0].matched_calls == 0
    assert any("cannot be told" in note for note in run.notes)
    out = tmp_path / "out.json"
    assert ddpprof_cli("analyze", str(tmp_path / "run"), "--json", str(out)).returncode == 0
    document = json.loads(out.read_text())
    assert document["version"] == 6
    [row] = [g for g in document["runs"][0]["process_groups"] if g["name"] == "tp"]
    # means over ranks 0 and 1: rank 1's lane is [130, 170] ∪ [210, 220], 50 µs: (70 + 50) / 2
    # µs of communication, (20 + 0) / 2 of waiting
    assert row["comm_ms_per_step"] == pytest.approx(0.060)
    assert row["wait_ms_per_step"] == pytest.approx(0.010)
    assert row["locality"] is None and row["straggler_rank"] == 1
    [rank1] = [g for g in document["runs"][0]["per_rank"][1]["process_groups"]
               if g["name"] == "tp"]
    assert rank1["comm_ms_per_step"] == pytest.approx(0.050)


def test_hosts_from_the_profilers_default_file_names_split_intra_and_inter_node(tmp_path):
    """Ranks 0 and 1 on hosts ``node-a`` and ``node-b``: the tp group {0, 1} crosses nodes,
    all its time is inter-node; the dp groups hold ranks 2 and 3, whose hosts are unknown."""
    two_group_trace(tmp_path / "run" / "node-a_4242.1700000000000.pt.trace.json")
    two_group_trace(tmp_path / "run" / "node-b_4343.1700000000001.pt.trace.json", rank=1)
    [run] = analyze_paths([tmp_path / "run"], AnalysisOptions(jobs=1)).runs
    groups = {g.name: g for g in run.process_groups}
    assert groups["tp"].locality == {0: "inter-node", 1: "inter-node"}
    assert groups["dp"].locality == {0: None, 1: None}
    rows = {row["name"]: row for row in to_json_document(analyze_paths(
        [tmp_path / "run"], AnalysisOptions(jobs=1)))["runs"][0]["process_groups"]}
    assert rows["tp"]["inter_node_ms_per_step"] == pytest.approx(0.070)
    assert rows["tp"]["intra_node_ms_per_step"] == 0
    assert rows["dp"]["locality"] is None and rows["dp"]["inter_node_ms_per_step"] is None
    assert not any("cannot be told" in note for note in run.notes)


def test_the_recorded_mesh_is_split_into_its_two_dimensions():
    """Ground truth: run.json's mesh says each rank issues 8 all-gathers and 4 reduce-scatters
    over its dp group and 3 all-reduces over its tp group per step, each inside its
    ``ddpprof::group`` span (test_fsdp_tp checks the spans against the mesh)."""
    mesh = read_manifest(FSDP_TP / "run.json").mesh
    [run] = analyze_paths([FSDP_TP], AnalysisOptions(jobs=1)).runs
    groups = {g.name: g for g in run.process_groups}
    assert sorted(groups) == ["dp", "tp"]
    for dim in mesh.dims:
        group = groups[dim.name]
        assert group.description == f"mesh_{dim.name}" and group.source == "ddpprof::group spans"
        assert sorted(group.members) == sorted(tuple(g.ranks) for g in dim.groups)
        for rank, figures in group.per_rank.items():
            assert figures.calls_by_kind == dim.collectives_per_step, (dim.name, rank)
            assert figures.exposed_us <= figures.comm_us
            [mine] = [g for g in dim.groups if rank in g.ranks]
            assert (figures.group.key, figures.group.ranks) == (mine.pg_name, tuple(mine.ranks))
        assert set(group.locality.values()) == {"intra-node"}     # run.json: one node
    for rank in run.ranks:
        assert sum(f.calls for f in rank.process_groups) == rank.calls.n
        assert set(rank.calls.group_size) == {2}                  # bus bandwidth at size 2
    assert any("ddpprof::group spans" in note for note in run.notes)
    # the profile diff compares: communication parts by the group's name, which is the same
    # on every rank (c10d numbers rank 0's dp group "1" and rank 1's "2"), so each part's calls
    # per step are what every rank issues, not that diluted over the ranks of other groups
    from ddpprof.analysis.profile import run_profile

    profile = run_profile(run)
    calls = {(c.kind, c.process_group): c.calls_per_step for c in profile.collectives}
    assert calls == {(kind, dim.name): n for dim in mesh.dims
                     for kind, n in dim.collectives_per_step.items()}
    assert {(p.item, p.process_group) for p in profile.parts
            if p.group == "communication"} == set(calls)


def document_with_groups(overlap_dp: float, overlap_tp_rank1: float) -> dict:
    return {"schema": "ddpprof.analyze", "version": 4, "errors": [], "runs": [{
        "run": "a", "variant": "fsdp_tp", "status": "complete", "overlap_pct": 10.0,
        "process_groups": [{"name": "dp", "description": "mesh_dp", "overlap_pct": overlap_dp},
                           {"name": "tp", "description": "mesh_tp", "overlap_pct": 5.0}],
        "per_rank": [{"rank": 1, "overlap_pct": 1.0, "process_groups": [
            {"name": "tp", "description": "mesh_tp", "overlap_pct": overlap_tp_rank1}]}]}]}


def test_the_gate_reads_a_groups_metric_by_name_description_and_rank():
    now = runs_of(document_with_groups(40.0, 3.0), "now")
    before = runs_of(document_with_groups(60.0, 4.0), "base")
    rules = ["overlap_pct[dp] >= 50", "overlap_pct[group=mesh_dp] >= baseline - 30",
             "overlap_pct[tp, rank=1] >= baseline", "overlap_pct[rank=1,group=tp] >= 2"]
    verdicts = evaluate([parse_rule(r) for r in rules], now, before)
    assert [(v.current, v.verdict) for v in verdicts] == [
        (40.0, "FAIL"), (40.0, "pass"), (3.0, "FAIL"), (3.0, "pass")]
    with pytest.raises(UsageError, match="no process group 'ep'"):
        evaluate([parse_rule("overlap_pct[ep] >= 1")], now, before)
    with pytest.raises(UsageError, match="a selector is"):
        evaluate([parse_rule("overlap_pct[dp, tp] >= 1")], now, before)


def test_kernels_of_an_unknown_library_are_communication_by_structure(tmp_path):
    """Expert-parallel dispatch and combine kernels with names no table knows, launched inside
    ``dispatch``/``combine`` annotations on their own stream: communication, with a note; by
    name only (``--no-structural-comm``) they are compute. A GEMM launched outside stays
    compute. Compute [0, 100] on stream 7; dispatch [20, 60] and combine [80, 140] on 30."""
    events = [kernel("gemm", 0, 100, 1), launch(1, 1),
              span("dispatch", 10, 15, cat="user_annotation"), launch(11, 2),
              kernel("moe_lib::token_shuffle<128>", 20, 60, 2, stream=30),
              span("combine", 70, 75, cat="user_annotation"), launch(71, 3),
              kernel("moe_lib::token_gather<128>", 80, 140, 3, stream=30)]
    trace = load(write_trace(tmp_path / "rank0.json", events, backend="nccl"))
    found = analyze_one(trace)
    plain = analyze_one(trace, structural_comm=False)
    assert (found.breakdown.comm_us, found.breakdown.compute_us) == (100, 100)
    assert found.breakdown.exposed_comm_us == 40 and found.breakdown.overlap_pct == 60
    assert set(found.collectives) == {"ep_dispatch", "ep_combine"}
    # the trace names no group for them: not the default group, which they may not have used
    assert [(f.group.name, f.calls) for f in found.process_groups] == [("structural", 2)]
    [note] = [n for n in found.notes if "by structure" in n]
    assert note.startswith("2 kernels (0.10 ms) on stream 30") and "`dispatch`" in note
    assert (plain.breakdown.comm_us, plain.breakdown.compute_us) == (0, 140)
    assert not plain.collectives


def test_copies_inside_a_collective_that_launched_an_nccl_kernel_stay_compute(tmp_path):
    """A ``c10d::allgather_`` that launched an NCCL kernel and a copy on the compute stream,
    where a GEMM launched outside it runs too: the copy stays compute (the span's
    communication is the NCCL kernel)."""
    events = [span("c10d::allgather_", 0, 20), launch(1, 1), launch(5, 2), launch(30, 3),
              kernel("ncclDevKernel_AllGather_RING_LL", 10, 50, 1, stream=20),
              kernel("CatArrayBatchedCopy", 60, 70, 2), kernel("gemm", 100, 150, 3)]
    result = analyze_one(load(write_trace(tmp_path / "rank0.json", events, backend="nccl")))
    assert (result.breakdown.comm_us, result.breakdown.compute_us) == (40, 60)
    assert not any("by structure" in n for n in result.notes)


def test_dlrm_all_to_alls_are_named_by_their_c10d_op_and_findings_name_no_ddpprof_flag():
    [run] = analyze_paths([DLRM], AnalysisOptions(jobs=1)).runs
    assert len(run.ranks) == 8
    for rank in run.ranks:
        assert {k: s.calls for k, s in rank.collectives.items()} == {
            "all_to_all": 5, "all_reduce": 3}
        [group] = rank.process_groups
        assert (group.group.name, group.calls) == ("default", 8)
    found = findings([run])
    assert found
    flags = re.compile(r"--[a-z]|" + "|".join(re.escape(v) for v in VARIANT_NAMES
                                               if v not in ("single", "fsdp")))
    for finding in found:
        assert not flags.search(finding.message), finding.message


def test_dlrm_all_to_all_receive_imbalance_from_the_c10d_ops_by_hand():
    """Each rank's ``c10d::alltoall_base_(output, input)`` ops in order: the k-th of every rank
    are one all-to-all. Received bytes = the output's numel × element size; the imbalance is
    Σ over calls of the largest a rank received / Σ of the mean (rank 3's 13,312 ints in the
    5th call dominate)."""
    sizes = {"int": 4, "float": 4, "long int": 8}
    received: dict[int, list[int]] = {}
    for path in sorted(DLRM.glob("*.json.gz")):
        document = json.loads(gzip.decompress(path.read_bytes()))
        ops = sorted((e for e in document["traceEvents"] if e.get("ph") == "X"
                      and e["name"] == "c10d::alltoall_base_"), key=lambda e: e["ts"])
        received[document["distributedInfo"]["rank"]] = [
            math.prod(e["args"]["Input Dims"][0]) * sizes[e["args"]["Input type"][0]]
            for e in ops]
    calls = list(zip(*received.values(), strict=True))
    expected = sum(max(c) for c in calls) / sum(statistics.fmean(c) for c in calls)
    [run] = analyze_paths([DLRM], AnalysisOptions(jobs=1)).runs
    [group] = run.process_groups
    assert group.receive_imbalance.ratio == pytest.approx(expected, rel=1e-12)
    assert group.receive_imbalance.heaviest_rank == 3 and group.receive_imbalance.matched_calls == 5
    assert group.imbalance.ratio == pytest.approx(1.0)    # every rank sends as much
    [row] = to_json_document(analyze_paths([DLRM], AnalysisOptions(jobs=1)))["runs"][0][
        "process_groups"]
    assert (row["a2a_imbalance_side"], row["a2a_heaviest_rank"]) == ("receive", 3)
    assert row["locality"] is None       # one host, but nothing in the trace says so
    assert "a2a_imbalance" in {f.code for f in findings([run])}


def test_findings_name_ddpprof_flags_only_for_runs_ddpprof_recorded():
    [run] = analyze_paths([FSDP_TP], AnalysisOptions(jobs=1)).runs
    assert any("--grad-accum" in f.message for f in findings([run]))


def test_tp_exposed_fires_when_tensor_parallel_traffic_dominates(tmp_path):
    """The two-group trace with the dp all-reduce hidden (moved into [0, 40]): tp's exposed
    50 µs are all the groups' exposed time and 50/220 of the step."""
    events = [kernel("gemm_a", 0, 100, 1), kernel("gemm_b", 160, 210, 2),
              collective("ncclDevKernel_AllReduce_Sum_f32", 0, 40, DP, 1000, 1, 3),
              collective("ncclDevKernel_AllReduce_Sum_f32", 120, 170, TP, 500, 1, 4),
              collective("ncclDevKernel_AllReduce_Sum_f32", 200, 220, TP, 500, 2, 5)]
    write_trace(tmp_path / "run" / "rank0.json", events, world_size=4, backend="nccl")
    [run] = analyze_paths([tmp_path / "run"], AnalysisOptions(jobs=1)).runs
    [finding] = [f for f in findings([run]) if f.code == "tp_exposed"]
    evidence = {e.name: e.value for e in finding.evidence}
    assert evidence["group"] == "tp" and evidence["exposed_ms_per_step"] == 0.05
    assert evidence["share_of_step"] == round(100 * 50 / 220, 1)
    assert "--tp" not in finding.message


def queued_trace(path: Path, tp_stream: int) -> Path:
    """Compute on stream 7 over [0, 100] and [200, 400]. A tp all-reduce, launched at 95, runs
    [100, 200] on stream ``tp_stream``: nothing hides it (blocking). A dp all-reduce on stream
    20, launched at 120, runs [200, 300]; a second one, launched at 310, runs [320, 360] (it
    did not wait). Another tp all-reduce, launched at 365, runs [370, 380] on ``tp_stream``."""
    events = [kernel("gemm_a", 0, 100, 1), kernel("gemm_b", 200, 400, 2),
              launch(95, 3), {**collective("ncclDevKernel_AllReduce_Sum_f32", 100, 200, TP,
                                           500, 1, 3), "tid": tp_stream},
              launch(120, 4), collective("ncclDevKernel_AllReduce_Sum_f32", 200, 300, DP,
                                         1000, 1, 4),
              launch(310, 5), collective("ncclDevKernel_AllReduce_Sum_f32", 320, 360, DP,
                                         1000, 2, 5),
              launch(365, 6), {**collective("ncclDevKernel_AllReduce_Sum_f32", 370, 380, TP,
                                            500, 2, 6), "tid": tp_stream}]
    for event in events:
        if event.get("tid") == tp_stream and "stream" in event["args"]:
            event["args"] = {**event["args"], "stream": tp_stream}
    return write_trace(path, events, world_size=4, backend="nccl")


def test_collectives_queued_behind_another_groups_blocking_call_by_hand(tmp_path):
    """On one stream, the first dp all-reduce was ready at 120 and the tp all-reduce before it
    ran until 200: it queued 200 − 120 = 80 µs behind group tp. The second dp call was ready at
    310, after the call before it ended (300): 0. tp's second call was ready at 365, after dp's
    second ended (360): 0. The finding: 80 µs of the 400 µs window (one step), 20%. With tp on
    a stream of its own, nothing is before dp's calls: no queue and no finding."""
    write = lambda folder, stream: queued_trace(tmp_path / folder / "rank0.json", stream)  # noqa: E731
    write("shared", 20)
    result = analyze_one(load(tmp_path / "shared" / "rank0.json"), drop_last_step=False)
    figures = {f.group.name: f for f in result.process_groups}
    assert figures["dp"].queued_us == 80 and figures["dp"].queued_behind == "tp"
    assert figures["tp"].queued_us == 0 and figures["tp"].queued_behind is None
    [run] = analyze_paths([tmp_path / "shared"], AnalysisOptions(jobs=1)).runs
    [finding] = [f for f in findings([run]) if f.code == "comm_queued"]
    evidence = {e.name: e.value for e in finding.evidence}
    assert (evidence["group"], evidence["behind"], evidence["queued_ms_per_step"],
            evidence["share_of_step"]) == ("dp", "tp", 0.08, 20.0)
    write("own", 21)
    result = analyze_one(load(tmp_path / "own" / "rank0.json"), drop_last_step=False)
    assert all(f.queued_us == 0 for f in result.process_groups)
    [run] = analyze_paths([tmp_path / "own"], AnalysisOptions(jobs=1)).runs
    assert not [f for f in findings([run]) if f.code == "comm_queued"]


def test_a_groups_own_pipeline_is_not_queueing_but_its_blocking_call_is():
    """Three dp calls on stream 20: the second, ready at 5, waits for the first [0, 10], which
    compute hides (not blocking): not counted. The third, ready at 12, waits behind the second
    [11, 30], which nothing hides (blocking): 30 − 12 = 18 µs behind "dp's blocking
    all_reduce". Host calls (stream −1) never queue."""
    dp = GroupRef("1", "dp", None, None, "trace arguments")
    calls = CollectiveCalls(["all_reduce", "all_reduce", "all_reduce", "all_reduce"],
                            np.array([0.0, 11.0, 30.0, 31.0]), np.array([10.0, 30.0, 40.0, 35.0]),
                            [4] * 4, [2] * 4, ["1"] * 4, [None] * 4, groups=[dp] * 4,
                            stream=[20, 20, 20, -1], ready_us=[0.0, 5.0, 12.0, 0.0])
    compute = iv.union(np.array([0.0]), np.array([10.0]))
    waited, behind = queued(calls, compute)
    assert waited.tolist() == [0, 0, 18, 0]
    assert behind == [None, None, "dp's blocking all_reduce", None]


def test_all_to_all_imbalance_by_hand():
    """Two matched calls: {0: 100, 1: 300} and {0: 200, 1: 200}: Σ max 500 over Σ mean 400."""
    found = send_imbalance([{0: 100, 1: 300}, {0: 200, 1: 200}, {0: None, 1: 5}])
    assert (found.ratio, found.heaviest_rank, found.matched_calls) == (1.25, 1, 2)
    assert send_imbalance([{0: None, 1: 3}]) is None
    assert split_imbalance([(1, 3), None, (2, 2)]) == pytest.approx(5 / 4)


def test_an_uneven_all_to_all_is_a_finding(tmp_path):
    """Rank 1 sends 3× rank 0's bytes in each of two all-to-alls: Σ max / Σ mean = 1.5."""
    for rank, nelems in ((0, 1000), (1, 3000)):
        events = [kernel("gemm", 0, 10, 1)] + [kernel(
            "ncclDevKernel_SendRecv", 20 + 100 * k, 100 + 100 * k, 2 + k, stream=20, **{
                "Collective name": "all_to_all", "In msg nelems": nelems, "dtype": "Float",
                "Process Group Name": "5", "Process Group Description": "mesh_ep",
                "Seq": k}) for k in range(2)]
        write_trace(tmp_path / "run" / f"rank{rank}.json", events, rank=rank, backend="nccl")
    [run] = analyze_paths([tmp_path / "run"], AnalysisOptions(jobs=1)).runs
    [group] = run.process_groups
    assert group.name == "ep" and group.imbalance.ratio == 1.5
    assert group.imbalance.heaviest_rank == 1
    document = to_json_document(analyze_paths([tmp_path / "run"], AnalysisOptions(jobs=1)))
    assert document["runs"][0]["process_groups"][0]["a2a_imbalance"] == 1.5
    assert [f.code for f in findings([run]) if f.code == "a2a_imbalance"] == ["a2a_imbalance"]


spans_strategy = st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 200),
                                    st.sampled_from(["dp", "tp", "ep"])), min_size=1,
                          max_size=30)


@settings(max_examples=200, deadline=None)
@given(calls=spans_strategy, compute=st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 300)),
                                               max_size=20))
def test_group_figures_invariants(calls, compute):
    """Overlap in [0, 100], exposed ≤ communication ≤ call time, calls sum to all calls."""
    starts = np.array([s for s, _, _ in calls])
    ends = starts + np.array([d for _, d, _ in calls])
    made = CollectiveCalls(
        kind=["all_reduce"] * len(calls), start_us=starts, end_us=ends,
        size_bytes=[1000] * len(calls), group_size=[2] * len(calls),
        group=[g for _, _, g in calls], sequence=[None] * len(calls),
        groups=[GroupRef(g, g) for _, _, g in calls])
    lane = iv.union(np.array([s for s, _ in compute]), np.array([s + d for s, d in compute]))
    figures = group_figures(made, lane)
    assert sum(f.calls for f in figures) == len(calls)
    for f in figures:
        assert f.exposed_us <= f.comm_us + 1e-9 and f.comm_us <= f.call_us + 1e-9
        assert f.overlap_pct is None or 0 <= f.overlap_pct <= 100 + 1e-9
        if f.overlap_pct is not None:
            assert f.comm_us * (1 - f.overlap_pct / 100) == pytest.approx(f.exposed_us, abs=1e-6)
