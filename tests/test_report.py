"""The HTML report: self-contained, and rendered by a real browser without errors."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from trace_builders import span, step, write_trace

from ddpprof.analysis import analyze_paths
from ddpprof.report.html import render_report

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--virtual-time-budget=20000", "--window-size=1400,5000"]


def two_runs(root: Path) -> Path:
    """A single-process run and a two-rank run whose step has two all-reduce 'buckets'."""
    write_trace(root / "single" / "rank0.json",
                [step(0, 0, 100), step(1, 100, 200), span("aten::mm", 10, 90)], world_size=1)
    for rank in (0, 1):
        write_trace(root / "ddp" / f"rank{rank}.json", [
            step(0, 0, 100), step(1, 100, 200), step(2, 200, 300),
            span("aten::mm", 5, 60 + rank), span("aten::mm", 105, 160),
            *(span("gloo:all_reduce", a, b, cat="user_annotation", tid=2,
                   **{"Input Dims": [[1000]], "Input type": ["float"]})
              for a, b in ((40, 70), (75, 95), (140, 170), (175, 190)))], rank=rank)
    return root


def test_report_is_one_offline_file(tmp_path):
    analysis = analyze_paths([two_runs(tmp_path / "runs")], timeline=True)
    page = render_report(analysis, "t")
    assert len(re.findall(r"plotly\.js v\d", page)) == 1  # plotly.js inlined exactly once
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\"?https?:", page)  # nothing fetched
    assert len(page.encode()) < 10 * 1024 * 1024
    assert 'data-figures="7"' in page  # 5 charts + one timeline per run
    assert "Overlap %" in page and "Metric definitions" in page
    # the comparison table: one row per run, sortable by value
    assert page.count('<td data-value="ddp">') == 1 and page.count('<td data-value="single">') == 1


def test_timeline_has_one_bar_per_collective(tmp_path):
    analysis = analyze_paths([two_runs(tmp_path / "runs")], timeline=True)
    ddp = next(run for run in analysis.runs if run.name == "ddp")
    for rank in ddp.ranks:
        # the middle analyzed step of steps 0 and 1 is step 1: [100, 200)
        assert rank.timeline["step"] == "ProfilerStep#1"
        assert [(b["start"], b["end"]) for b in rank.timeline["comm"]] == [(40, 70), (75, 90)]
        assert rank.timeline["compute"] == [[5.0, 60.0]]


def test_cli_writes_reports_name_html_by_default(tmp_path, ddpprof_cli):
    two_runs(tmp_path / "runs")
    result = ddpprof_cli("analyze", "runs", "--html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "reports" / "runs.html").is_file()


@pytest.mark.skipif(BROWSER is None, reason="no chromium could be installed here "
                                            "(scripts/test.sh installs Debian's chromium)")
def test_report_renders_in_a_real_browser(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render_report(analyze_paths([two_runs(tmp_path / "runs")], timeline=True),
                                  "browser test"))
    flags = [*BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([BROWSER, *flags, "--enable-logging=stderr", "--v=0", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    errors = re.search(r'data-js-errors="([^"]*)"', dom.stdout)
    assert errors is None, errors.group(1)
    assert "Uncaught" not in dom.stderr
    expected = int(re.search(r'data-figures="(\d+)"', dom.stdout).group(1))
    rendered = dom.stdout.count('class="plotly-graph-div js-plotly-plot"')
    assert rendered == expected == 7
    assert dom.stdout.count('class="main-svg"') >= expected  # plotly drew each one
    screenshot = Path(__file__).resolve().parent.parent / "reports" / "browser-test.png"
    shot = subprocess.run([BROWSER, *flags, f"--screenshot={screenshot}", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]


@pytest.mark.slow
def test_report_of_every_recorded_variant(all_variants, tmp_path, ddpprof_cli):
    out, _ = all_variants
    result = ddpprof_cli("analyze", str(out), "--html", str(tmp_path / "all.html"))
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "all.html").read_text()
    assert len(page.encode()) < 10 * 1024 * 1024
    assert 'data-figures="12"' in page  # 5 charts + 7 timelines
    assert ("Speedup vs single" in page and "2.13" in page) or "torch" in page
