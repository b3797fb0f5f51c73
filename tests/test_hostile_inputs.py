"""Inputs under attack, by class (each test failed on the code before its fix; found by
``benchmarks/hostile_campaign.py``):

* any number a run.json, a calibration or a trace holds is used or refused in one line naming
  the file and the field (a negative bucket cap, β = 0, ``ProfilerStep#`` and 400 digits);
* a recording that failed before any rank wrote a trace is listed as unfinished, never
  dropped;
* every command that reads a run folder says which files of it it skipped (a FIFO, a socket);
* an input that cannot be read is one line, exit 2 (``diff`` was a PermissionError, exit 1);
* options beyond any sensible range are refused while the command line is parsed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_faults import assert_one_line, ddpprof
from test_hostile_outputs import two_rank_run
from trace_builders import span, step, write_trace

GIVEN_COST = ["--latency-us", "10", "--bandwidth-gbps", "1"]
CALIBRATION = {"schema": "ddpprof.calibration", "version": 1, "status": "complete",
               "backend": "gloo", "world_size": 2,
               "fit": {"alpha_us": 20.0, "beta_busbw_gbps": 1.0, "r2": 0.99}}


def _edit_manifest(run: Path, **config: object) -> None:
    document = json.loads((run / "run.json").read_text())
    document["config"].update(config)
    (run / "run.json").write_text(json.dumps(document))


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("bucket_cap_mib", -25, "-25.0 is not > 0"), ("bucket_cap_mib", 0, "0.0 is not > 0"),
    ("steps", 0, "0 is not in the range"), ("lr", float("nan"), "not a finite number")])
@pytest.mark.parametrize("command", [["analyze"], ["simulate", *GIVEN_COST]])
def test_a_run_json_number_out_of_range_is_one_line_naming_the_field(command, field, value,
                                                                      problem, tmp_path):
    run = two_rank_run(tmp_path / "run")
    _edit_manifest(run, **{field: value})
    result = ddpprof(command[0], str(run), *command[1:])
    assert_one_line(result, 2, f"run.json: config.{field}", problem)


def test_an_older_run_json_s_bucket_cap_mb_is_checked_as_bucket_cap_mib(tmp_path):
    run = two_rank_run(tmp_path / "run")     # a version 3 run.json: bucket_cap_mb
    _edit_manifest(run, bucket_cap_mb=-25)
    assert_one_line(ddpprof("analyze", str(run)), 2, "run.json: config.bucket_cap_mib",
                    "-25.0 is not > 0")


@pytest.mark.parametrize(("fit", "problem"), [
    ({"beta_busbw_gbps": 0}, "fit.beta_busbw_gbps"),
    ({"beta_busbw_gbps": 1e-300}, "fit.beta_busbw_gbps"),
    ({"alpha_us": -5}, "fit.alpha_us")])
def test_a_calibration_fit_out_of_range_is_one_line(fit, problem, tmp_path):
    run = two_rank_run(tmp_path / "run")
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps({**CALIBRATION, "fit": {**CALIBRATION["fit"], **fit}}))
    result = ddpprof("simulate", str(run), "--calibration", str(calibration))
    assert_one_line(result, 2, "calibration.json", problem)


def test_a_step_number_beyond_int64_is_no_step(tmp_path):
    trace = write_trace(tmp_path / "run" / "rank0.json", [
        step(0, 0, 100), step(1, 100, 200), span("aten::mm", 10, 90),
        span("ProfilerStep#" + "9" * 400, 50, 60, cat="user_annotation")], world_size=1)
    result = ddpprof("analyze", str(trace), "--json", "-")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["runs"][0]["steps"] == 1     # #0; the last one dropped


@pytest.mark.parametrize("status", ["failed", "interrupted"])
def test_a_recording_that_failed_before_any_trace_is_listed_unfinished(status, tmp_path):
    two_rank_run(tmp_path / "runs" / "good")
    (tmp_path / "runs" / "broken").mkdir()
    (tmp_path / "runs" / "broken" / "run.json").write_text(json.dumps({
        "schema_version": 3, "status": status, "run": "broken",
        "error": {"message": "rank 0: CUDA out of memory", "signal": "SIGTERM"}}))
    result = ddpprof("analyze", str(tmp_path / "runs"), "--json", "-")
    document = json.loads(result.stdout)
    assert [problem["run"] for problem in document["unfinished"]] == ["broken"]
    assert [run["run"] for run in document["runs"]] == ["good"]
    assert f"broken: not analyzed: the recording {status}" in result.stderr
    alone = ddpprof("analyze", str(tmp_path / "runs" / "broken"))
    assert alone.returncode == 2 and f"the recording {status}" in alone.stderr


@pytest.mark.parametrize("command", [["gate"], ["critical-path"], ["simulate", *GIVEN_COST]])
def test_every_reader_of_a_run_folder_names_the_files_it_skipped(command, tmp_path):
    run = two_rank_run(tmp_path / "run")
    baseline = tmp_path / "baseline.json"
    assert ddpprof("analyze", str(run), "--json", str(baseline)).returncode == 0
    os.mkfifo(run / "rank2.json")
    args = ["--baseline", str(baseline)] if command == ["gate"] else command[1:]
    result = ddpprof(command[0], str(run), *args)
    assert result.returncode == 0, result.stderr
    assert "skipped rank2.json: not a regular file" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="root reads a file of mode 000 unless it drops its capabilities")
def test_an_unreadable_input_of_diff_is_one_line(tmp_path):
    run = two_rank_run(tmp_path / "run")
    unreadable = tmp_path / "a.json"
    unreadable.write_text("{}")
    unreadable.chmod(0)
    result = subprocess.run(
        ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
         "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m", "ddpprof.cli",
         "diff", str(unreadable), str(run)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "CI": "true"})
    assert_one_line(result, 2, "a.json", "Permission denied")


def test_a_trace_in_the_working_folder_makes_a_run_named_after_it(tmp_path):
    folder = tmp_path / "my-run"
    write_trace(folder / "t.json", [step(0, 0, 100), step(1, 100, 200),
                                    span("aten::mm", 10, 90)], world_size=1)
    result = ddpprof("analyze", "t.json", "--json", "-", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["runs"][0]["run"] == "my-run"


@pytest.mark.parametrize(("args", "option"), [
    (["simulate", "{run}", "--latency-us", "10", "--bandwidth-gbps", "1e-308"],
     "--bandwidth-gbps"),
    (["simulate", "{run}", "--latency-us", "1e300", "--bandwidth-gbps", "1"], "--latency-us"),
    (["record", "--variant", "single", "--rdzv-endpoint", "[::1"], "--rdzv-endpoint"),
    (["record", "--variant", "single", "--rdzv-endpoint", "a b:29500"], "--rdzv-endpoint"),
    (["record", "--variant", "simple_ddp", "--nproc", "1000", "--global-batch", "1000",
      "--out", "{tmp}/out"], "--nproc 1000")])
def test_options_beyond_any_sensible_range_are_refused(args, option, tmp_path):
    run = two_rank_run(tmp_path / "run")
    result = ddpprof(*(a.format(run=run, tmp=tmp_path) for a in args))
    assert_one_line(result, 2, option)
    assert not (tmp_path / "out").exists()
