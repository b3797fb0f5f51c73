"""The type checker CI runs (``mypy``, configured in ``pyproject.toml``) catches the mistakes
typed results exist to catch: a misspelt attribute of a row, a dict passed where a typed row
is expected, an optional value used as if it were always there, an unannotated function, a
value of type ``Any`` returned as a typed one (``strict = true``).

Slow: it runs mypy, which reads ddpprof's modules and numpy's stubs (about 10 s once
``scripts/test.sh`` has run mypy on the package and left its cache, a minute or more without).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

WRONG = '''
from ddpprof.analysis.rows import RunRow, StepShares, step_rows
from ddpprof.analysis.results import Analysis


def shown(analysis: Analysis) -> list[float]:
    return [row.compute_ms for row in step_rows(analysis)]          # line 7: no such field


def written() -> list[StepShares]:
    return [{"run": "a", "rank": 0, "step": "ProfilerStep#1"}]      # line 11: a dict


def doubled(row: RunRow) -> float:
    return row.samples_per_s * 2                                    # line 15: may be None


def untyped(row):                                                   # line 18: no annotations
    return row


def loaded(text: str) -> dict[str, int]:
    import json
    return json.loads(text)                                         # line 24: Any, as typed
'''


@pytest.mark.slow
def test_mypy_rejects_wrong_rows(tmp_path):
    snippet = tmp_path / "wrong_rows.py"
    snippet.write_text(WRONG)
    # run from the checkout: mypy reads [tool.mypy] from its pyproject.toml and reuses its cache
    result = subprocess.run([sys.executable, "-m", "mypy", str(snippet)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    found = {(int(line), code) for line, code in re.findall(
        r"wrong_rows\.py:(\d+): error: .*\[([a-z-]+)\]$", result.stdout, re.MULTILINE)}
    assert found == {(7, "attr-defined"), (11, "list-item"), (15, "operator"),
                     (18, "no-untyped-def"), (24, "no-any-return")}, result.stdout
