"""The findings on slow ranks, on hand-made traces whose answers are worked out on paper
(``trace_builders.late_rank_steps``: 2 ranks, 4 calls of ``aten::mm`` of 100 µs each unless
told, the all-reduce 3 µs after the last mm, 30 µs after the last rank's start, then 16 µs
to the step's end)."""

from __future__ import annotations

import pytest
from trace_builders import late_rank_steps

from ddpprof.advice import findings
from ddpprof.advice.lateness import excess, lateness
from ddpprof.analysis import AnalysisOptions, analyze_paths


def analyzed(folder):
    [run] = analyze_paths([folder], AnalysisOptions(jobs=1)).runs
    return run


def rank_finding(folder):
    """The run's one finding that names a rank, or that none does (None)."""
    found = [f for f in findings([analyzed(folder)]) if f.rank is not None
             or f.code == "rotating_straggler"]
    assert len(found) <= 1, found
    return found[0] if found else None


def evidence(finding) -> dict:
    return {e.name: e.value for e in finding.evidence}


def test_lateness_step_by_step(tmp_path):
    """Rank 1 starts 200 µs late in steps 0 and 2, rank 0 in step 1: rank 0 waits 200 µs in
    its all-reduce in steps 0 and 2 (its main thread in a wait span, nothing else running: all
    of it exposed), rank 1 in step 1. A step is 200 + 400 + 3 + 30 + 16 = 649 µs."""
    folder, lengths = late_rank_steps(tmp_path / "run", [[0, 200], [200, 0], [0, 200]],
                                      [4, 4], [100, 100])
    assert lengths == [649, 649, 649]
    late = lateness(analyzed(folder).ranks)
    assert late.late_rank == [1, 0, 1]
    assert late.waited_ms.ravel().tolist() == pytest.approx([0.2, 0, 0.2, 0, 0.2, 0])
    # per rank: the others' wait for it, per step over the 3 steps
    assert late.caused_ms == pytest.approx({0: 0.2 / 3, 1: 0.4 / 3})
    assert late.step_ms == pytest.approx(0.649)
    assert late.culprit == 1 and late.late_steps(1) == 2 and late.waiting_steps(0.1) == 3


def test_a_late_start_is_untraced_time(tmp_path):
    """Rank 1 idles 200 µs at the start of every step: rank 0 waits 200 µs of the 649 µs step
    (30.8%), and rank 1's idle time is 200 µs beyond rank 0's (both idle 5 µs at the end)."""
    folder, _ = late_rank_steps(tmp_path / "run", [[0, 200]] * 3, [4, 4], [100, 100])
    found = rank_finding(folder)
    assert (found.code, found.rank, found.severity, found.confidence) == (
        "slow_rank_untraced", 1, "high", "high")
    assert found.alternatives == ()
    numbers = evidence(found)
    assert numbers["others_waiting_ms_per_step"] == pytest.approx(0.2)
    assert numbers["share_of_step"] == pytest.approx(30.8)
    assert numbers["untraced_ms_per_step"] == pytest.approx(0.2)
    assert numbers["extra_work_ms_per_step"] == 0 and numbers["slower_ms_per_step"] == 0
    assert numbers["slowdown"] == 1.0 and numbers["steps_waited_for"] == 3
    assert "slow data loading" in found.message and "late start" in found.message


def test_the_same_ops_slower_are_contention(tmp_path):
    """Rank 1's four mm take 150 µs each: it arrives 200 µs after rank 0 (step 649 µs); on
    the ops both call alike (the mm, and add_ of 10 µs) it spends 610 µs against 410 µs:
    1.488× slower, 200 µs more."""
    folder, _ = late_rank_steps(tmp_path / "run", [[0, 0]] * 3, [4, 4], [100, 150])
    found = rank_finding(folder)
    assert (found.code, found.rank, found.severity) == ("slow_rank_contended", 1, "high")
    numbers = evidence(found)
    assert numbers["slowdown"] == pytest.approx(610 / 410, abs=1e-3)
    assert numbers["slower_ms_per_step"] == pytest.approx(0.2)
    assert numbers["extra_calls_per_step"] == 0
    assert "1.49× slower" in found.message


def test_more_calls_are_more_work(tmp_path):
    """Rank 1 makes 6 calls of mm to rank 0's 4, each 100 µs: 2 more calls, 200 µs at the
    others' pace, and the same time per call (no slowdown)."""
    folder, _ = late_rank_steps(tmp_path / "run", [[0, 0]] * 3, [4, 6], [100, 100])
    found = rank_finding(folder)
    assert (found.code, found.rank, found.confidence) == ("slow_rank_compute", 1, "high")
    numbers = evidence(found)
    assert numbers["extra_calls_per_step"] == 2
    assert numbers["extra_work_ms_per_step"] == pytest.approx(0.2)
    assert numbers["slowdown"] == pytest.approx(1.0)
    assert "aten::mm most (0.2 ms per step)" in found.message


def test_two_comparable_causes_are_both_named(tmp_path):
    """Rank 1 makes 5 calls of 120 µs (600 µs) to rank 0's 4 of 100 µs (400 µs): one more
    call, 100 µs at the others' pace, and 4 × 20 = 80 µs more on the four both make: 180 of
    the 200 µs wait explained; slower work is 80% of the extra work's: both are named."""
    folder, _ = late_rank_steps(tmp_path / "run", [[0, 0]] * 3, [4, 5], [100, 120])
    run = analyzed(folder)
    found = excess(run.ranks, 1, lateness(run.ranks).steps)
    assert found.extra_work_ms == pytest.approx(0.1)
    assert found.slower_ms == pytest.approx(0.08)
    finding = rank_finding(folder)
    assert (finding.code, finding.alternatives, finding.confidence) == (
        "slow_rank_compute", ("slow_rank_contended",), "medium")
    assert "not which matters most" in finding.message


def test_a_small_wait_is_no_finding(tmp_path):
    """Rank 1 starts 20 µs late: 20 of a 469 µs step (4.3%), under the 10% that is named."""
    folder, _ = late_rank_steps(tmp_path / "run", [[0, 20]] * 3, [4, 4], [100, 100])
    assert rank_finding(folder) is None


def test_a_late_rank_that_changes_is_named_by_no_one(tmp_path):
    """Ranks 0 and 1 start 200 µs late in turn over 4 steps: each is the late rank in 2 of the
    4 steps with waiting (under ⅔): the others wait 200 µs of each 649 µs step, and no rank
    is named."""
    folder, _ = late_rank_steps(tmp_path / "run", [[200, 0], [0, 200]] * 2, [4, 4],
                                [100, 100])
    found = rank_finding(folder)
    assert (found.code, found.rank, found.severity) == ("rotating_straggler", None, "high")
    numbers = evidence(found)
    assert numbers["most_steps_one_rank"] == 2 and numbers["steps_with_waiting"] == 4
    assert numbers["others_waiting_ms_per_step"] == pytest.approx(0.2)


def test_three_ranks_one_late(tmp_path):
    """Three ranks, rank 2 starts 300 µs late: ranks 0 and 1 each wait 300 µs of the 749 µs
    step; the others' mean wait for rank 2 is 300 µs."""
    folder, _ = late_rank_steps(tmp_path / "run", [[0, 0, 300]] * 3, [4, 4, 4],
                                [100, 100, 100])
    found = rank_finding(folder)
    assert (found.code, found.rank) == ("slow_rank_untraced", 2)
    assert evidence(found)["others_waiting_ms_per_step"] == pytest.approx(0.3)
    assert evidence(found)["share_of_step"] == pytest.approx(40.1)


def test_the_gate_fails_a_run_with_a_high_finding(tmp_path, ddpprof_cli):
    """``gate --rule 'findings.high == 0'`` on a trace folder draws its findings as analyze
    does: the run whose rank 1 starts 200 µs late fails, the even one passed."""
    even, _ = late_rank_steps(tmp_path / "base" / "run", [[0, 0]] * 3, [4, 4], [100, 100])
    late, _ = late_rank_steps(tmp_path / "now" / "run", [[0, 200]] * 3, [4, 4], [100, 100])
    baseline = tmp_path / "base.json"
    assert ddpprof_cli("analyze", str(even), "--json", str(baseline)).returncode == 0
    result = ddpprof_cli("gate", str(late), "--baseline", str(baseline), "--rule",
                         "findings.high == 0")
    assert result.returncode == 1, result.stderr
    assert "Why run failed: findings.high 0 → 1 (rule findings.high == 0)" in result.stdout
    assert ddpprof_cli("gate", str(even), "--baseline", str(baseline), "--rule",
                       "findings.high == 0").returncode == 0
