"""No command writes anything but what it was asked for, and never into an input folder: each
command runs in an empty working folder on copies of the fixtures, and afterwards the only
new or changed files are the outputs its command line names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def snapshot(*roots: Path) -> dict[Path, tuple[int, int]]:
    return {path: (path.stat().st_size, path.stat().st_mtime_ns)
            for root in roots for path in root.rglob("*") if path.is_file()}


def changed(before: dict[Path, tuple[int, int]], after: dict[Path, tuple[int, int]]
            ) -> set[Path]:
    return {path for path, state in after.items() if before.get(path) != state}


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """Two recorded-looking runs (traces and run.json) and an analyze --json of them, in a
    folder of their own."""
    root = tmp_path / "inputs"
    shutil.copytree(FIXTURES / "critical-path" / "cpu-two-rank", root / "runs" / "a")
    shutil.copytree(FIXTURES / "critical-path" / "cpu-blocking-issue", root / "runs" / "b")
    shutil.copytree(FIXTURES / "ddpprof-h100" / "pytorch_ddp", root / "h100" / "pytorch_ddp")
    return root


def run_in(work: Path, inputs: Path, ddpprof_cli, *args: str) -> set[Path]:
    """The files the command wrote or changed, relative to ``work``, after checking that it
    succeeded."""
    work.mkdir(exist_ok=True)
    before = snapshot(work, inputs)
    result = ddpprof_cli(*args, cwd=work)
    assert result.returncode == 0, result.stderr
    return {p.relative_to(work) if work in p.parents else p
            for p in changed(before, snapshot(work, inputs))}


CASES = {
    "analyze": (["analyze", "{inputs}/runs", "--json", "out.json", "--csv", "t.csv",
                 "--markdown", "t.md", "--html"],
                {"out.json", "t.csv", "t.md", "reports/runs.html"}),
    "critical-path": (["critical-path", "{inputs}/runs/a", "--html-out", "cp.html",
                       "--graph-json", "g.json"], {"cp.html", "g.json"}),
    "diff": (["diff", "{inputs}/runs/a", "{inputs}/runs/b", "--json", "d.json", "--html"],
             {"d.json", "reports/diff-a-b.html"}),
    "gate": (["gate", "{inputs}/runs", "--baseline", "base.json", "--markdown", "g.md"],
             {"g.md"}),
    "simulate": (["simulate", "{inputs}/runs/a", "--bandwidth-gbps", "1", "--latency-us", "10",
                  "--world-size", "2", "--json", "s.json", "--html"],
                 {"s.json", "reports/a-simulate.html"}),
    "memory": (["memory", "{inputs}/h100", "--csv", "m.csv"], {"m.csv"}),
    "memory --model": (["memory", "--model", "mlp-tiny", "--world-size", "2", "--json", "-"],
                       set()),
    "variants": (["variants", "--markdown", "v.md"], {"v.md"}),
}


@pytest.mark.parametrize("case", CASES)
def test_a_command_writes_only_what_it_was_asked_for(case, inputs, tmp_path, ddpprof_cli):
    args, expected = CASES[case]
    work = tmp_path / "work"
    if case == "gate":   # its baseline: written first, by analyze
        work.mkdir()
        made = run_in(work, inputs, ddpprof_cli, "analyze", str(inputs / "runs"), "--json",
                      "base.json")
        assert made == {Path("base.json")}
    written = run_in(work, inputs, ddpprof_cli,
                     *(a.replace("{inputs}", str(inputs)) for a in args))
    assert written == {Path(p) for p in expected}


@pytest.mark.slow
def test_recording_commands_write_only_under_out(tmp_path, ddpprof_cli):
    """calibrate and bench write their runs under --out and the files asked for, nothing in
    the working folder besides (record's recording: tests/test_docs.py's, in a folder of its
    own, which then holds only traces/)."""
    work = tmp_path / "work"
    work.mkdir()
    commands = {
        "calibrate": ["calibrate", "--nproc", "2", "--backend", "gloo", "--min-bytes", "4K",
                      "--max-bytes", "2M", "--step-factor", "8", "--warmup-iters", "1",
                      "--iters", "3", "-o", "cal", "--json", "cal.json"],
        "bench": ["bench", "--model", "mlp-tiny", "--variant", "single", "--nproc", "1",
                  "--steps", "3", "--global-batch", "8", "--repeats", "1", "--warmup-steps",
                  "1", "--no-overhead", "-o", "b"],
    }
    outs = {"calibrate": {"cal.json"}, "bench": set()}
    folders = {"calibrate": "cal", "bench": "b"}
    for name, args in commands.items():
        before = snapshot(work)
        result = ddpprof_cli(*args, cwd=work)
        assert result.returncode == 0, (name, result.stderr)
        written = {p.relative_to(work) for p in changed(before, snapshot(work))}
        outside = {p for p in written if p.parts[0] != folders[name]}
        assert outside == {Path(p) for p in outs[name]}, name
    assert json.loads((work / "cal.json").read_text())["schema"] == "ddpprof.calibration"


def test_several_runs_get_an_answer_each(inputs, tmp_path, ddpprof_cli):
    """A command given a folder of runs answers for each of them (or refuses naming them)."""
    runs = str(inputs / "runs")
    critical = ddpprof_cli("critical-path", runs, "--json", "-", cwd=tmp_path)
    assert critical.returncode == 0, critical.stderr
    assert {s["run"] for s in json.loads(critical.stdout)["steps"]} == {"a", "b"}
    analyzed = ddpprof_cli("analyze", runs, "--json", "-", cwd=tmp_path)
    assert [r["run"] for r in json.loads(analyzed.stdout)["runs"]] == ["a", "b"]
