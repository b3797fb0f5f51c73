"""The graph replay with edits (``ddpprof.graph.edit``, ``whatif``) and under the overlap tax
(``contended``): hand-built graphs and a two-rank synthetic trace whose replays under every
edit are worked out on paper, then invariants as fuzz tests."""

from __future__ import annotations

import numpy as np
import pytest
import trace_builders as tb
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpprof.graph import contended
from ddpprof.graph.build import step_graphs
from ddpprof.graph.contended import Roles, Tax
from ddpprof.graph.edit import CollectiveCost, RankGradients, Rebucket, WorldSize
from ddpprof.graph.model import EdgeKind, Node, NodeKind, recorded_graph
from ddpprof.graph.path import critical_path, period_us, replay, step_length_us
from ddpprof.graph.whatif import Edit, Outcome, overlap_pct, replay_edited
from ddpprof.metrics.cost import CostModel
from ddpprof.trace.loader import load

#: α = 0, β = 1000 bytes/µs: a 100,000-byte all-reduce on 2 ranks moves 100,000 bytes
#: (2(N−1)/N × size) in 100 µs, the recorded transfers' time: the cost level is 1
COST = CollectiveCost(CostModel(0.0, 1000.0, None, 0), 1.0, "gloo")


def two_rank_graph(tmp_path):
    """``trace_builders.two_buckets``' step as a graph."""
    traces = {rank: load(path) for rank, path in enumerate(tb.two_buckets(tmp_path))}
    (graph,), _ = step_graphs(traces)
    return graph


def rebucketed(graph, cap_mib: float) -> Rebucket:
    """Both ranks' two gradients, registered in the reverse of the order they became ready."""
    ranks = {}
    for rank in (0, 1):
        grads = sorted((g for g in graph.gradients if g.rank == rank),
                       key=lambda g: graph.nodes[g.node].end_us)
        ranks[rank] = RankGradients(grads, [1, 0])
    return Rebucket(cap_mib, "all_reduce", False, ranks)


def test_the_graph_names_its_collectives_and_gradients(tmp_path):
    graph = two_rank_graph(tmp_path)
    assert [(c.rank, c.kind, c.size_bytes) for c in graph.collectives] == [
        (0, "all_reduce", 100_000)] * 2 + [(1, "all_reduce", 100_000)] * 2
    assert all([graph.nodes[k].name for k in c.issue] == ["c10d::allreduce_"]
               for c in graph.collectives)
    assert [(g.rank, g.size_bytes, graph.nodes[g.node].end_us) for g in graph.gradients] == [
        (0, 100_000, 310), (0, 100_000, 630), (1, 100_000, 310), (1, 100_000, 630)]


def test_each_edit_by_hand(tmp_path):
    graph = two_rank_graph(tmp_path)
    none = Tax.none()
    # unedited: the recorded step, rank 0's 0-1000
    assert replay_edited(graph, none).step_us == pytest.approx(1000)
    # one bucket (1 MiB holds both): the c10d ops go (mm 310-610, gradient 2 610-620), one
    # issue after gradient 2 (the removed ops' median, 10 µs: 620-630), a 200,000-byte
    # all-reduce 630-830 (arriving as the removed ones did, 0 µs after their issue), the
    # wait 10 µs after it (840), the optimizer 850-950, the step's end 140 µs later: 1090
    one = replay_edited(graph, none, rebucketing=rebucketed(graph, 1.0), cost=COST)
    assert (one.step_us, one.buckets) == (pytest.approx(1090), 1)
    # a bucket per gradient (below 100,000 bytes): as recorded, the issues where they were
    two = replay_edited(graph, none, rebucketing=rebucketed(graph, 0.05), cost=COST)
    assert (two.step_us, two.buckets) == (pytest.approx(1000), 2)
    # 4 ranks: forward and backward compute at 2/4 (mm 150 each; AccumulateGrad, c10d and
    # the optimizer as they were), all-reduces at 2·3/4 ÷ 1 = 1.5x (150 µs): mm 0-150, g1
    # 150-160, c10d 160-170, all-reduce 1 170-320, mm 170-320, g2 320-330, c10d 330-340,
    # all-reduce 2 340-490, wait 500, optimizer 510-610, end 750
    world = replay_edited(graph, none, world=WorldSize(4, 2, False), cost=COST)
    assert world.step_us == pytest.approx(750)
    # the 4 ranks on the 2 cores the 2 shared: all work twice as long again (mm 300 each,
    # g, c10d 20, all-reduces 300, the optimizer 200): mm 0-300, g1 -320, c10d1 -340,
    # all-reduce 1 340-640, mm 340-640, g2 -660, c10d2 -680, all-reduce 2 680-980, wait
    # 990, optimizer 1000-1200, end 1340
    crowded = replay_edited(graph, none, world=WorldSize(4, 2, False, shared_cores=2),
                            cost=COST)
    assert crowded.step_us == pytest.approx(1340)
    # GEMMs 50% faster: the same compute, the all-reduces 100 µs: 340-440, wait 450, 700
    assert replay_edited(graph, none, [Edit("faster", "gemm", 50)]).step_us == \
        pytest.approx(700)
    # network 50% faster: all-reduce 2 640-690, wait 700, optimizer 710-810, end 950
    assert replay_edited(graph, none, [Edit("faster-network", "", 50)]).step_us == \
        pytest.approx(950)
    # rank 1 100 µs late: rank 0 waits in each all-reduce for it (transfers 420-520 and
    # 740-840), rank 0's wait returns at 850, its step ends at 1100, as rank 1's does
    assert replay_edited(graph, none, [Edit("rank-delay", "1", 100)]).step_us == \
        pytest.approx(1100)


def test_a_bucket_is_launched_and_copied_back_as_ddps_reducer_does(tmp_path):
    """PyTorch DDP's Reducer copies each gradient into its bucket (a 20 µs mul) inside the
    autograd engine's span around its ``AccumulateGrad``, before it launches the bucket; after
    backward it copies each bucket back into the gradients once that bucket's all-reduce has
    ended. A bucket re-made at another cap launches after the first copy, and the copies back
    wait for the bucket that now holds their gradients."""
    traces = {rank: load(path) for rank, path in enumerate(tb.reducer_buckets(tmp_path))}
    (graph,), _ = step_graphs(traces)
    hooks_end = [graph.nodes[g.launchable] for g in graph.gradients if g.rank == 0]
    assert [(n.name, n.end_us) for n in hooks_end] == [("c10d::allreduce_", 340),
                                                       ("c10d::allreduce_", 680)]
    copies = [graph.nodes[c.node] for c in graph.bucket_copies if c.rank == 0]
    assert [(n.name, n.start_us) for n in copies] == [("aten::copy_", 680), ("aten::copy_", 790)]
    none = Tax.none()
    # a bucket per gradient: as recorded (launched and copied back where they were)
    assert replay_edited(graph, none, rebucketing=rebucketed(graph, 0.05),
                         cost=COST).step_us == pytest.approx(1000)
    # one bucket: the c10d ops take no time (mm 330-630, gradient 2 630-640, mul 640-660),
    # the issue 660-670, the 200,000-byte all-reduce 670-870; the copy out of bucket 1 waits
    # for it (870-880), the wait ends 10 µs after it (880), the second copy 880-890, the
    # optimizer 890-990, the step's end 100 µs later: 1090. Launched when gradient 2 was
    # accumulated (640) the step would end at 1070; with the first copy where it was recorded
    # (right after the last launch) that copy would run at 670-680, beside the all-reduce.
    one = replay_edited(graph, none, rebucketing=rebucketed(graph, 1.0), cost=COST)
    assert (one.step_us, one.buckets) == (pytest.approx(1090), 1)
    first_copy = graph.bucket_copies[0].node
    assert (one.schedule.start_us[first_copy] - graph.origin_us,
            one.schedule.end_us[first_copy] - graph.origin_us) == (pytest.approx(870),
                                                                   pytest.approx(880))


def test_a_wait_before_a_copy_out_of_a_bucket_is_not_replayed_twice(tmp_path):
    """The Reducer's wait for bucket 2 leaves no span: the thread idles from 690 and copies
    bucket 2 at 1080, 300 µs after bucket 2's all-reduce ended (too late for the graph to see
    a wait: ``build.WAKE_UP_SLACK_US``), then the optimizer 1090-1190; the step ends at 1300."""
    paths = tb.reducer_buckets(tmp_path, untraced_wake_up_us=300)
    traces = {rank: load(path) for rank, path in enumerate(paths)}
    (graph,), _ = step_graphs(traces)
    none = Tax.none()
    assert replay_edited(graph, none).step_us == pytest.approx(1300)
    # at the recorded cap the idle gap becomes the wait for bucket 2 plus the 300 µs wake-up:
    # copy 2 at 780 + 300 = 1080, as recorded
    assert replay_edited(graph, none, rebucketing=rebucketed(graph, 0.05),
                         cost=COST).step_us == pytest.approx(1300)
    # one bucket: the all-reduce 670-870, copy 1 870-880; bucket 2's gradient is in the one
    # bucket, which copy 1 waited for already: copy 2 880-890, the optimizer 890-990, the end
    # 110 µs later, 1100 (keeping the recorded 390 µs idle gap would end it at 1490)
    one = replay_edited(graph, none, rebucketing=rebucketed(graph, 1.0), cost=COST)
    assert one.step_us == pytest.approx(1100)


def test_overlap_over_steps_as_analyze_measures_a_window():
    """Two steps, two ranks: communication 100 and 50 µs (exposed 50 and 0), then 100 and 150
    (exposed 0 and 75). Per rank over both steps: rank 0 1 − 50/200 = 75 %, rank 1
    1 − 75/200 = 62.5 %; their mean, 68.75 % (the median of the steps' own overlaps would
    say 68.3 %: 66.7 and 70). A rank without communication is left out of the mean."""
    def outcome(comm, exposed):
        return Outcome(0.0, np.array(comm, dtype=float), np.array(exposed, dtype=float), None,
                       None, None)

    steps = [outcome([100, 50, 0], [50, 0, 0]), outcome([100, 150, 0], [0, 75, 0])]
    assert overlap_pct(steps) == pytest.approx(68.75)
    assert steps[0].overlap_pct == pytest.approx(75.0)    # ranks 50 % and 100 %
    assert steps[0].exposed_us == pytest.approx(50 / 3)
    assert overlap_pct([outcome([0, 0], [0, 0])]) is None


def test_ops_inside_a_collective_or_a_wait_are_not_compute(tmp_path):
    """Both ranks alike, in ProfilerStep#1 0-1000: thread 1 runs mm 0-300, c10d::allreduce_
    300-310, mm 310-500, ddpprof::wait 500-700 holding a copy 650-690, add_ 700-800; gloo's
    thread 9 runs the all-reduce 320-640, holding a copy 600-630 (gloo's own). ``analyze``
    counts neither copy as compute (they are inside a wait and a collective), so compute
    0-300, 310-500 and 700-800 hides 180 of the all-reduce's 320 µs: 56.25 %. The graph
    makes the first copy part of the collective and the second host work, and its unedited
    replay measures the same 56.25 % (with the copies as compute it would say 65.6 %)."""
    from ddpprof.graph.path import replay as plain_replay
    from ddpprof.graph.whatif import communication

    paths = []
    for rank in range(2):
        events = [tb.step(1, 0, 1000), tb.step(2, 1000, 1100),
                  tb.span("aten::mm", 0, 300), tb.span("c10d::allreduce_", 300, 310),
                  tb.span("aten::mm", 310, 500), tb.span("ddpprof::wait", 500, 700),
                  tb.span("aten::copy_", 650, 690), tb.span("aten::add_", 700, 800),
                  tb.gloo_reduce(320, 640), tb.span("aten::copy_", 600, 630, tid=9)]
        paths.append(tb.write_trace(tmp_path / f"rank{rank}.json", events, rank=rank))
    traces = {rank: load(path) for rank, path in enumerate(paths)}
    (graph,), _ = step_graphs(traces)
    copies = {n.lane: n.kind for n in graph.nodes if n.name == "aten::copy_" and n.rank == 0}
    assert copies == {"thread 9": NodeKind.COMMUNICATION, "thread 1": NodeKind.HOST}
    comm, exposed = communication(graph, plain_replay(graph))
    assert list(comm) == [320, 320] and list(exposed) == [140, 140]
    assert overlap_pct([replay_edited(graph)]) == pytest.approx(56.25)
    assert tb.analyze_one(traces[0]).breakdown.overlap_pct == pytest.approx(56.25)


def test_the_overlap_tax_by_hand():
    """One rank: a compute node (work 100) and a transfer (work 50) both start at 0. With a
    compute tax of 50% and a communication tax of 100%, compute runs at 2/3 and the transfer
    at 1/2 while both run: the transfer does 50 by 100 (compute has done 66.7), and compute
    does the 33.3 left alone: 133.3."""
    nodes = [Node(0, "thread 1", NodeKind.STEP_START, "start", 0.0, 0.0),
             Node(0, "thread 1", NodeKind.COMPUTE, "aten::add", 0.0, 100.0),
             Node(0, "thread 9", NodeKind.COMMUNICATION, "gloo:all_reduce", 0.0, 50.0)]
    graph = recorded_graph("s", 0.0, nodes, [(0, 1, EdgeKind.PROGRAM), (0, 2, EdgeKind.STEP)])
    roles, tax = Roles.of(graph), Tax({"gemm": 0.0, "other": 0.5}, 1.0)
    schedule = contended.replay(graph, np.array([0.0, 100.0, 50.0]), roles, tax)
    assert schedule.end_us[1:].tolist() == pytest.approx([400 / 3, 100])
    # the same times recorded: their work alone is what was given (66.7 at 2/3 + 33.3 at
    # 1; 100 at 1/2), and the unedited replay gives them back
    edges = [(0, 1, EdgeKind.PROGRAM), (0, 2, EdgeKind.STEP)]
    recorded = recorded_graph("s", 0.0, [
        nodes[0], Node(0, "thread 1", NodeKind.COMPUTE, "aten::add", 0.0, 400 / 3),
        Node(0, "thread 9", NodeKind.COMMUNICATION, "gloo:all_reduce", 0.0, 100.0)], edges)
    work = contended.recorded_work(recorded, roles, tax)
    assert work.tolist() == pytest.approx([0, 100, 50])
    # two transfers at once share the rank's bandwidth: work 50 each, both end at 100
    shared = recorded_graph("s", 0.0, [nodes[0], *(
        Node(0, f"thread {t}", NodeKind.COMMUNICATION, "gloo:all_reduce", 0.0, 100.0)
        for t in (8, 9))], [(0, 1, EdgeKind.STEP), (0, 2, EdgeKind.STEP)])
    assert contended.recorded_work(shared, Roles.of(shared), Tax.none()).tolist() == \
        pytest.approx([0, 50, 50])



def test_one_collectives_transfers_progress_together():
    """Two ranks' transfers of one collective (work 10 each) start at 0; rank 1 also computes
    from 0 to 10, and a communication tax of 100% halves its transfer's rate meanwhile.
    Apart, rank 0's ends at 10 and rank 1's does 5 by 10 and the rest alone: 15. Together
    (a ring moves as fast as its slowest member), both run at 1/2 until 10, then at 1: both
    end at 15. The compute is untaxed (no compute tax): 0 to 10."""
    nodes = [Node(0, "thread 1", NodeKind.STEP_START, "start", 0.0, 0.0),
             Node(0, "thread 9", NodeKind.COMMUNICATION, "gloo:all_reduce", 0.0, 10.0),
             Node(1, "thread 1", NodeKind.STEP_START, "start", 0.0, 0.0),
             Node(1, "thread 9", NodeKind.COMMUNICATION, "gloo:all_reduce", 0.0, 10.0),
             Node(1, "thread 1", NodeKind.COMPUTE, "aten::add", 0.0, 10.0)]
    graph = recorded_graph("s", 0.0, nodes, [(0, 1, EdgeKind.STEP), (2, 3, EdgeKind.STEP),
                                             (2, 4, EdgeKind.PROGRAM)])
    roles, tax = Roles.of(graph), Tax({"gemm": 0.0, "other": 0.0}, 1.0)
    work = np.array([0.0, 10.0, 0.0, 10.0, 10.0])
    apart = contended.replay(graph, work, roles, tax)
    assert apart.end_us[[1, 3, 4]].tolist() == pytest.approx([10, 15, 10])
    together = contended.replay(graph, work, roles, tax, together=[[1, 3]])
    assert together.end_us[[1, 3, 4]].tolist() == pytest.approx([15, 15, 10])

# ---- invariants --------------------------------------------------------------------------

@st.composite
def random_graphs(draw, kinds=tuple(k for k in NodeKind if k != NodeKind.STEP_START)):
    """Any recorded times (overlapping, out of order: clock skew), forward edges, and nodes
    of ``kinds``."""
    n = draw(st.integers(1, 14))
    nodes = []
    for _ in range(n):
        kind = draw(st.sampled_from(kinds))
        duration = 0.0 if kind in (NodeKind.ARRIVE, NodeKind.WAIT, NodeKind.STEP_END) else \
            draw(st.floats(0, 50, allow_nan=False))
        nodes.append(Node(draw(st.integers(0, 2)), draw(st.sampled_from(
            ["thread 1", "thread 2", "stream 7"])), kind, draw(st.sampled_from(
                ["aten::mm", "aten::add", "gloo:all_reduce"])), draw(st.floats(
                    0, 100, allow_nan=False)), duration))
    edges = [(src, dst, draw(st.sampled_from(list(EdgeKind)))) for dst in range(1, n)
             for src in draw(st.sets(st.integers(0, dst - 1), max_size=3))]
    origin = min(node.start_us for node in nodes) - draw(st.floats(0, 10, allow_nan=False))
    return recorded_graph("fuzz", origin, nodes, edges)


taxes = st.builds(lambda gemm, other, comm: Tax({"gemm": gemm, "other": other}, comm),
                  st.floats(0, 4), st.floats(0, 4), st.floats(0, 4))


@settings(max_examples=200, deadline=None)
@given(random_graphs(), taxes)
def test_an_unedited_replay_is_the_recording(graph, tax):
    outcome = replay_edited(graph, tax)
    for i, node in enumerate(graph.nodes):
        assert outcome.schedule.start_us[i] == pytest.approx(node.start_us, abs=1e-6)
        assert outcome.schedule.end_us[i] == pytest.approx(node.end_us, abs=1e-6)
    # and its critical path's split sums to its length, its step is the recorded one's
    path = critical_path(outcome.graph, schedule=outcome.schedule)
    assert sum(path.split_us.values()) == pytest.approx(
        step_length_us(outcome.graph, outcome.schedule), abs=1e-6)
    assert outcome.step_us == pytest.approx(period_us(graph, replay(graph)), abs=1e-6)


@settings(max_examples=150, deadline=None)
@given(random_graphs(kinds=(NodeKind.COMPUTE, NodeKind.HOST, NodeKind.ARRIVE, NodeKind.WAIT)),
       taxes, st.floats(0, 99))
def test_faster_work_never_lengthens_the_step(graph, tax, pct):
    """Without transfers nothing contends: the replay is monotone. (With transfers it need not
    be, nor is the machine: a collective started sooner may share bandwidth with another one
    and end later.)"""
    before = replay_edited(graph, tax).step_us
    assert replay_edited(graph, tax, [Edit("faster", "compute", pct)]).step_us <= \
        before + 1e-6


@settings(max_examples=100, deadline=None)
@given(random_graphs(), taxes, st.floats(0, 99), st.floats(0, 99))
def test_an_edited_replays_path_tiles_its_step(graph, tax, compute_pct, network_pct):
    outcome = replay_edited(graph, tax, [Edit("faster", "compute", compute_pct),
                                         Edit("faster-network", "", network_pct)])
    assert outcome.step_us == pytest.approx(period_us(outcome.graph, outcome.schedule))
    path = critical_path(outcome.graph, schedule=outcome.schedule)
    assert path.length_us == pytest.approx(step_length_us(outcome.graph, outcome.schedule),
                                           abs=1e-6)
    assert sum(path.split_us.values()) == pytest.approx(path.length_us, abs=1e-6)
