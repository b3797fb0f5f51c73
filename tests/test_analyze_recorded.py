"""``ddpprof analyze`` on traces that ``ddpprof record`` made: invariants that must hold."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from ddpprof.variants import VARIANTS_IN_ALL

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def analyzed(all_variants, tmp_path_factory):
    from conftest import run_ddpprof

    out, recorded = all_variants
    assert recorded.returncode == 0, recorded.stderr
    files = tmp_path_factory.mktemp("analysis")
    result = run_ddpprof("analyze", str(out), "--json", str(files / "a.json"),
                         "--csv", str(files / "a.csv"), "--per-step")
    assert result.returncode == 0, result.stderr
    document = json.loads((files / "a.json").read_text())
    return {run["run"]: run for run in document["runs"]}, document, result, files


def test_every_variant_is_analyzed_as_a_cpu_run(analyzed):
    runs, document, _, _ = analyzed
    assert document["schema"] == "ddpprof.analyze" and document["version"] == 6
    assert document["errors"] == []
    assert sorted(runs) == sorted(VARIANTS_IN_ALL)
    for name, run in runs.items():
        assert run["kind"] == "cpu" and run["variant"] == name
        assert run["steps"] == 1 and run["last_step"] == "dropped"  # 2 active, last dropped
        assert run["ranks"] == (1 if name == "single" else 2)


def test_each_share_matches_its_definition(analyzed):
    """Every rank of every variant: each share against its written definition, computed from
    the raw trace by the plain second implementation in share_reference.py (idle measured as
    the window's gaps, not as what the other shares leave)."""
    from share_reference import reference_shares

    runs, *_ = analyzed
    for run in runs.values():
        for rank in run["per_rank"]:
            expected = reference_shares(Path(rank["path"]))
            assert expected is not None, rank["path"]  # a CPU trace: always covered
            for share, value in expected.items():
                assert rank[share] == (None if value is None else pytest.approx(value, abs=1e-6)), (
                    run["run"], rank["rank"], share)


def test_overlap_ordering(analyzed):
    runs, *_ = analyzed
    assert runs["single"]["overlap_pct"] is None  # no communication: n/a, not 0 or NaN
    assert runs["simple_ddp"]["overlap_pct"] < 5.0
    assert runs["pytorch_ddp"]["overlap_pct"] > runs["simple_ddp"]["overlap_pct"]


def test_allreduce_calls_per_step_are_what_each_variant_launches(analyzed):
    runs, *_ = analyzed
    for name, run in runs.items():
        assert run["all_reduce_calls_per_step"] == run["expected_allreduces_per_step"], name


def test_sharded_collectives_per_step_are_what_each_variant_launches(all_variants, analyzed):
    """Reduce-scatters and all-gathers seen in the trace (gloo's reduce-scatter spans named
    by the op that issued them) are those the variant says one sync launches."""
    out, _ = all_variants
    runs, *_ = analyzed
    for name in ("zero1", "zero2", "fsdp"):
        expected = json.loads((out / name / "run.json").read_text())["measured"][
            "collectives_per_sync"]
        for kind in ("reduce_scatter", "all_gather"):
            assert runs[name][f"{kind}_calls_per_step"] == expected[kind], (name, kind)
        assert runs[name]["reduce_scatter_busbw_gbps"] is not None, name


def test_bytes_per_step_are_the_gradient(analyzed):
    runs, *_ = analyzed
    gradient_bytes = 1_462_538 * 4
    # bucket_ddp_async's buckets also carry one float32 "used" flag per parameter tensor (8)
    for name, extra in (("simple_ddp", 0), ("bucket_ddp_async", 8 * 4), ("pytorch_ddp", 0)):
        run = runs[name]
        per_step = run["all_reduce_bytes_per_call"] * run["all_reduce_calls_per_step"]
        assert per_step == gradient_bytes + extra, name
        assert run["all_reduce_busbw_gbps"] == pytest.approx(run["all_reduce_algbw_gbps"])


def test_table_csv_and_per_step_output(analyzed):
    runs, _, result, files = analyzed
    assert result.stdout.splitlines()[0].split()[:3] == ["run", "ranks", "step_ms"]
    rows = list(csv.DictReader(io.StringIO((files / "a.csv").read_text())))
    assert sorted(r["run"] for r in rows) == sorted(runs)
    assert "ProfilerStep#2" in result.stdout  # the per-step table
    assert "last ProfilerStep dropped" in result.stderr


def test_python_api_returns_a_dataframe(all_variants):
    import ddpprof

    out, _ = all_variants
    frame = ddpprof.analyze(out)
    assert sorted(frame["run"]) == sorted(VARIANTS_IN_ALL)
    assert {"compute_pct", "overlap_pct", "all_reduce_calls_per_step"} <= set(frame.columns)
