"""``ddpprof bench``: the scaling table's arithmetic, and one small real run."""

from __future__ import annotations

import json

import pytest

from ddpprof.bench.scaling import amdahl, configurations


def test_amdahl_inverts_the_law():
    # f = 0.8 on 4 processes: S = 1 / (0.2 + 0.8 / 4) = 2.5, ceiling 1 / 0.2 = 5
    f, ceiling = amdahl(2.5, 4)
    assert f == pytest.approx(0.8) and ceiling == pytest.approx(5.0)
    assert amdahl(0.7, 2) == (None, None)  # a slowdown: no parallel fraction to speak of
    assert amdahl(1.9, 1) == (None, None)


def test_single_runs_once_the_rest_at_every_count():
    assert configurations(["m"], ["single", "simple_ddp"], [1, 2, 4]) == [
        ("m", "single", 1), ("m", "simple_ddp", 1), ("m", "simple_ddp", 2),
        ("m", "simple_ddp", 4)]


def test_bad_input_is_exit_2(ddpprof_cli, tmp_path):
    result = ddpprof_cli("bench", "--model", "mlp-tiny,gpt-9", "--out", str(tmp_path))
    assert result.returncode == 2 and "unknown model 'gpt-9'" in result.stderr
    assert not list(tmp_path.iterdir())  # nothing ran before the check


@pytest.mark.slow
def test_bench_table_and_page(ddpprof_cli, tmp_path):
    result = ddpprof_cli("bench", "--model", "mlp-tiny", "--variant", "single",
                         "--variant", "simple_ddp", "--nproc", "1", "--nproc", "2",
                         "--repeats", "1", "--steps", "4", "--global-batch", "32",
                         "--out", str(tmp_path / "bench"), "--json", str(tmp_path / "b.json"),
                         "--html-out", str(tmp_path / "bench.html"))
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "bench" / "bench.json").exists()   # nothing written unasked
    rows = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert [(r["variant"], r["nproc"]) for r in rows] == [
        ("single", 1), ("simple_ddp", 1), ("simple_ddp", 2)]
    single, _, ddp2 = rows
    assert single["speedup"] == 1.0 and single["comm_ms"] is None
    assert ddp2["speedup"] == pytest.approx(single["step_ms_median"] / ddp2["step_ms_median"])
    assert ddp2["efficiency"] == pytest.approx(ddp2["speedup"] / 2)
    assert 0 < ddp2["comm_ms"] < ddp2["step_ms_median"]  # blocking: its sync is its comm
    assert ddp2["epoch_s"] == pytest.approx(32768 / 32 * ddp2["step_ms_median"] / 1e3)
    assert all(r["profiler_overhead"] > 0 for r in rows)
    # timed runs are unprofiled: no traces written for them
    assert not list((tmp_path / "bench").glob("*-r0/*.pt.trace.json.gz"))
    assert 'data-figures="2"' in (tmp_path / "bench.html").read_text()
