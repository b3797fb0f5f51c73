from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_ddpprof(*args: str, cwd: Path | None = None, env: dict | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: a separate process, output captured."""
    return subprocess.run([sys.executable, "-m", "ddpprof.cli", *args], cwd=cwd,
                          env={**os.environ, "CI": "true", **(env or {})}, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def ddpprof_cli():
    return run_ddpprof
