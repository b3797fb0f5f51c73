"""Hostile folders for ``ddpprof analyze``: each fault stays with its run, no traceback, and a
recording that did not finish is never analyzed as a good run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from trace_builders import span, step, write_trace


def good_run(folder: Path, manifest: dict | None = None) -> Path:
    write_trace(folder / "rank0.json", [step(0, 0, 100), step(1, 100, 200),
                                        span("aten::mm", 10, 60)], world_size=1)
    if manifest is not None:
        (folder / "run.json").write_text(json.dumps(manifest))
    return folder


def rows_of(result) -> list[str]:
    lines = result.stdout.splitlines()[2:]   # past the header and its rule
    return [line.split()[0] for line in lines if line.strip()]


@pytest.mark.parametrize(("manifest", "field"), [
    ({"status": "complete", "config": "not an object"}, "config: expected object"),
    ({"status": "complete", "config": {"variant": 7}}, "config.variant: expected str"),
    ({"status": "complete", "config": {"world_size": "two"}}, "config.world_size: expected int"),
    ({"status": "complete", "throughput": {"samples_per_s": "fast"}},
     "throughput.samples_per_s: expected float"),
    ({"status": "done"}, "status: invalid enum value 'done'"),
], ids=["config a string", "variant a number", "world size a string",
        "throughput of wrong type", "unknown status"])
def test_a_manifest_of_the_wrong_type_is_one_line_and_stays_with_its_run(
        manifest, field, tmp_path, ddpprof_cli):
    odd = good_run(tmp_path / "runs" / "odd", manifest)
    good_run(tmp_path / "runs" / "fine", {"status": "complete", "config": {"variant": "x"}})
    out = tmp_path / "a.json"
    result = ddpprof_cli("analyze", str(tmp_path / "runs"), "--json", str(out),
                         "--csv", str(tmp_path / "a.csv"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ddpprof: error")]
    assert len(errors) == 1
    assert errors[0].startswith(f"ddpprof: error: {odd / 'run.json'}: {field}"), errors
    runs = {run["run"]: run for run in json.loads(out.read_text())["runs"]}
    assert set(runs) == {"fine"} and runs["fine"]["variant"] == "x"


def test_a_manifest_that_is_not_json_stays_with_its_run(tmp_path, ddpprof_cli):
    good_run(tmp_path / "runs" / "fine")
    broken = good_run(tmp_path / "runs" / "broken")
    (broken / "run.json").write_text("{not json")
    result = ddpprof_cli("analyze", str(tmp_path / "runs"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{broken / 'run.json'}: not JSON" in result.stderr
    assert rows_of(result) == ["fine"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder")
def test_an_unreadable_subfolder_stays_with_its_run(tmp_path, ddpprof_cli):
    good_run(tmp_path / "runs" / "fine")
    locked = good_run(tmp_path / "runs" / "locked")
    locked.chmod(0)
    try:
        result = ddpprof_cli("analyze", str(tmp_path / "runs"))
    finally:
        locked.chmod(0o755)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{locked}: cannot be read" in result.stderr and rows_of(result) == ["fine"]


def test_an_unreadable_trace_stays_with_its_run(tmp_path, ddpprof_cli):
    good_run(tmp_path / "runs" / "fine")
    folder = good_run(tmp_path / "runs" / "dangling")
    (folder / "rank0.json").unlink()
    (folder / "rank0.json").symlink_to(tmp_path / "nowhere.json")
    (folder / "rank1.json").write_text("{}")   # so the folder still holds a trace file
    result = ddpprof_cli("analyze", str(tmp_path / "runs"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert rows_of(result) == ["fine"]


def test_non_utf8_folder_names_in_every_output(tmp_path, ddpprof_cli):
    runs = tmp_path / "runs"
    runs.mkdir()
    name = os.fsdecode(b"caf\xe9-run")   # Latin-1 bytes, not UTF-8
    good_run(runs / name)
    good_run(runs / "plain")
    result = ddpprof_cli("analyze", str(runs), "--json", str(tmp_path / "a.json"),
                         "--csv", str(tmp_path / "a.csv"), "--html-out", str(tmp_path / "a.html"),
                         "--markdown", str(tmp_path / "a.md"))
    assert result.returncode == 0, result.stderr
    assert "caf\ufffd-run" in (tmp_path / "a.csv").read_text()
    assert "caf\ufffd-run" in json.loads((tmp_path / "a.json").read_text())["runs"][0]["run"]
    assert (tmp_path / "a.html").stat().st_size > 0


@pytest.mark.parametrize("status", ["failed", "interrupted", "running"])
def test_unfinished_recordings_are_listed_never_analyzed(status, tmp_path, ddpprof_cli):
    good_run(tmp_path / "runs" / "fine", {"status": "complete"})
    good_run(tmp_path / "runs" / "bad", {"status": status, "error": {
        "rank": 1, "message": "RuntimeError: boom"}})
    out = tmp_path / "a.json"
    result = ddpprof_cli("analyze", str(tmp_path / "runs"), "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert rows_of(result) == ["fine"]
    assert f"bad: not analyzed: the recording {status}" in result.stderr
    document = json.loads(out.read_text())
    assert [r["run"] for r in document["runs"]] == ["fine"]
    assert document["unfinished"][0]["run"] == "bad"
    assert document["unfinished"][0]["status"] == status
    only_bad = ddpprof_cli("analyze", str(tmp_path / "runs" / "bad"))
    assert only_bad.returncode == 2 and "no run finished recording" in only_bad.stderr


def test_an_unreadable_subfolder_stays_with_its_run_even_as_root(tmp_path, monkeypatch):
    """Root reads every folder, so the permission error is made by hand here."""
    from ddpprof.analysis import analyze_paths

    good_run(tmp_path / "runs" / "fine")
    locked = good_run(tmp_path / "runs" / "locked")
    real_iterdir = Path.iterdir

    def iterdir(self):
        if self == locked:
            raise PermissionError(13, "Permission denied")
        return real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    analysis = analyze_paths([tmp_path / "runs"])
    assert [r.name for r in analysis.runs] == ["fine"]
    assert [e.error for e in analysis.errors] == [f"{locked}: cannot be read (Permission "
                                                  "denied)"]


def test_json_to_standard_output_keeps_it_parseable(tmp_path, ddpprof_cli):
    good_run(tmp_path / "run")
    result = ddpprof_cli("analyze", str(tmp_path / "run"), "--json", "-")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["runs"][0]["run"] == "run"   # the table went to stderr
    assert "compute_pct" in result.stderr
