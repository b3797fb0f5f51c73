"""A non-editable ``pip install .`` works from any folder: workloads and templates are package
data of the installed distribution, never files of the checkout."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_non_editable_install_records_from_an_unrelated_folder(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    venv_site = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    # The dependencies (torch is 700 MB) come from the test environment; a .pth line puts its
    # site-packages after the fresh one, so the fresh ddpprof shadows anything found there.
    (venv_site / "_test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed",
                    str(REPO)], check=True, cwd=tmp_path)

    where = subprocess.run(
        [python, "-c", "import ddpprof, workloads, importlib.resources as r;"
         "print(ddpprof.__file__); print(workloads.__file__);"
         "print((r.files('ddpprof') / 'templates' / 'report.html.j2').is_file());"
         "print((r.files('workloads') / 'sample_data' / 'tiny_corpus.jsonl').is_file())"],
        check=True, capture_output=True, text=True, cwd=tmp_path).stdout.split()
    assert all(Path(p).is_relative_to(venv_site) for p in where[:2]), where
    assert where[2:] == ["True", "True"]

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [venv / "bin" / "ddpprof", "record", "--variant", "simple_ddp", "--model", "mlp-tiny",
         "--global-batch", "16", "--steps", "3", "--wait", "0", "--warmup", "1", "--active", "1",
         "--out", "out", "--markdown", "-", "--quiet"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "| simple_ddp | simple_ddp | complete |" in result.stdout
    manifest = json.loads((tmp_path / "out/simple_ddp/run.json").read_text())
    assert manifest["command"][0] == str(python)
    assert manifest["traces"] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]


def _fixture_runs(root: Path) -> Path:
    """A two-rank run with two all-reduces per step, and a one-process run."""
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trace_builders import span, step, write_trace

    write_trace(root / "single" / "rank0.json",
                [step(0, 0, 100), step(1, 100, 200), span("aten::mm", 10, 90)], world_size=1)
    for rank in (0, 1):
        write_trace(root / "ddp" / f"rank{rank}.json", [
            step(0, 0, 100), step(1, 100, 200), step(2, 200, 300),
            span("aten::mm", 5, 60), span("aten::mm", 105, 160),
            *(span("gloo:all_reduce", a, b, cat="user_annotation", tid=2,
                   **{"Input Dims": [[1000]], "Input type": ["float"]})
              for a, b in ((40, 70), (75, 95), (140, 170), (175, 190)))], rank=rank)
    # one gradient of 10 floats becomes ready at the end of backward: what simulate replays
    grad = {"Input Dims": [[10]], "Input type": ["float"]}
    write_trace(root.parent / "simulated" / "rank0.json", [
        step(0, 0, 1000), step(1, 1000, 1100),
        span("autograd::engine::evaluate_function: A", 100, 200),
        span("torch::autograd::AccumulateGrad", 190, 200, **grad)])
    return root


@pytest.mark.slow
def test_the_plain_install_analyzes_without_torch(tmp_path):
    """``pip install ddpprof`` (pinned by constraints.txt) holds the analysis side only: no
    torch, no transformers; analyze, gate, simulate and the HTML report work in it, and record
    says in one line which extra it needs."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # --no-compile: byte-compiling numpy, pandas and plotly would double the install's time
    subprocess.run([venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-compile", "-c", str(REPO / "constraints.txt"), str(REPO)],
                   check=True, cwd=tmp_path, timeout=900)
    installed = subprocess.run([venv / "bin" / "pip", "list", "--format=freeze"],
                               capture_output=True, text=True, check=True).stdout.lower()
    names = {line.split("==")[0] for line in installed.split()}
    assert {"ddpprof", "numpy", "pandas", "plotly", "click", "rich", "jinja2",
            "msgspec"} <= names
    assert not names & {"torch", "transformers", "triton", "nvidia-cudnn-cu12"}, names
    # the wheel carries the native event scan, compiled at install
    built = subprocess.run([venv / "bin" / "python", "-c", "from ddpprof.trace import scanned; "
                            "print(scanned.AVAILABLE)"], capture_output=True, text=True,
                           check=True, cwd=tmp_path)
    assert built.stdout == "True\n"

    runs = _fixture_runs(tmp_path / "runs")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "CI": "true", "HOME": str(tmp_path)}

    def ddpprof(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([venv / "bin" / "ddpprof", *args], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=300)

    analyzed = ddpprof("analyze", "--html", str(runs), "--json", "a.json")
    assert analyzed.returncode == 0, analyzed.stderr
    assert (tmp_path / "reports" / "runs.html").stat().st_size > 100_000  # plotly inlined
    assert json.loads((tmp_path / "a.json").read_text())["schema"] == "ddpprof.analyze"
    gated = ddpprof("gate", str(runs), "--baseline", "a.json")
    assert gated.returncode == 0 and "all 2 checks passed" in gated.stdout, gated.stderr
    simulated = ddpprof("simulate", str(tmp_path / "simulated"), "--bandwidth-gbps", "1",
                        "--latency-us", "5", "--world-size", "2", "--json", "s.json", "--html")
    assert simulated.returncode == 0, simulated.stderr
    assert json.loads((tmp_path / "s.json").read_text())["rows"]
    assert (tmp_path / "reports" / "simulated-simulate.html").is_file()   # <run>-simulate
    for command in ("record", "bench", "sweep", "calibrate"):
        refused = ddpprof(command)
        assert refused.returncode == 2
        assert refused.stderr == (f"ddpprof: error: {command} needs torch and transformers, "
                                  "which the plain install leaves out: pip install "
                                  "'ddpprof[record]'\n")
    assert not list(tmp_path.glob("traces")) and not list(tmp_path.glob("bench"))


@pytest.mark.slow
def test_the_wheel_and_sdist_pass_twine_check(tmp_path):
    """What ``pyproject.toml`` builds is ready to publish: a wheel and an sdist whose metadata
    (the README as the description) ``twine check --strict`` accepts; the wheel ships the
    templates and plotly.js's bundle the reports inline."""
    import zipfile

    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel",
                            "--outdir", str(tmp_path), str(REPO)], capture_output=True,
                           text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    files = sorted(tmp_path.glob("ddpprof-*"))
    assert {f.suffix for f in files} == {".whl", ".gz"}
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                              *map(str, files)], capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    wheel = zipfile.ZipFile(next(f for f in files if f.suffix == ".whl")).namelist()
    assert "ddpprof/templates/plotly-basic.min.js" in wheel
    assert "ddpprof/templates/report.html.j2" in wheel
