"""Every chart of the analyze, critical-path, diff and simulate pages, checked in a real browser
(``chart_checks.js``): axes that hold their data and not far more, nothing outside its cell
or the window, no two labels overlapping, a look of its own for every series; tables that fit
(or scroll in their own box) at 800 px. Each page is one file under 2 MB with plotly.js inlined
once."""

from __future__ import annotations

import re
from pathlib import Path

import click.testing
import pytest
from browser import BROWSER, check_pages

from ddpprof.cli import cli

FIXTURES = Path(__file__).resolve().parent / "fixtures"
H100 = FIXTURES / "ddpprof-h100"
PAGES = {
    "analyze": ["analyze", str(H100), "--critical-path"],
    "critical-path": ["critical-path", str(FIXTURES / "fsdp-tp-gloo" / "fsdp_tp")],
    "diff": ["diff", str(H100 / "pytorch_ddp"), str(H100 / "zero1")],
    "simulate": ["simulate", str(H100 / "pytorch_ddp"), "--bandwidth-gbps", "100",
                 "--latency-us", "10"],
}


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pages")
    made = {}
    for name, args in PAGES.items():
        made[name] = folder / f"{name}.html"
        result = click.testing.CliRunner().invoke(
            cli, [*args, "--html-out", str(made[name]), "--quiet"])
        assert result.exit_code == 0, (name, result.output)
    return made


def test_each_page_is_one_small_file(pages):
    for name, page in pages.items():
        text = page.read_text()
        assert len(re.findall(r"plotly\.js \(basic - minified\) v\d", text)) == 1, name
        assert len(text.encode()) < 2 * 1024 * 1024, name


def test_the_analyze_page_opens_on_the_answer(pages):
    text = pages["analyze"].read_text()
    order = [text.index(marker) for marker in (
        'id="summary"', 'id="findings"', 'id="comparison"', "<h2>Per rank</h2>",
        "<h2>Charts</h2>", "<h2>Metric definitions</h2>")]
    assert order == sorted(order)
    findings = text[text.index('id="findings"'):text.index('id="comparison"')]
    assert findings.count("<details class=") >= 1 and "evidence: " in findings
    assert re.search(r"\d+\.\d\d (MiB|KiB)|\d+\.\d%", findings)   # evidence with units


def test_the_plotly_bundle_is_the_version_plotly_py_draws_for():
    import plotly.offline

    from ddpprof.render.charts import plotly_js

    full = re.search(r"plotly\.js v([\d.]+)", plotly.offline.get_plotlyjs()).group(1)
    assert re.search(r"plotly\.js \(basic - minified\) v([\d.]+)", plotly_js()).group(1) == full


@pytest.mark.skipif(BROWSER is None, reason="no chromium could be installed here "
                                            "(scripts/test.sh installs Debian's chromium)")
def test_every_chart_reads_well_in_a_browser(pages, tmp_path):
    # every page at 800 px; the two with the widest charts at 1400 px as well
    checked = check_pages(pages, (800,), tmp_path)
    checked |= check_pages({k: pages[k] for k in ("analyze", "diff")}, (1400,), tmp_path)
    for where, result in checked.items():
        assert result["errors"] is None, (where, result["errors"])
        charts = result["charts"]
        assert len([c for c in charts if c["chart"] not in ("page", "table")]) == int(
            result["figures"]), where
        problems = [(c["chart"], c["problems"]) for c in charts if c["problems"]]
        assert not problems, (where, problems)
