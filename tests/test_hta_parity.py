"""On real GPU traces the native engine equals HTA 0.5.0, run live here (not pasted numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpprof.analysis import analyze_paths

pytest.importorskip("hta", reason="HolisticTraceAnalysis is part of the test extra")
from hta.trace_analysis import TraceAnalysis

# The repository's checkout lies beside shared/, on developers' machines and in CI.
FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "hta-gpu"
RUNS = sorted(p for p in FIXTURES.glob("*") if p.is_dir()) if FIXTURES.is_dir() else []


def hta_numbers(folder: Path, keep_last_step: bool) -> dict[int, dict[str, float]]:
    analysis = TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=keep_last_step)
    temporal = analysis.get_temporal_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    numbers = {int(r["rank"]): {"idle_pct": r["idle_time_pctg"],
                                "compute_pct": r["compute_time_pctg"],
                                "non_compute_pct": r["non_compute_time_pctg"]}
               for r in temporal.to_dict("records")}
    for r in overlap.to_dict("records"):
        numbers[int(r["rank"])]["overlap_pct"] = r["comp_comm_overlap_pctg"]
    return numbers


@pytest.mark.skipif(not RUNS, reason=f"no GPU fixtures at {FIXTURES}")
@pytest.mark.parametrize("keep_last_step", [False, True], ids=["drop-last", "keep-last"])
@pytest.mark.parametrize("folder", RUNS, ids=[p.name for p in RUNS])
def test_native_equals_hta_on_real_gpu_traces(folder, keep_last_step):
    expected = hta_numbers(folder, keep_last_step)
    [run] = analyze_paths([folder], keep_last_step=keep_last_step, jobs=1).runs
    assert {r.rank for r in run.ranks} == set(expected)
    for rank in run.ranks:
        assert rank.kind == "gpu"
        b = rank.breakdown
        got = {"idle_pct": b.idle_pct, "compute_pct": b.compute_pct,
               "non_compute_pct": b.non_compute_pct, "overlap_pct": b.overlap_pct}
        for metric, value in expected[rank.rank].items():
            assert got[metric] == pytest.approx(value, abs=0.1), (rank.rank, metric)


@pytest.mark.skipif(not RUNS, reason=f"no GPU fixtures at {FIXTURES}")
def test_hta_engine_reports_htas_numbers(tmp_path):
    folder = RUNS[0]
    [run] = analyze_paths([folder], engine="hta", jobs=1).runs
    expected = hta_numbers(folder, keep_last_step=False)
    for rank in run.ranks:
        # HTA rounds its percentages to 2 decimals; the engine passes its µs through
        assert rank.breakdown.idle_pct == pytest.approx(expected[rank.rank]["idle_pct"],
                                                        abs=0.005)
        assert rank.breakdown.overlap_pct == pytest.approx(expected[rank.rank]["overlap_pct"])
