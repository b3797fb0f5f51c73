"""The user-facing text: a short README, and no internal vocabulary ("seed 003") in it, in the
documentation or in any command's --help. (``mkdocs build --strict`` in scripts/test.sh checks
the site's links and pages.)"""

from __future__ import annotations

import re
import sys
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


# --- every command the documentation shows runs as pasted -----------------------------------

#: Commands shown but not run by the test, and why (each costs minutes, or needs what CI has
#: not: a GPU, a cluster, a checkpoint).
NOT_RUN = {
    "ddpprof record --variant all": "records eleven variants: minutes (scripts/demo.sh)",
    "ddpprof record --variant bucket_ddp_async --bucket-cap-mib 1,5,25": "three mlp-large runs",
    "ddpprof record --variant fsdp_tp": "4 to 6 ranks of a tensor-parallel mesh: minutes",
    "ddpprof sweep": "records 14 runs of mlp-xlarge: minutes",
    "ddpprof bench": "records 4 models x 4 variants x 2 process counts: many minutes",
    "ddpprof calibrate": "an all-reduce sweep up to 256 MiB or 1 GiB on 8 ranks",
    "ddpprof simulate sweep/": "needs a sweep (minutes) to compare with",
    "ddpprof memory --model-path DIR": "needs a Hugging Face checkpoint",
    "ddpprof analyze s3://": "needs a Dask cluster and a bucket",
    # a run that hangs until its timeout, and its diagnosis: tests/test_hang_recorded.py
    # records and diagnoses every hang kind
    "ddpprof record --variant pytorch_ddp --model mlp-small --timeout-s": "a hanging run",
    "ddpprof record --variant pytorch_ddp --model mlp-small --global-batch 256 --timeout-s":
        "a hanging run",
    "ddpprof hang": "a hanging run's dumps (tests/test_hang_recorded.py)",
    # faults for the diagnosis benchmark: tests/test_fault_injection.py records them
    "ddpprof record --variant pytorch_ddp --model mlp-small --fault": "a run with a fault",
    "ddpprof record --variant pytorch_ddp --model mlp-small --nproc 3 --fault":
        "a run with a fault",
}
sys.path.insert(0, str(REPO / "scripts"))
#: Stand-ins for the inputs the examples name, made from the one recording the README's
#: quickstart makes (traces/: simple_ddp and pytorch_ddp): folders are copies of it, JSON
#: files its analysis (scripts/docs_output.py makes the same).
from docs_output import ANALYSES, FOLDERS  # noqa: E402


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(page, language, the command's words) of every ``ddpprof`` command in a console block
    (``$ ddpprof ...``, continued lines joined) or a bash block, in the order they appear."""
    import shlex

    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for language, body in re.findall(r"```(\w*)\n(.*?)```", page.read_text(), re.S):
            if language not in ("console", "bash", ""):
                continue
            lines = body.replace("\\\n", " ").splitlines()
            for line in lines:
                line = line.strip()
                if language == "console":
                    if not line.startswith("$ ddpprof "):
                        continue
                    line = line[2:]
                elif not line.startswith("ddpprof "):
                    continue
                found.append((page.name, language, shlex.split(line, comments=True)))
    return found


def _skipped(words: list[str]) -> str | None:
    text = " ".join(words)
    return next((why for start, why in NOT_RUN.items() if text.startswith(start)), None)


def test_every_documented_command_parses():
    """Each command shown parses as the CLI reads it (its options exist, its values are
    valid), whether or not the slow test runs it; those not run say why."""
    commands = documented_commands()
    assert len(commands) > 20
    for _, _, words in commands:
        command = cli.commands[words[1]]
        command.make_context(words[1], list(words[2:]))    # click.UsageError if not
    assert {_skipped(words) for _, _, words in commands} >= set(NOT_RUN.values()) - {None}


@pytest.mark.slow
def test_every_documented_command_runs_as_pasted(tmp_path, monkeypatch):
    """The README's quickstart recording (the one recording this test makes), then every
    other command of the documentation in that folder, in order: each exits 0 (or 1 where a
    gate shows a failure). What they print is pasted by scripts/docs_output.py."""
    import shutil

    from click.testing import CliRunner
    from conftest import run_ddpprof

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CI", "true")
    seen: set[str] = set()
    for page, _, words in documented_commands():
        text = " ".join(words)
        if _skipped(words) or text in seen:
            continue
        seen.add(text)
        if words[1] == "record":    # the recording: through torchrun, in its own process
            result = run_ddpprof(*words[1:], cwd=tmp_path, timeout=900)
            assert result.returncode == 0, (page, text, result.stderr[-2000:])
            # record writes its runs under --out (traces/), nothing else
            assert [p.name for p in tmp_path.iterdir()] == ["traces"]
            made = CliRunner().invoke(cli, ["analyze", "traces", "--json", "stand-in.json",
                                            "-q"])
            assert made.exit_code == 0, made.output
            for name in FOLDERS:
                shutil.copytree(tmp_path / "traces", tmp_path / name,
                                ignore=shutil.ignore_patterns("main", "pr"))
            for name in ANALYSES:
                shutil.copy(tmp_path / "stand-in.json", tmp_path / name)
            continue
        result = CliRunner().invoke(cli, words[1:], terminal_width=100)
        assert result.exit_code in (0, 1), (page, text, result.output[-3000:])


def test_the_cli_reference_says_what_help_says():
    import mkdocs_hooks

    reference = mkdocs_hooks.cli_reference()
    assert "Sentinel" not in reference and "('bucket" not in reference
    assert "[default: None]" not in reference and "default True" not in reference
    assert "`--variant VARIANT` |" in reference and "[default: bucket_ddp_async]" in reference
    assert "`--no-structural-comm` | Count kernels as communication by name only" in reference
    assert reference.count("Exit status: 0 done") == len(cli.commands)
    # each command's summary whole, not cut at a line's end
    assert "exposed communication, waiting for a rank, host time and idle. |" in reference


def test_the_metric_reference_and_the_api_cross_references():
    import mkdocs_hooks

    from ddpprof.metrics.registry import METRICS

    reference = mkdocs_hooks.metric_reference()
    assert all(f"| `{name}` |" in reference for name in METRICS)
    page = type("Page", (), {"file": type("File", (), {"src_uri": "api.md"})()})()
    html = ('<h3 id="ddpprof.analysis.analyze_paths">x</h3>'
            "<p>see :func:<code>ddpprof.analysis.analyze_paths</code> and :class:`Other`</p>")
    out = mkdocs_hooks.on_page_content(html, page)
    assert ":func:" not in out and ":class:" not in out
    assert '<a href="#ddpprof.analysis.analyze_paths"><code>analyze_paths</code></a>' in out
