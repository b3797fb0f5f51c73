"""Waiting versus transferring, on traces with known skew (every number worked out by hand)."""

from __future__ import annotations

import numpy as np
import pytest
from trace_builders import span, step, write_trace

from ddpprof.analysis import AnalysisOptions, analyze_paths, run_row
from ddpprof.metrics.comm import CollectiveCalls
from ddpprof.metrics.waits import wait_split


def calls(*spans: tuple[float, float], kind: str = "all_reduce", group: str = "",
          sequence: list[int | None] | None = None) -> CollectiveCalls:
    n = len(spans)
    return CollectiveCalls(kind=[kind] * n, start_us=np.array([s for s, _ in spans], float),
                           end_us=np.array([e for _, e in spans], float),
                           size_bytes=[None] * n, group_size=[2] * n, group=[group] * n,
                           sequence=sequence or [None] * n)


def test_late_rank_makes_the_other_wait():
    # rank 1 arrives 30 µs late at both calls; both finish together
    split = wait_split({0: calls((0, 100), (200, 260)), 1: calls((30, 100), (230, 260))})
    zero, one = split.by_rank[0], split.by_rank[1]
    assert (zero.transfer_us, zero.wait_us) == (70 + 30, 30 + 30)
    assert (one.transfer_us, one.wait_us) == (100, 0)
    assert one.caused_wait_us == 60 and zero.caused_wait_us == 0
    assert split.slowest_rank == 1 and zero.matched_calls == 2


def test_transfer_runs_from_the_last_start_to_each_rank_end():
    # rank 0 in [0,100), rank 1 in [40,110): together from 40
    split = wait_split({0: calls((0, 100)), 1: calls((40, 110))})
    assert (split.by_rank[0].transfer_us, split.by_rank[0].wait_us) == (60, 40)
    assert (split.by_rank[1].transfer_us, split.by_rank[1].wait_us) == (70, 0)


def test_a_rank_that_ended_before_the_last_start_waited_all_along():
    # clocks that disagree: rank 0's call ends before rank 1's starts; wait is clipped
    split = wait_split({0: calls((0, 10)), 1: calls((20, 30))})
    assert (split.by_rank[0].transfer_us, split.by_rank[0].wait_us) == (0, 10)


def test_sequence_numbers_match_calls_across_reordering_and_gaps():
    zero = calls((0, 50), (60, 100), (110, 120), sequence=[1, 2, 3])
    one = calls((10, 50), (70, 100), sequence=[1, 3])   # call 2 missing on rank 1
    split = wait_split({0: zero, 1: one})
    # seq 1: last start 10 -> rank 0 waits 10; seq 3: (110,120) vs (70,100): last start 110,
    # rank 1 ended at 100 -> transfer 0, wait 30; rank 0 transfer 10
    assert split.by_rank[0].wait_us == 10 and split.by_rank[0].transfer_us == 40 + 10
    assert split.by_rank[1].wait_us == 30 and split.by_rank[1].matched_calls == 2
    assert any("seen on one rank only" in reason for reason in split.unmatched)


def test_different_call_counts_match_the_first_calls_and_say_so():
    split = wait_split({0: calls((0, 10), (20, 30), (40, 50)), 1: calls((5, 10), (20, 30))})
    assert split.by_rank[0].matched_calls == 2 and split.by_rank[0].wait_us == 5
    assert any("different numbers of calls" in reason for reason in split.unmatched)


def test_groups_and_kinds_are_matched_apart():
    zero = CollectiveCalls(kind=["all_reduce", "all_gather"], start_us=np.array([0., 0.]),
                           end_us=np.array([10., 10.]), size_bytes=[None, None],
                           group_size=[2, 2], group=["0", "1"], sequence=[None, None])
    one = CollectiveCalls(kind=["all_gather", "all_reduce"], start_us=np.array([4., 2.]),
                          end_us=np.array([10., 10.]), size_bytes=[None, None],
                          group_size=[2, 2], group=["1", "0"], sequence=[None, None])
    split = wait_split({0: zero, 1: one})
    assert split.by_rank[0].wait_us == 2 + 4


def test_wait_equals_tb_plugin_where_the_definitions_coincide():
    """tb_plugin: transfer = per collective, the shortest duration across workers anchored at
    each worker's range end; wait = the rest. With ends aligned and no two collectives of a
    rank overlapping, that is exactly transfer = end − last start: for [0,50)/[20,50) and
    [60,90)/[65,90), tb_plugin's transfer is 30 + 25 on both, wait 20 + 5 and 0."""
    split = wait_split({0: calls((0, 50), (60, 90)), 1: calls((20, 50), (65, 90))})
    assert (split.by_rank[0].transfer_us, split.by_rank[0].wait_us) == (55, 25)
    assert (split.by_rank[1].transfer_us, split.by_rank[1].wait_us) == (55, 0)


def test_run_reports_wait_transfer_per_step_and_the_slowest_rank(tmp_path):
    run = tmp_path / "run"
    for rank, late in ((0, 0), (1, 40)):
        events = [step(0, 0, 1000), step(1, 1000, 2000), step(2, 2000, 3000)]
        for s in (0, 1):
            base = 1000 * s
            events += [span("aten::mm", base + 10, base + 300 + late),
                       span("gloo:all_reduce", base + 300 + late, base + 500,
                            cat="user_annotation", tid=2,
                            **{"Input Dims": [[100]], "Input type": ["float"]})]
        write_trace(run / f"rank{rank}.json", events, rank=rank)
    [result] = analyze_paths([run], AnalysisOptions()).runs
    row = run_row(result).to_dict()
    # per step: rank 0 waits 40 µs and transfers 160; rank 1 transfers 160; means 20 and 160
    assert row["comm_wait_ms_per_step"] == pytest.approx(0.020)
    assert row["comm_transfer_ms_per_step"] == pytest.approx(0.160)
    assert row["slowest_rank"] == 1 and row["straggler_rank"] == 1
    per_rank = {r.rank: r.wait for r in result.ranks}
    assert per_rank[1].caused_wait_us == 80 and per_rank[0].wait_us == 80
