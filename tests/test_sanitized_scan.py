"""The native event scanner (``ddpprof/trace/_scan.c``, C reading untrusted bytes) built with
AddressSanitizer and UndefinedBehaviorSanitizer, and its differential fuzz and a mutation fuzz
of every fixture's events run through that build (``scripts/sanitize-scan.sh``, CI's small
budget; docs/guarantees.md gives it and a longer local one): any report fails."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_the_scan_under_sanitizers_reports_nothing():
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests"), "FUZZ_EXAMPLES": "25",
           "MUTANTS": "1500"}
    result = subprocess.run(["bash", "scripts/sanitize-scan.sh", "-x"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert " passed" in result.stdout and "ERROR: AddressSanitizer" not in result.stderr
    assert "runtime error" not in result.stderr
