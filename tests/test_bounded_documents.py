"""Every document read back is checked against its schema before it is used (types with
constraints: lists whose lengths agree, indexes in range and not negative, finite numbers
within physical bounds); a violation is one line naming the file and the field, exit 2:
``diff``'s and ``gate``'s analyze documents (their ``profile`` sections), ``simulate
--measured``, a calibration and a ``run.json``. Each case failed on the code before (a
traceback, ``nan`` printed, a part filed under the wrong name, an ``OverflowError``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bounded import cli, edited, one_line
from test_hostile_inputs import CALIBRATION, GIVEN_COST
from test_hostile_outputs import two_rank_run


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A two-rank run and its ``analyze --json`` document."""
    folder = tmp_path_factory.mktemp("documents")
    run = two_rank_run(folder / "run")
    document = folder / "analysis.json"
    from ddpprof.cli import main

    main(["analyze", str(run), "--json", str(document), "--quiet"])
    return run, document


def _profile(edit):
    def change(document: dict) -> None:
        edit(document["runs"][0]["profile"])
    return change


PROFILES = {
    "part_ms shorter than parts": (lambda p: p.update(part_ms=p["part_ms"][:-1]), "part_ms"),
    "an item's part 999": (lambda p: p["items"][0].update(part=999), "items[0].part"),
    "an item's part -1": (lambda p: p["items"][0].update(part=-1), "items[0].part"),
    "rank_part_ms of the wrong shape": (lambda p: p.update(rank_part_ms=[[1.0]]),
                                        "rank_part_ms"),
    "series of another length": (lambda p: p["part_series_ms"][0].append(1.0),
                                 "part_series_ms[0]"),
    "step_ms NaN": (lambda p: p.update(step_ms=float("nan")), "step_ms"),
    "step_ms Infinity": (lambda p: p.update(step_ms=float("inf")), "step_ms"),
    "step_ms -1e308": (lambda p: p.update(step_ms=-1e308), "step_ms"),
    "a part of 1e300 ms": (lambda p: p["part_ms"].__setitem__(0, 1e300), "part_ms"),
    "a rank twice": (lambda p: p.update(ranks=[0, 0]), "ranks"),
}


@pytest.mark.parametrize("case", PROFILES, ids=list(PROFILES))
def test_a_diff_document_that_breaks_its_schema_is_one_line(case, analyzed, tmp_path, capsys):
    _, document = analyzed
    edit, field = PROFILES[case]
    bad = edited(document, tmp_path / "bad.json", _profile(edit))
    one_line(cli(capsys, "diff", bad, document), str(bad), field)


@pytest.mark.parametrize("case", ["an item's part 999", "step_ms NaN", "a part of 1e300 ms"])
def test_a_gate_document_is_checked_as_diff_checks_it(case, analyzed, tmp_path, capsys):
    _, document = analyzed
    edit, field = PROFILES[case]
    bad = edited(document, tmp_path / "bad.json", _profile(edit))
    one_line(cli(capsys, "gate", document, "--baseline", bad, "--significance", "0.95"),
             str(bad), field)


def test_run_noise_that_would_overflow_is_refused(analyzed, capsys):
    _, document = analyzed
    one_line(cli(capsys, "diff", document, document, "--run-noise", "1e308"), "--run-noise")


@pytest.mark.parametrize(("rows", "field"), [
    ([{"rank": "x"}], "per_rank[0].rank"), ("ranks", "per_rank"),
    ([{"name": 5}], "process_groups[0].name")])
def test_a_gate_row_whose_ranks_or_groups_are_not_rows_is_one_line(rows, field, analyzed,
                                                                   tmp_path, capsys):
    _, document = analyzed
    key = field.split("[")[0]
    bad = edited(document, tmp_path / "bad.json", lambda d: d["runs"][0].update({key: rows}))
    one_line(cli(capsys, "gate", document, "--baseline", bad, "--rule",
                 "overlap_pct[rank=0] >= 0"), str(bad), field)


@pytest.mark.parametrize(("row", "field"), [
    ({"variant": "bucket_ddp_async", "bucket_cap_mib": 25, "step_ms": 1e300}, "step_ms"),
    ({"variant": "bucket_ddp_async", "bucket_cap_mib": -1, "step_ms": 1}, "bucket_cap_mib")])
def test_measured_points_beyond_physical_bounds_are_one_line(row, field, analyzed, tmp_path,
                                                             capsys):
    run, _ = analyzed
    measured = tmp_path / "sweep.json"
    measured.write_text(json.dumps({"schema": "ddpprof.sweep", "rows": [row]}))
    one_line(cli(capsys, "simulate", run, *GIVEN_COST, "--measured", measured),
             str(measured), field)


@pytest.mark.parametrize(("point", "field"), [
    ({"size_bytes": -1}, "points[0].size_bytes"), ({"time_us": 1e300}, "points[0].time_us")])
def test_calibration_points_beyond_physical_bounds_are_one_line(point, field, analyzed,
                                                                tmp_path, capsys):
    run, _ = analyzed
    good = {"size_bytes": 4096, "time_us": 50.0, "time_min_us": 40.0, "time_max_us": 60.0,
            "algbw_gbps": 0.08, "busbw_gbps": 0.08}
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps({**CALIBRATION, "points": [{**good, **point}]}))
    one_line(cli(capsys, "simulate", run, "--calibration", calibration), str(calibration),
             field)


@pytest.mark.parametrize(("edit", "field"), [
    (lambda m: m.update(throughput={"median_step_s": -5}), "throughput.median_step_s"),
    (lambda m: m.update(buckets=[{"params": ["a", "b"], "param_index": [0], "param_bytes": [4],
                                  "bytes": 4}]), "buckets"),
    (lambda m: m.update(memory=[{"rank": -1}]), "memory[0].rank")])
def test_a_run_json_that_breaks_its_schema_is_one_line(edit, field, tmp_path, capsys):
    run = two_rank_run(tmp_path / "run")
    edited(run / "run.json", run / "run.json", edit)
    one_line(cli(capsys, "simulate", run, *GIVEN_COST), "run.json", field)
