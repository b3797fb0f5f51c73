"""``ddpprof sweep``: bucket sizes change the bucketed variants' all-reduce calls."""

from __future__ import annotations

import json

import pytest

from ddpprof.sweep.bucket_caps import SweepRow, best_sizes


def test_best_size_is_the_fastest_measured():
    rows = [SweepRow("v", "m", 2, 1, "v-cap1", "complete", step_ms=30.0),
            SweepRow("v", "m", 2, 5, "v-cap5", "complete", step_ms=20.0),
            SweepRow("v", "m", 2, 25, "v-cap25", "failed")]
    assert best_sizes(rows) == {"v": 5}
    # a valley per model when several are swept
    rows.append(SweepRow("v", "m2", 2, 25, "v-m2-cap25", "complete", step_ms=1.0))
    assert best_sizes(rows) == {"v m": 5, "v m2": 25}


@pytest.mark.parametrize(("args", "message"), [
    (["--bucket-cap-mb", "0,5"], "'0' is not > 0"),
    (["--variant", "simple_ddp"], "--variant simple_ddp: it has no buckets to size"),
    (["--variant", ""], "'--variant': '': expected a value"),
])
def test_bad_input(args, message, ddpprof_cli, tmp_path):
    result = ddpprof_cli("sweep", "--model", "mlp-tiny", "--out", str(tmp_path), *args)
    assert result.returncode == 2 and message in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.slow
def test_sweep_records_each_size_and_draws_the_valley(tmp_path, ddpprof_cli):
    result = ddpprof_cli("sweep", "--variant", "bucket_ddp_async", "--bucket-cap-mib",
                         "0.005,25", "--model", "mlp-tiny", "--global-batch", "32",
                         "--steps", "7", "--out", str(tmp_path / "sweep"),
                         "--json", str(tmp_path / "sweep.json"),
                         "--html-out", str(tmp_path / "sweep.html"))
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    small, large = rows
    assert (small["bucket_cap_mib"], large["bucket_cap_mib"]) == (0.005, 25.0)
    assert (small["run"], large["run"]) == ("bucket_ddp_async-cap0.005", "bucket_ddp_async-cap25")
    # mlp-tiny in reverse order at 5 KB: [b4 w4 b3 w3] [b2 w2] [b1 w1] -> 3 all-reduces
    assert small["gradient_calls_per_step"] == small["buckets"] == 3
    assert large["gradient_calls_per_step"] == large["buckets"] == 1
    assert small["gradient_collective"] == "all_reduce"
    assert all(r["step_ms"] > 0 and r["overlap_pct"] is not None for r in rows)
    assert "bucket_ddp_async: fastest at" in result.stderr
    page = (tmp_path / "sweep.html").read_text()
    assert 'data-figures="1"' in page and "default 25 MiB" in page


@pytest.mark.slow
def test_sweep_sizes_a_sharded_variant_by_its_reduce_scatters(tmp_path, ddpprof_cli):
    """zero1 has buckets (the registry's ``bucketed``): sweep sizes it, and counts its
    gradient collective, the reduce-scatter."""
    result = ddpprof_cli("sweep", "--variant", "zero1", "--bucket-cap-mib", "0.005",
                         "--model", "mlp-tiny", "--global-batch", "16", "--steps", "6",
                         "--out", str(tmp_path / "sweep"), "--json", "-")
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)["rows"]
    assert (row["variant"], row["status"], row["gradient_collective"]) == (
        "zero1", "complete", "reduce_scatter")
    # mlp-tiny at 5 KB: 3 buckets (see above), one reduce-scatter each
    assert row["gradient_calls_per_step"] == row["buckets"] == 3
