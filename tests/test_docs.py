"""The user-facing text: a short README, and no internal vocabulary ("seed 003") in it, in the
documentation or in any command's --help. (``mkdocs build --strict`` in scripts/test.sh checks
the site's links and pages.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddpprof.cli import cli

REPO = Path(__file__).resolve().parent.parent
INTERNAL = re.compile(r"\bseeds? ?\d{3}\b", re.IGNORECASE)


def test_the_readme_is_short_and_keeps_the_test_command():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "bash scripts/test.sh" in text   # what CI runs (.ci/run)


@pytest.mark.parametrize("page", [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"],
                         ids=lambda p: p.name)
def test_no_internal_names_in_the_documentation(page):
    assert not INTERNAL.findall(page.read_text())


@pytest.mark.parametrize("command", [[], *([name] for name in cli.commands)],
                         ids=lambda c: " ".join(c) or "ddpprof")
def test_no_internal_names_in_the_help(command):
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    assert not INTERNAL.findall(result.output)
