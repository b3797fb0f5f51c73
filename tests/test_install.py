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
