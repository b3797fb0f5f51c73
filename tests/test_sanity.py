"""Every bound of ``ddpprof.metrics.sanity``, and a figure that breaks one shown as a note, not as a
number, wherever it is printed."""

from __future__ import annotations

import pytest

from ddpprof.advice import Evidence, Finding
from ddpprof.metrics import sanity
from ddpprof.metrics.tax import OverlapTax, TaxRow
from ddpprof.report import console
from ddpprof.report.html import evidence_text


@pytest.mark.parametrize(("value", "ok"), [(0.0, True), (100.0, True), (100.0000001, True),
                                           (104.0, False), (-3.0, False), (float("nan"), False),
                                           (None, True)])
def test_a_share_is_within_0_and_100(value, ok):
    assert (sanity.share("overlap_pct", value) is None) == ok


@pytest.mark.parametrize(("speedup", "world", "ok"), [(1.9, 2, True), (2.05, 2, True),
                                                       (7.45, 2, False), (23.0, 2, False),
                                                       (0.0, 2, False), (3.0, None, True)])
def test_a_speedup_is_at_most_the_ranks(speedup, world, ok):
    flag = sanity.speedup("speedup_vs_single", speedup, world)
    assert (flag is None) == ok
    if flag and speedup > 1:
        assert "not comparable" in flag.note("ddp") and flag.note("ddp").startswith("ddp: ")


@pytest.mark.parametrize(("low", "estimate", "high", "ok"), [
    (3, 6, 9, True), (None, 6, None, True), (126, 600, 3107, False), (10, 2, 9, False),
    (-150, -20, 10, False), (0, 950, 960, False)])
def test_a_tax_interval_holds_its_estimate_within_physical_bounds(low, estimate, high, ok):
    assert (sanity.tax("compute", low, estimate, high) is None) == ok


def test_a_fit_below_the_r2_threshold_is_not_used():
    assert sanity.fit("fit", 0.97) is None and sanity.fit("fit", None) is None
    assert "not used" in sanity.fit("fit", -0.494).problem


def test_a_bandwidth_is_finite():
    assert sanity.bandwidth("beta_gbps", 12.5) is None
    assert sanity.bandwidth("beta_gbps", float("inf")) is not None
    assert sanity.bandwidth("beta_gbps", 0.0) is not None


def test_transfer_is_at_most_communication():
    assert sanity.transfer("t", 81.9, 82.0) is None
    assert "more than the 82 ms" in sanity.transfer("t", 114.0, 82.0).problem


def test_a_launch_point_is_within_backward_or_said_to_be_after_it():
    assert sanity.launch_point(70.4) == "70% into backward"
    assert sanity.launch_point(104.0) == "after backward's last gradient"
    assert evidence_text("first_launch_into_backward", 104.0, "%") == (
        "first launch into backward: after backward's last gradient")
    assert evidence_text("gradient_bytes_per_step", 5850216, "B") == (
        "gradient bytes per step: 5.58 MiB")


def test_findings_below_the_minimum_gain_are_not_listed():
    found = [Finding("r", "no_overlap", "high", "big.", [], 40.0, 40.0),
             Finding("r", "exposed_tail", "low", "tiny.", [], 0.2, 0.2)]
    section = console.findings_section(found)[0]
    assert section.lines[0].startswith("1. [high, gain ~40% of the step] r: no_overlap")
    assert len(section.lines) == 2 and "1 finding worth less than 1%" in section.lines[1]
    assert [f.code for f in console.listed(found)] == ["no_overlap"]


def test_the_run_table_shows_a_broken_share_as_a_note():
    lines, notes = console.checked([{"run": "r", "overlap_pct": 104.0, "compute_pct": 50.0,
                                     "comm_transfer_ms_per_step": 114.0,
                                     "comm_ms_per_step": 82.0}])
    assert lines[0]["overlap_pct"] == console.FLAGGED and lines[0]["compute_pct"] == 50.0
    assert lines[0]["comm_transfer_ms_per_step"] == console.FLAGGED
    assert notes[0] == "r: overlap_pct not shown (104): a share of a whole lies within 0-100%"


def test_an_impossible_tax_interval_says_why():
    tax = OverlapTax([TaxRow("compute", "all", "all", 600.0, 126.0, 3107.0, 5, 5, 5)])
    text = console.describe_tax(tax)
    assert "+600%" not in text and "compute not shown: its interval" in text


def test_the_report_flags_a_speedup_beyond_the_ranks(tmp_path):
    from ddpprof.report.html import comparison_rows

    class Row:
        def __init__(self, run, variant, samples, world):
            self.data = {"run": run, "variant": variant, "samples_per_s": samples,
                         "world_size": world, "other_collective_calls_per_step": 0,
                         **{f"{k}_calls_per_step": 0 for k in console_kinds()}}

        def to_dict(self):
            return dict(self.data)

    rows, notes = comparison_rows([Row("single", "single", 100.0, 1),
                                   Row("ddp", "pytorch_ddp", 745.0, 2)])
    assert rows[1]["speedup_vs_single"] == console.FLAGGED
    assert notes and notes[0].startswith("ddp: speedup_vs_single not shown (7.45)")


def console_kinds():
    from ddpprof.analysis.rows import COLUMN_KINDS

    return COLUMN_KINDS


def test_evidence_keeps_its_number_in_json():
    finding = Finding("r", "c", "low", "m.", [Evidence("first_launch_into_backward", 104.0, "%")],
                      None, 3.0)
    assert finding.to_dict()["evidence"] == {"first_launch_into_backward": 104.0}


def test_the_headline_now_is_the_tables_step_and_a_run_gets_the_same_advice_by_any_name(
        tmp_path):
    from test_findings import RECORDED, backward, cpu_run

    from ddpprof.advice import CapAdvice, CapReplay, findings
    from ddpprof.analysis import AnalysisOptions, analyze_paths

    folder = cpu_run(tmp_path / "late", lambda b, r: backward(b, late_launch=True), ranks=2,
                     manifest=RECORDED)
    advice = CapAdvice(None, CapReplay(current_cap_mib=25, best_cap_mib=1, current_step_ms=10,
                                       best_step_ms=8))
    told = {}
    for name, paths in (("folder", [folder]), ("files", sorted(folder.glob("rank*.json")))):
        [run] = analyze_paths(paths, AnalysisOptions(jobs=1)).runs
        [finding] = [f for f in findings([run], {run.name: advice})
                     if f.code == "bucket_cap_too_large"]
        told[name] = (run.name, finding.message, finding.estimated_gain_pct)
    # the table's step: 1000 µs steps, so 1.0 ms now; the replay's 20% less: 0.8 ms
    assert "predicts 0.8 ms per step at 1 MiB against 1.0 ms now, 20% less" in told["folder"][1]
    assert told["folder"] == told["files"]


def test_bench_shows_a_speedup_beyond_its_processes_as_a_note():
    from ddpprof.bench.scaling import BenchRow
    from ddpprof.commands.bench import checked_speedups

    def row(nproc, speedup):
        return BenchRow(model="mlp-small", variant="pytorch_ddp", nproc=nproc,
                        **{f: 1.0 for f in ("step_ms_min", "step_ms_median", "epoch_s",
                                            "samples_per_s")},
                        comm_ms=None, speedup=speedup, efficiency=speedup and speedup / nproc,
                        amdahl_f=None, amdahl_ceiling=None, profiler_overhead=None)

    shown, notes = checked_speedups([row(2, 1.8), row(2, 23.0)])
    assert shown[0]["speedup"] == 1.8 and shown[1]["speedup"] == console.FLAGGED
    assert notes == [notes[0]] and notes[0].startswith("mlp-small pytorch_ddp x2: speedup not "
                                                       "shown (23)")
