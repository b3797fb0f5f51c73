"""``ddpprof calibrate``: the sweep's sizes, its summary and fit against hand-computed numbers,
reading calibration files, bad input, and one tiny sweep through torchrun (plus one stopped by
a signal, which must never look complete)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import msgspec
import pytest

from ddpprof.core.errors import UsageError
from ddpprof.run.manifest import Owner
from ddpprof.simulate.calibrate import (
    Calibration,
    Fit,
    SweepResult,
    read_calibration,
    summarize,
    sweep_sizes,
    usable,
)


def test_sizes_grow_by_the_factor_up_to_the_largest():
    assert sweep_sizes(4096, 65536) == [4096, 8192, 16384, 32768, 65536]
    assert sweep_sizes(4096, 65536, 4) == [4096, 16384, 65536]
    # whole float32s: 6 bytes is one element, then 6 × 1.5 = 9 -> 8
    assert sweep_sizes(6, 10, 1.5) == [4, 8]
    with pytest.raises(UsageError, match="below"):
        sweep_sizes(2048, 1024)


def test_summary_by_hand():
    # 2 ranks: traffic = size. Medians 200 µs for 1,000 B and 400 µs for 3,000 B:
    # t = α + x/β through both: α = 100 µs, β = 10 B/µs (0.01 GB/s)
    result = SweepResult(world_size=2, hostname="h", cores=2, devices=["cpu", "cpu"],
                         threads_per_rank=1, torch_version="2.13.0",
                         times_us=[[190.0, 200.0, 260.0], [400.0, 390.0, 410.0]])
    points, fit = summarize(result, [1000, 3000])
    first = points[0]
    assert (first.time_us, first.time_min_us, first.time_max_us) == (200.0, 190.0, 260.0)
    assert first.algbw_gbps == pytest.approx(1000 / 200 / 1e3)   # 5 MB/s
    assert first.busbw_gbps == pytest.approx(first.algbw_gbps)   # 2(N−1)/N = 1 at N = 2
    assert fit.alpha_us == pytest.approx(100) and fit.beta_busbw_gbps == pytest.approx(0.01)
    # 4 ranks: busbw = algbw × 2·3/4
    four = msgspec.structs.replace(result, world_size=4)
    assert summarize(four, [1000, 3000])[0][1].busbw_gbps == pytest.approx(
        3000 / 400 / 1e3 * 1.5)
    # a sweep whose time does not grow with size: the CLI's one line (exit 2)
    flat = msgspec.structs.replace(result, times_us=[[400.0], [200.0]])
    with pytest.raises(UsageError, match="do not get slower with size"):
        summarize(flat, [1000, 3000])


def test_read_and_judge_calibration_files(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text("{not json")
    with pytest.raises(UsageError, match="not JSON"):
        read_calibration(path)
    path.write_text(json.dumps({"schema": "ddpprof.analyze"}))
    with pytest.raises(UsageError, match="not a `ddpprof calibrate` file"):
        read_calibration(path)
    path.write_text(json.dumps({"schema": "ddpprof.calibration", "world_size": "two"}))
    with pytest.raises(UsageError, match="world_size: expected int"):
        read_calibration(path)
    fit = Fit(alpha_us=1.0, beta_busbw_gbps=1.0, r2=None)
    assert usable(Calibration(status="complete", fit=fit)) is None
    assert usable(Calibration(status="failed", error="rank 1: boom", fit=fit)) == \
        "the sweep is failed (rank 1: boom)"
    assert usable(Calibration(status="complete", error="no fit: flat")) == "no fit: flat"
    # still "running", but its recorder is gone: interrupted
    gone = Owner(pid=2**22 + 12345, hostname=os.uname().nodename)
    assert usable(Calibration(status="running", owner=gone, fit=fit)) == \
        "the sweep is interrupted"


@pytest.mark.parametrize(("args", "message"), [
    (["--nproc", "1"], "needs two ranks"),
    (["--min-bytes", "1M", "--max-bytes", "4K"], "is below --min-bytes"),
    (["--min-bytes", "3"], "less than 4 bytes"),
    (["--max-bytes", "lots"], "not a size in bytes"),
    (["--min-bytes", "4K", "--max-bytes", "4K"], "two sizes at least"),
    (["--step-factor", "1"], "not > 1"),
    (["--node-rank", "1"], "not below --nnodes"),
    (["--backend", "nccl"], "needs one GPU per rank"),
])
def test_bad_input(args, message, tmp_path, ddpprof_cli):
    result = ddpprof_cli("calibrate", "--out", str(tmp_path / "c"), *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "c" / "calibration.json").exists()


@pytest.mark.slow
def test_a_tiny_sweep(tmp_path, ddpprof_cli):
    # 4 KiB, 128 KiB, 4 MiB: far enough apart that time grows with size on a busy machine
    result = ddpprof_cli("calibrate", "--nproc", "2", "--backend", "gloo", "--min-bytes", "4K",
                         "--max-bytes", "4M", "--step-factor", "32", "--warmup-iters", "1",
                         "--iters", "5", "--out", str(tmp_path / "c"), "--html-out",
                         str(tmp_path / "c.html"))
    assert result.returncode == 0, result.stderr
    calibration = read_calibration(tmp_path / "c" / "calibration.json")
    assert usable(calibration) is None
    assert (calibration.backend, calibration.world_size, calibration.iters) == ("gloo", 2, 5)
    assert calibration.machine.devices == [calibration.machine.devices[0]] * 2
    assert calibration.torch_version.startswith("2.")
    assert [p.size_bytes for p in calibration.points] == [4096, 131072, 4194304]
    for point in calibration.points:
        assert point.time_min_us <= point.time_us <= point.time_max_us
        assert point.algbw_gbps == pytest.approx(point.size_bytes / point.time_us / 1e3)
        assert point.busbw_gbps == pytest.approx(point.algbw_gbps)
    assert calibration.fit.alpha_us >= 0 and calibration.fit.beta_busbw_gbps > 0
    assert "α =" in result.stderr and "4194304" in result.stdout
    assert 'data-figures="1"' in (tmp_path / "c.html").read_text()


@pytest.mark.slow
def test_a_signal_marks_the_sweep_interrupted(tmp_path):
    out = tmp_path / "c"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "ddpprof.cli", "calibrate", "--nproc", "2", "--backend", "gloo",
         "--min-bytes", "4K", "--max-bytes", "8K", "--iters", "1000000", "--out", str(out)],
        env={**os.environ, "CI": "true"}, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "calibrate.log").is_file():
        time.sleep(0.2)
    time.sleep(3)  # the ranks are sweeping
    assert read_calibration(out / "calibration.json").status == "running"
    sweep.send_signal(signal.SIGTERM)
    _, stderr = sweep.communicate(timeout=60)
    assert sweep.returncode == 128 + signal.SIGTERM, stderr
    calibration = read_calibration(out / "calibration.json")
    assert calibration.status == "interrupted" and calibration.fit is None
    assert usable(calibration) == "the sweep is interrupted (interrupted by SIGTERM)"
