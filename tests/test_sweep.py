"""``ddpprof sweep``: bucket sizes change the bucketed variants' all-reduce calls."""

from __future__ import annotations

import json

import pytest

from ddpprof.sweep import best_sizes


def test_best_size_is_the_fastest_measured():
    rows = [{"variant": "v", "bucket_cap_mb": 1, "step_ms": 30.0},
            {"variant": "v", "bucket_cap_mb": 5, "step_ms": 20.0},
            {"variant": "v", "bucket_cap_mb": 25, "step_ms": None}]
    assert best_sizes(rows) == {"v": 5}


@pytest.mark.parametrize(("args", "message"), [
    (["--bucket-cap-mb", "0,5"], "'0' is not > 0"),
    (["--variants", "simple_ddp"], "variant 'simple_ddp' has no buckets to size"),
])
def test_bad_input(args, message, ddpprof_cli, tmp_path):
    result = ddpprof_cli("sweep", "--model", "mlp-tiny", "--out", str(tmp_path), *args)
    assert result.returncode == 2 and message in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.slow
def test_sweep_records_each_size_and_draws_the_valley(tmp_path, ddpprof_cli):
    result = ddpprof_cli("sweep", "--variants", "bucket_ddp_async", "--bucket-cap-mb",
                         "0.005,25", "--model", "mlp-tiny", "--global-batch", "32",
                         "--steps", "7", "--out", str(tmp_path / "sweep"),
                         "--json", str(tmp_path / "sweep.json"),
                         "--html", str(tmp_path / "sweep.html"))
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    small, large = rows
    assert (small["bucket_cap_mb"], large["bucket_cap_mb"]) == (0.005, 25.0)
    # mlp-tiny in reverse order at 5 KB: [b4 w4 b3 w3] [b2 w2] [b1 w1] -> 3 all-reduces
    assert small["all_reduce_calls_per_step"] == small["buckets"] == 3
    assert large["all_reduce_calls_per_step"] == large["buckets"] == 1
    assert all(r["step_ms"] > 0 and r["overlap_pct"] is not None for r in rows)
    assert "bucket_ddp_async: fastest at" in result.stderr
    page = (tmp_path / "sweep.html").read_text()
    assert 'data-figures="1"' in page and "default 25 MiB" in page
