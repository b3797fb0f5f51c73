"""The HTML report: self-contained, and rendered by a real browser without errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from trace_builders import span, step, write_trace

from ddpprof.analysis import AnalysisOptions, analyze_paths
from ddpprof.job import JobSet
from ddpprof.report.html import TABLE_COLUMNS, render_report
from ddpprof.variants import VARIANTS_IN_ALL

TIMELINE = AnalysisOptions(timeline=True)

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
    analysis = analyze_paths([two_runs(tmp_path / "runs")], TIMELINE)
    page = render_report(JobSet(analysis, TIMELINE, ()), "t")
    # plotly.js (its basic bundle) inlined exactly once
    assert len(re.findall(r"plotly\.js \(basic - minified\) v\d", page)) == 1
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\"?https?:", page)  # nothing fetched
    assert len(page.encode()) < 2 * 1024 * 1024
    # the summary, 5 charts, one timeline per run, the ddp buckets
    assert 'data-figures="9"' in page
    assert "Overlap (%)" in page and "Metric definitions" in page
    # the comparison table: one row per run, sortable by value
    assert page.count('<td data-value="ddp">') == 1 and page.count('<td data-value="single">') == 1


def test_timeline_has_one_bar_per_collective(tmp_path):
    analysis = analyze_paths([two_runs(tmp_path / "runs")], TIMELINE)
    ddp = next(run for run in analysis.runs if run.name == "ddp")
    for rank in ddp.ranks:
        # the middle analyzed step of steps 0 and 1 is step 1: [100, 200)
        assert rank.timeline.step == "ProfilerStep#1"
        assert [(b.start_us, b.end_us) for b in rank.timeline.comm] == [(40, 70), (75, 90)]
        assert rank.timeline.compute == [(5.0, 60.0)]


def test_cli_writes_reports_name_html_by_default(tmp_path, ddpprof_cli):
    two_runs(tmp_path / "runs")
    result = ddpprof_cli("analyze", "runs", "--html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "reports" / "runs.html").read_text()
    assert f"report: {Path('reports') / 'runs.html'}" in result.stderr
    # the comparison table, by hand: ddp's window is steps 0-1, [0,200). Compute: rank 0
    # [5,60) + [105,160) = 110, rank 1 [5,61) + [105,160) = 111: 55.25 % on average. The
    # all-reduces take 30 + 20 + 30 + 15 = 95 µs, of which compute hides [40,60) + [140,160)
    # = 40 on rank 0 and 41 on rank 1: overlap (40 + 41) / 2 / 95; the rest is exposed:
    # (55 + 54) / 2 / 200. single: [10,90) of its step 0 [0,100): 80 %.
    comparison = page[page.index('<table id="comparison">'):]
    rows = re.findall(r"<tr>(.*?)</tr>", comparison[:comparison.index("</table>")])[1:]
    values = {re.findall(r'data-value="([^"]*)"', row)[0]: re.findall(r'data-value="([^"]*)"',
                                                                        row) for row in rows}
    ddp = dict(zip(TABLE_COLUMNS, values["ddp"], strict=True))
    assert float(ddp["compute_pct"]) == pytest.approx(55.25)
    assert float(ddp["overlap_pct"]) == pytest.approx(100 * 40.5 / 95)
    assert float(ddp["exposed_comm_pct"]) == pytest.approx(100 * 54.5 / 200)
    assert float(ddp["collective_calls_per_step"]) == 2
    assert float(dict(zip(TABLE_COLUMNS, values["single"], strict=True))["compute_pct"]) == 80


@pytest.mark.slow
def test_report_of_every_recorded_variant(all_variants, tmp_path, ddpprof_cli):
    out, _ = all_variants
    result = ddpprof_cli("analyze", str(out), "--html-out", str(tmp_path / "all.html"))
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "all.html").read_text()
    assert len(page.encode()) < 2 * 1024 * 1024     # the demo's report: every variant
    analyzed = ddpprof_cli("analyze", str(out), "--json", str(tmp_path / "all.json"))
    runs = json.loads((tmp_path / "all.json").read_text())["runs"]
    with_buckets = sum(1 for run in runs if run["buckets"])
    assert analyzed.returncode == 0 and len(runs) == len(VARIANTS_IN_ALL) and with_buckets >= 6
    # the summary, 5 charts and the memory chart, a timeline per run, a bucket chart per run
    # with all-reduces
    assert f'data-figures="{7 + len(runs) + with_buckets}"' in page
    assert "Memory per rank, measured (solid) and estimated (hatched)" in page
    version = json.loads((out / "single" / "run.json").read_text())["measured"]["torch_version"]
    assert f"<dt>torch</dt><dd>{version}</dd>" in page
    # every run has a speedup against single, whose own is 1 by definition
    comparison = page[page.index('<table id="comparison">'):]
    rows = re.findall(r"<tr>(.*?)</tr>", comparison[:comparison.index("</table>")])[1:]
    speedups = {re.search(r">([a-z0-9_]+)</td>", row).group(1):
                re.findall(r'data-value="([^"]*)"', row)[-1] for row in rows}
    assert len(speedups) == len(VARIANTS_IN_ALL) and all(speedups.values())
    assert float(speedups["single"]) == pytest.approx(1.0)


def test_per_rank_view_shows_wait_and_transfer(tmp_path):
    for rank, late in ((0, 0), (1, 10)):
        write_trace(tmp_path / "skew" / f"rank{rank}.json", [
            step(0, 0, 100), step(1, 100, 200),
            span("gloo:all_reduce", 20 + late, 50, cat="user_annotation", tid=2,
                 **{"Input Dims": [[10]], "Input type": ["float"]})], rank=rank)
    page = render_report(JobSet(analyze_paths([tmp_path / "skew"], TIMELINE), TIMELINE, ()),
                         "skew")
    table = page[page.index('<table class="per-rank">'):]
    table = table[:table.index("</table>")]
    # rank 0 waits 10 µs of its 30 (0.01 ms), rank 1 caused it and is marked
    rows = re.findall(r"<tr( class=\"slowest\")?><td>(\d)</td>(.*?)</tr>", table)
    assert [(cls, rank) for cls, rank, _ in rows] == [("", "0"), (' class="slowest"', "1")]
    cells = re.findall(r"<td>([^<]*)</td>", rows[0][2])
    # transfer, wait, caused (ms per step); no run.json, so no memory
    assert cells[-5:] == ["0.02", "0.01", "0.00", "-", "-"]
    assert "made the others wait the most: rank 1" in page


def test_the_page_escapes_what_a_run_name_holds(tmp_path, ddpprof_cli):
    runs = two_runs(tmp_path / "runs")
    (runs / "ddp").rename(runs / "<script>alert(1)<!--")
    result = ddpprof_cli("analyze", str(runs), "--html-out", str(tmp_path / "p.html"))
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "p.html").read_text()
    assert "<script>alert" not in page and "alert(1)<!--" not in page
    assert "&lt;script&gt;alert(1)&lt;!--" in page   # shown, as text
