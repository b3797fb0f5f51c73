"""``ddpprof simulate``: the replay and the fit against hand-computed numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from trace_builders import span, step, write_trace

from ddpprof.errors import UsageError
from ddpprof.simulate import CostModel, StepModel, buckets_by_cap, fit_cost, predict, step_model
from ddpprof.trace.loader import load

MB = 1024 * 1024


def test_fit_recovers_alpha_and_beta():
    sizes = np.array([1e3, 1e4, 1e5, 1e6, 4e6])
    # world 2: traffic = bytes; α = 50 µs, β = 1000 bytes/µs
    cost = fit_cost(sizes, 50 + sizes / 1000, world_size=2)
    assert cost.alpha_us == pytest.approx(50) and cost.beta_bytes_per_us == pytest.approx(1000)
    assert cost.r2 == pytest.approx(1.0)
    # world 4 moves 2·3/4 = 1.5× the bytes of world 2 through each link
    assert cost.time_us(1e6, 4) == pytest.approx(50 + 1.5e6 / 1000)


def test_fit_needs_two_sizes():
    with pytest.raises(UsageError, match="at least two sizes"):
        fit_cost(np.array([4e6, 4e6]), np.array([10.0, 11.0]), 2)


def test_buckets_close_at_the_cap():
    assert buckets_by_cap([3, 3, 5, 1, 1], cap_bytes=6) == [[0, 1], [2, 3], [4]]


def test_replay_by_hand():
    # backward 0..100 µs; gradients ready at 20 (2 MB), 60 (2 MB), 100 (4 MB); α 10 µs,
    # β = 1 MB per 10 µs; world 2 (traffic = bytes).
    model = StepModel(world_size=2, pre_us=50, backward_us=100, post_us=30,
                      grads=[(20, 2 * MB), (60, 2 * MB), (100, 4 * MB)])
    cost = CostModel(alpha_us=10, beta_bytes_per_us=MB / 10, r2=None, samples=0)
    # cap 2 MB: three buckets. comm [20,50) [60,90) [100,150): 30+30+50 = 110 µs, hidden 60
    small = predict(model, cost, cap_mb=2, world_size=2)
    assert small.buckets == 3
    assert small.step_ms == pytest.approx((50 + 150 + 30) / 1e3)
    assert small.exposed_comm_ms == pytest.approx(50 / 1e3)
    assert small.overlap_pct == pytest.approx(100 * 60 / 110)
    # one bucket: [100, 190): nothing hidden
    big = predict(model, cost, cap_mb=100, world_size=2)
    assert big.buckets == 1 and big.overlap_pct == 0
    assert big.step_ms == pytest.approx((50 + 190 + 30) / 1e3)
    # single-process equivalent: (50 + 100) × 2 + 30 = 330 µs; efficiency = 330 / (2 × 230)
    assert small.efficiency == pytest.approx(330 / (2 * 230))


def test_step_model_from_a_trace(tmp_path):
    events = [
        step(0, 0, 1000), step(1, 1000, 2000),
        span("autograd::engine::evaluate_function: AddmmBackward0", 300, 700),
        span("torch::autograd::AccumulateGrad", 350, 400,
             **{"Input Dims": [[10, 20]], "Input type": ["float"]}),
        span("torch::autograd::AccumulateGrad", 600, 650,
             **{"Input Dims": [[20]], "Input type": ["float"]}),
        span("Optimizer.step#AdamW.step", 800, 900, cat="user_annotation"),
    ]
    trace = load(write_trace(tmp_path / "rank0.json", events))
    model = step_model(trace, world_size=2, overhead_ratio=2.0)  # times halve
    assert model.pre_us == 150 and model.backward_us == 175 and model.post_us == 50
    assert model.grads == [(50.0, 800), (175.0, 80)]


@pytest.mark.parametrize(("args", "message"), [
    (["--bucket-cap-mb", "0"], "sizes must be positive"),
    (["--latency-us", "5"], "go together"),
])
def test_bad_input(args, message, tmp_path, ddpprof_cli):
    write_trace(tmp_path / "run" / "rank0.json", [step(0, 0, 10), span("aten::mm", 1, 2)])
    result = ddpprof_cli("simulate", str(tmp_path / "run"), *args)
    assert result.returncode == 2 and message in result.stderr


def test_a_run_with_gradient_accumulation_is_refused(tmp_path, ddpprof_cli):
    write_trace(tmp_path / "run" / "rank0.json", [step(0, 0, 10), span("aten::mm", 1, 2)])
    (tmp_path / "run" / "run.json").write_text(json.dumps({"config": {"grad_accum": 2}}))
    result = ddpprof_cli("simulate", str(tmp_path / "run"))
    assert result.returncode == 2 and "record with --grad-accum 1" in result.stderr


def test_a_run_without_a_trace(tmp_path, ddpprof_cli):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    result = ddpprof_cli("simulate", str(tmp_path / "run"))
    assert result.returncode == 2 and "no trace files" in result.stderr


def test_a_run_without_collectives_cannot_calibrate(tmp_path, ddpprof_cli):
    events = [step(0, 0, 1000), step(1, 1000, 2000),
              span("torch::autograd::AccumulateGrad", 350, 400,
                   **{"Input Dims": [[10]], "Input type": ["float"]})]
    write_trace(tmp_path / "run" / "rank0.json", events)
    result = ddpprof_cli("simulate", str(tmp_path / "run"))
    assert result.returncode == 2 and "at least two sizes" in result.stderr


@pytest.mark.slow
def test_simulate_a_recorded_run(tmp_path, ddpprof_cli):
    # mlp-small: gradients from 40 B to 3.2 MB, so the fit sees time grow with size
    recorded = ddpprof_cli("record", "--variant", "simple_ddp", "--model", "mlp-small",
                           "--global-batch", "32", "--out", str(tmp_path))
    assert recorded.returncode == 0, recorded.stderr
    result = ddpprof_cli("simulate", str(tmp_path / "simple_ddp"), "--bucket-cap-mb",
                         "0.005,25", "--world-size", "2,4", "--json", str(tmp_path / "s.json"),
                         "--html", str(tmp_path / "s.html"))
    assert result.returncode == 0, result.stderr
    assert "cost model: α =" in result.stdout and "fitted on 24 collectives" in result.stdout
    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    assert [(r["world_size"], r["bucket_cap_mb"], r["buckets"]) for r in rows] == [
        (2, 0.005, 4), (2, 25.0, 1), (4, 0.005, 4), (4, 25.0, 1)]
    assert all(r["step_ms"] > 0 and r["efficiency"] > 0 for r in rows)
    assert "best predicted bucket" in result.stdout
    assert 'data-figures="1"' in (tmp_path / "s.html").read_text()
