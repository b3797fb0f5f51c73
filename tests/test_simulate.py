"""``ddpprof simulate``: the cost fit, the contention estimates, reading a step program out of a
trace, and the replay of every policy, each against numbers worked out by hand; then the
command on the recorded run of every variant."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from trace_builders import analyze_one, span, step, write_trace

from ddpprof.calibrate import Calibration, Fit
from ddpprof.errors import UsageError
from ddpprof.manifest import BucketRecord
from ddpprof.simulate import registration_positions, simulate_run
from ddpprof.simulate.cost import (
    Contention,
    CostModel,
    comm_slowdowns,
    compute_slowdown,
    fit_cost,
    traffic_bytes,
)
from ddpprof.simulate.program import StepProgram, read_trace
from ddpprof.simulate.replay import Policy, replay
from ddpprof.trace.loader import load
from ddpprof.variants import VARIANTS
from ddpprof.variants.bucketing import assign_buckets

MB = 1024 * 1024
FLOAT = {"Input type": ["float"]}


def test_fit_recovers_alpha_and_beta():
    traffic = np.array([1e3, 1e4, 1e5, 1e6, 4e6])
    # α = 50 µs, β = 1000 bytes/µs
    cost = fit_cost(traffic, 50 + traffic / 1000, "test")
    assert cost.alpha_us == pytest.approx(50) and cost.beta_bytes_per_us == pytest.approx(1000)
    assert cost.r2 == pytest.approx(1.0)
    # an all-reduce on 4 ranks moves 2·3/4 = 1.5× its bytes; a reduce-scatter 3/4, but on
    # gloo (an all-reduce underneath) 1.5×
    assert cost.time_us(1e6, 4) == pytest.approx(50 + 1.5e6 / 1000)
    assert cost.time_us(1e6, 4, "reduce_scatter", "nccl") == pytest.approx(50 + 0.75e6 / 1000)
    assert cost.time_us(1e6, 4, "reduce_scatter", "gloo") == pytest.approx(50 + 1.5e6 / 1000)
    assert traffic_bytes("all_gather", 1e6, 2) == pytest.approx(0.5e6)


def test_fit_keeps_latency_non_negative():
    # t = x/100 − 10 through both points: α would be −10. Refitted as t = x/β on relative
    # errors: with r = x/t = (200, 400/3), β = Σr² / Σr = (40000 + 17777.8) / 333.3 = 173.3
    cost = fit_cost(np.array([2000.0, 4000.0]), np.array([10.0, 30.0]), "test")
    assert cost.alpha_us == 0.0 and cost.beta_bytes_per_us == pytest.approx(173.3333, rel=1e-5)


def test_fit_needs_two_sizes():
    with pytest.raises(UsageError, match="single size"):
        fit_cost(np.array([4e6, 4e6]), np.array([10.0, 11.0]), "test")


def test_buckets_close_at_the_cap():
    # registration order; taken in reverse: [1, 1, 5] reaches 6, [3, 3] too
    assert assign_buckets([3, 3, 5, 1, 1], cap_bytes=6) == [[4, 3, 2], [1, 0]]
    # in the order given, one dtype per bucket: float32 [3, 5] reaches 6, [1] is left over;
    # bfloat16 [3, 1] stays open
    groups = ["float32", "bfloat16", "float32", "bfloat16", "float32"]
    assert assign_buckets([3, 3, 5, 1, 1], 6, groups, order=range(5)) == [[0, 2], [1, 3],
                                                                          [4]]


def test_compute_slowdown_is_a_weighted_geometric_mean_of_same_op_ratios():
    # key a: 100 µs alone, 150 with a collective in flight (1.5×); key b: 200 both ways;
    # weights = median alone × observations: a 200, b 400 -> σ = 1.5^(200/600)
    sigma, keys = compute_slowdown(["a", "a", "b", "b", "c"],
                                   np.array([100.0, 150.0, 200.0, 200.0, 999.0]),
                                   np.array([0.0, 1.0, 0.05, 0.95, 0.5]))
    assert keys == 2 and sigma == pytest.approx(1.5 ** (1 / 3))
    assert compute_slowdown(["a"], np.array([1.0]), np.array([0.0])) == (None, 0)


def test_comm_slowdowns_separate_alone_from_beside_compute():
    # ρa = 1, ρo = 2: measured = modelled × ((1 − f) + 2f)
    alone, beside = comm_slowdowns(np.array([10.0, 10.0, 20.0]), np.array([10.0, 20.0, 30.0]),
                                   np.array([0.0, 1.0, 0.5]))
    assert alone == pytest.approx(1.0) and beside == pytest.approx(2.0)
    # every call alone: only ρa can be told, as total measured / total modelled
    assert comm_slowdowns(np.array([10.0, 30.0]), np.array([20.0, 40.0]),
                          np.array([0.0, 0.1])) == (pytest.approx(1.5), None)


def test_registration_positions_match_sizes_in_reverse_registration_order():
    # registration: 0 w0 (20480 B), 1 b0 (40), 2 w1 (20480), 3 b1 (40); ready: b1 w1 b0 w0
    recorded = [BucketRecord(params=["w1", "b1"], param_index=[2, 3], param_bytes=[20480, 40],
                             bytes=20520),
                BucketRecord(params=["w0", "b0"], param_index=[0, 1], param_bytes=[20480, 40],
                             bytes=20520)]
    assert registration_positions([40, 20480, 40, 20480], recorded) == ([3, 2, 1, 0], None,
                                                                         None)
    fallback, dtypes, note = registration_positions([40, 999], recorded)
    assert fallback == [1, 0] and dtypes is None and "do not match" in note
    assert registration_positions([1, 2], None)[0] == [1, 0]


# backward 0..200 compute µs after 100 µs of forward; gradients ready at 50 (2 MiB),
# 120 (2 MiB), 200 (4 MiB); 10 µs of sync work, 40 µs of optimizer. Cost: α = 10 µs and
# 1 MiB per 10 µs of traffic (world 2: traffic = bytes): 2 MiB -> 30 µs, 4 MiB -> 50 µs.
PROGRAM = StepProgram(step="ProfilerStep#1", wall_us=0, pre_us=100, backward_us=200,
                      grads=[(50, 2 * MB), (120, 2 * MB), (200, 4 * MB)], sync_us=10,
                      post_us=40, collectives=[], comm_us=0, overlap_pct=None,
                      exposed_comm_us=0)
COST = CostModel(alpha_us=10, beta_bytes_per_us=MB / 10, r2=None, samples=0)
REVERSE_READY = [2, 1, 0]       # registration positions: the last ready registered first
NO_CONTENTION = Contention()


def _replay(policy, contention=NO_CONTENTION, world=2, backend="gloo", scale=1.0):
    return replay(PROGRAM, policy, COST, contention, world, backend, REVERSE_READY, scale, 1.0)


def test_bucketed_replay_by_hand():
    # cap 2 MiB: three buckets, comm [50,80) [120,150) [200,250) in backward: 250 + 100 + 10
    # + 40 = 400 µs; 110 µs of communication, 60 hidden
    small = _replay(Policy("bucketed", 2))
    assert small.gradient_collectives == 3
    assert small.step_us == pytest.approx(400)
    assert (small.comm_us, small.hidden_us) == (pytest.approx(110), pytest.approx(60))
    # one bucket of 8 MiB at backward's end: 10 + 80 = 90 µs, nothing hidden
    big = _replay(Policy("bucketed", 100))
    assert big.gradient_collectives == 1 and big.overlap_pct == 0
    assert big.step_us == pytest.approx(100 + 200 + 90 + 10 + 40)
    # per-parameter async launches are the same three calls here
    assert _replay(Policy("async")).step_us == pytest.approx(400)


def test_blocking_policies_stop_compute():
    # a hook blocks at each gradient (30 + 30 + 50); simple_ddp blocks after backward: the same
    for policy in (Policy("hook"), Policy("blocking")):
        outcome = _replay(policy)
        assert outcome.step_us == pytest.approx(100 + 200 + 110 + 10 + 40)
        assert outcome.hidden_us == 0


def test_sharded_replay_adds_the_all_gathers_after_the_optimizer():
    # gloo: each reduce-scatter costs an all-reduce of the bucket (as in the bucketed case);
    # after the optimizer, three all-gathers of (N−1)/N of each bucket: 20 + 20 + 30
    zero1 = Policy.of(VARIANTS["zero1"], 2)
    assert (zero1.name, zero1.sync_kind) == ("sharded", "reduce_scatter")
    assert _replay(zero1).step_us == pytest.approx(400 + 70)
    # NCCL's reduce-scatter moves half: [50,70) [120,140) [200,230): 230 in backward
    assert _replay(zero1, backend="nccl").step_us == pytest.approx(100 + 230 + 10 + 40 + 70)


def test_contention_slows_both_lanes():
    # σ = 2, ρo = 1.5, ρa = 1. At 50 a 30 µs call starts beside compute: it takes 45 µs of
    # wall time, compute meanwhile does 22.5 µs; compute then reaches 120 alone (47.5 µs).
    # The same again from 120 (45 + 57.5); the last call (50 µs) runs alone after backward.
    # Backward: 50 + 45 + 47.5 + 45 + 57.5 + 50 = 295; step 100 + 295 + 10 + 40 = 445.
    outcome = _replay(Policy("bucketed", 2), Contention(compute_slowdown=2.0, comm_alone=1.0,
                                                        comm_overlapped=1.5))
    assert outcome.step_us == pytest.approx(445)
    assert outcome.comm_us == pytest.approx(140) and outcome.hidden_us == pytest.approx(90)


def test_compute_that_ends_while_a_collective_runs():
    # σ = 2, ρo = 6, ρa = 1. At 50 a 30 µs call starts: 180 µs of wall time beside compute.
    # Compute reaches 120 (70 µs at σ: 140 wall) first, at wall 190; the call has 30 − 140/6
    # left. Then it ends at 230 (compute at 140); the second call starts: compute reaches 200
    # (60 µs: 120 wall) at 350, the call having 30 − 120/6 = 10 µs left, run alone: 360; the
    # third (50 µs) alone: 410. Step: 100 + 410 + 10 + 40 = 560; communication 180 + 130 +
    # 50 = 360, of which 180 + 120 beside compute.
    outcome = _replay(Policy("bucketed", 2), Contention(compute_slowdown=2.0, comm_alone=1.0,
                                                        comm_overlapped=6.0))
    assert outcome.step_us == pytest.approx(560)
    assert outcome.comm_us == pytest.approx(360) and outcome.hidden_us == pytest.approx(300)


def test_buckets_follow_reverse_registration_and_launch_in_order():
    # registered in the order they become ready: reverse registration puts the last-ready
    # gradient in bucket 0, so no bucket can launch before backward ends: 200 + 50 + 30 + 30
    in_ready_order = [0, 1, 2]
    outcome = replay(PROGRAM, Policy("bucketed", 2), COST, NO_CONTENTION, 2, "gloo",
                     in_ready_order, 1.0, 1.0)
    assert outcome.step_us == pytest.approx(100 + 310 + 10 + 40)
    # --ready-order buckets them as they become ready: the 400 µs of the first case
    ready = replay(PROGRAM, Policy("bucketed", 2, ready_order=True), COST, NO_CONTENTION, 2,
                   "gloo", in_ready_order, 1.0, 1.0)
    assert ready.step_us == pytest.approx(400)


def test_world_size_scales_compute_and_queues_calls():
    # 4 ranks from a 2-rank program: compute halves (pre 50, ready 25, 60, 100); traffic 1.5×
    # (2 MiB -> 40 µs, 4 MiB -> 70 µs): [25,65) [65,105) [105,175); 50 + 175 + 10 + 40
    assert _replay(Policy("bucketed", 2), world=4, scale=0.5).step_us == pytest.approx(275)


@pytest.fixture
def hook_trace(tmp_path):
    """One step of a blocking-hook run on the training thread (tid 1), gloo on tid 9:

    forward mm [0,300) alone; backward from 300: an mm of the same shape [300,700) beside an
    all-reduce [300,700) (so σ = 400/300); gradient 1's AccumulateGrad [700,820) blocked in a
    wait [710,810) for an all-reduce [710,810); gradient 2's AccumulateGrad [850,900); a
    division [910,930) between backward and the optimizer [950,1000)."""
    mm = {"Input Dims": [[8, 16], [16, 32]], **FLOAT}
    events = [
        step(0, 0, 1000), step(1, 1000, 1100),
        span("aten::mm", 0, 300, **mm),
        span("autograd::engine::evaluate_function: MmBackward0", 300, 700),
        span("aten::mm", 300, 700, **mm),
        span("gloo:all_reduce", 300, 700, tid=9, **{"Input Dims": [[1000]], **FLOAT}),
        span("torch::autograd::AccumulateGrad", 700, 820, **{"Input Dims": [[100]], **FLOAT}),
        span("ddpprof::wait", 710, 810),
        span("gloo:all_reduce", 710, 810, tid=9, **{"Input Dims": [[100]], **FLOAT}),
        span("torch::autograd::AccumulateGrad", 850, 900, **{"Input Dims": [[50]], **FLOAT}),
        span("aten::div_", 910, 930),
        span("Optimizer.step#AdamW.step", 950, 1000, cat="user_annotation"),
    ]
    return load(write_trace(tmp_path / "rank0.json", events))


def test_analyze_and_simulate_pair_c10d_ops_with_gloo_spans_alike(tmp_path):
    """gloo runs a reduce-scatter as an all-reduce; the c10d op that issued it, here on another
    thread than the steps' (autograd's), names it: both sides pair them the same way."""
    events = [step(0, 0, 1000), step(1, 1000, 2000),
              span("torch::autograd::AccumulateGrad", 100, 200, **{"Input Dims": [[64]], **FLOAT}),
              span("c10d::_reduce_scatter_base_", 210, 220, tid=2),
              span("gloo:all_reduce", 230, 400, tid=9, **{"Input Dims": [[64]], **FLOAT})]
    trace = load(write_trace(tmp_path / "rank0.json", events))
    [collective] = read_trace(trace).collectives
    assert (collective.kind, collective.launch_us) == ("reduce_scatter", 210)
    assert analyze_one(trace).calls.kind == ["reduce_scatter"]


def test_step_program_from_a_trace(hook_trace):
    model = read_trace(hook_trace)
    assert model.contention.compute_slowdown == pytest.approx(4 / 3)
    [program] = model.programs
    # before backward: 300. Backward [300,900): 400 at 1/σ = 300, then 10, the wait is not
    # compute, then 10 + 30 + 50 = 400 in all; gradient 1 ready at 300 + 10 + 10 = 320.
    assert program.pre_us == pytest.approx(300)
    assert program.backward_us == pytest.approx(400)
    assert program.grads == [(pytest.approx(320), 400), (pytest.approx(400), 200)]
    assert program.sync_us == pytest.approx(20) and program.post_us == pytest.approx(50)
    first, second = program.collectives
    assert (first.phase, first.at_us, first.collective.size_bytes) == ("backward", 0, 4000)
    assert first.collective.overlap == pytest.approx(1.0)
    assert (second.phase, second.at_us) == ("backward", pytest.approx(310))
    assert (second.collective.overlap, second.collective.blocked) == (0, pytest.approx(1.0))
    # 500 µs of communication, the first 400 beside compute
    assert program.comm_us == pytest.approx(500) and program.overlap_pct == pytest.approx(80)


def test_gradient_accumulation_replays_the_last_backward(tmp_path):
    grad = {"Input Dims": [[10]], **FLOAT}
    events = [step(0, 0, 1000), step(1, 1000, 1100),
              span("autograd::engine::evaluate_function: A", 100, 200),
              span("torch::autograd::AccumulateGrad", 190, 200, **grad),
              span("autograd::engine::evaluate_function: A", 500, 700),
              span("torch::autograd::AccumulateGrad", 690, 700, **grad)]
    program = read_trace(load(write_trace(tmp_path / "rank0.json", events)), 2).programs[0]
    # the first micro-step belongs to the time before the last backward
    assert program.pre_us == pytest.approx(500) and program.backward_us == pytest.approx(200)
    assert program.grads == [(pytest.approx(200), 40)]


def _run(tmp_path, events, manifest=None, name="run"):
    folder = tmp_path / name
    write_trace(folder / "rank0.json", events)
    if manifest is not None:
        (folder / "run.json").write_text(json.dumps(manifest))
    return folder


def _calibration(path, status="complete", backend="gloo"):
    calibration = Calibration(status=status, backend=backend, world_size=2,
                              fit=Fit(alpha_us=10.0, beta_busbw_gbps=1.0, r2=None))
    import msgspec

    path.write_bytes(msgspec.json.encode(calibration))
    return path


def test_a_calibration_beside_the_run_is_used(hook_trace, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(tmp_path, runs / "hook", ignore=shutil.ignore_patterns("runs"))
    _calibration(runs / "calibration.json")
    simulation = simulate_run(runs / "hook", [1.0], [2], allow_sweep=False)
    assert simulation.cost.source == f"calibration {runs / 'calibration.json'}"
    assert (simulation.cost.alpha_us, simulation.cost.beta_bytes_per_us) == (10.0, 1000.0)
    # one of another backend, or unfinished, is passed over for the run's own fit
    _calibration(runs / "calibration.json", backend="nccl")
    assert simulate_run(runs / "hook", [1.0], [2], allow_sweep=False).cost.source.startswith(
        "fit over the run's 2 collectives")


@pytest.mark.parametrize(("args", "message"), [
    (["--bucket-cap-mib", "0"], "'0' is not > 0"),
    (["--bucket-cap-mb", "0"], "'0' is not > 0"),   # the old spelling still works
    (["--latency-us", "5"], "go together"),
    (["--calibration", "c.json", "--latency-us", "1", "--bandwidth-gbps", "1"], "not both"),
    (["--calibration", "missing.json"], "missing.json: no such file"),
])
def test_bad_input(args, message, tmp_path, ddpprof_cli):
    run = _run(tmp_path, [step(0, 0, 10), span("aten::mm", 1, 2)])
    result = ddpprof_cli("simulate", str(run), *args, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unfinished_calibration_is_refused(hook_trace, tmp_path, ddpprof_cli):
    (tmp_path / "elsewhere").mkdir()
    calibration = _calibration(tmp_path / "elsewhere" / "c.json", status="failed")
    result = ddpprof_cli("simulate", str(tmp_path), "--calibration", str(calibration))
    assert result.returncode == 2 and "the sweep is failed" in result.stderr


def test_a_run_without_a_trace(tmp_path, ddpprof_cli):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    result = ddpprof_cli("simulate", str(tmp_path / "run"))
    assert result.returncode == 2 and "no trace files" in result.stderr


def test_a_run_with_gradient_accumulation_is_simulated(tmp_path, ddpprof_cli):
    grad = {"Input Dims": [[10]], **FLOAT}
    run = _run(tmp_path, [step(0, 0, 1000), step(1, 1000, 1100),
                          span("autograd::engine::evaluate_function: A", 100, 200),
                          span("torch::autograd::AccumulateGrad", 190, 200, **grad),
                          span("autograd::engine::evaluate_function: A", 500, 700),
                          span("torch::autograd::AccumulateGrad", 690, 700, **grad)],
               {"config": {"grad_accum": 2, "variant": "simple_ddp_ga"}, "status": "complete"})
    result = ddpprof_cli("simulate", str(run), "--latency-us", "10", "--bandwidth-gbps", "1",
                         "--world-size", "2", "--json", str(tmp_path / "s.json"))
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    own = next(r for r in rows if r["recorded"])
    # the step's 1000 µs of compute (no optimizer span: what follows backward is post), and
    # the one 40-byte all-reduce (10 µs + 40 B at 1 GB/s) blocking after backward
    assert own["variant"] == "simple_ddp_ga"
    assert own["step_ms"] == pytest.approx((1000 + 10 + 0.04) / 1e3)


def test_single_size_collectives_take_the_calibration(hook_trace, tmp_path, ddpprof_cli):
    # the run's two all-reduces differ in size, but a calibration beside it wins
    _calibration(tmp_path / "calibration.json")
    result = ddpprof_cli("simulate", str(tmp_path), "--world-size", "2", "--json", "-")
    assert result.returncode == 0, result.stderr
    cost = json.loads(result.stdout)["cost"]
    # the calibration's α = 10 µs and β = 1 GB/s, not a fit over the run's two sizes
    assert (cost["alpha_us"], cost["beta_gbps"]) == (10.0, 1.0)
    assert cost["source"] == f"calibration {tmp_path / 'calibration.json'}"


@pytest.mark.slow
def test_every_variants_run_simulates_with_no_flags(all_variants, tmp_path, ddpprof_cli):
    out, recorded = all_variants
    assert recorded.returncode == 0, recorded.stderr
    runs = tmp_path / "runs"
    shutil.copytree(out, runs, ignore=shutil.ignore_patterns("*.json", ".*"), dirs_exist_ok=True)
    for variant in [p.name for p in out.iterdir() if p.is_dir()]:
        shutil.copy(out / variant / "run.json", runs / variant / "run.json")
    # single has no collectives to fit and no calibration beside it: it measures one
    single = ddpprof_cli("simulate", str(runs / "single"), "--world-size", "1,2",
                         "--bucket-cap-mib", "1,25", "--json", str(tmp_path / "single.json"),
                         "--html-out", str(tmp_path / "single.html"))
    assert single.returncode == 0, single.stderr
    assert "measuring all-reduce on this machine (gloo, 2 ranks" in single.stderr
    assert (runs / "single" / "calibration.json").is_file()
    document = json.loads((tmp_path / "single.json").read_text())
    assert document["schema"] == "ddpprof.simulate" and document["version"] == 4
    assert [(r["variant"], r["world_size"], r["bucket_cap_mib"]) for r in document["rows"]] == [
        ("single", 1, None), ("bucket_ddp_async", 2, 1.0), ("bucket_ddp_async", 2, 25.0)]
    assert 'data-figures="1"' in (tmp_path / "single.html").read_text()
    # beside the runs now: every other run finds it there (two sizes of a 2-step run on a
    # busy machine may not fit a bandwidth, and the test must not depend on that)
    shutil.copy(runs / "single" / "calibration.json", runs / "calibration.json")
    for variant in sorted(p.name for p in runs.iterdir() if p.is_dir() and p.name != "single"):
        simulation = simulate_run(runs / variant, [1.0, 25.0], [2], allow_sweep=False)
        own = simulation.own
        assert own is not None and own.variant == variant, variant
        assert own.step_ms > 0 and math.isfinite(own.step_ms), variant
        own_row = next(r for r in simulation.rows if r.recorded and r.world_size == 2)
        assert own_row.measured_step_ms == simulation.measured.step_ms > 0
        assert own_row.error_pct == pytest.approx(
            100 * (own.step_ms / simulation.measured.step_ms - 1))
        assert any(variant.split("_")[0] in note for note in simulation.notes), variant
        assert simulation.cost.source == f"calibration {runs / 'calibration.json'}"
        if variant != "fsdp":
            assert {r.bucket_cap_mib for r in simulation.rows} >= {1.0, 25.0}
    # the recorded buckets: 2 at 1 MiB, 1 at 25 MiB (5.85 MB of gradients)
    buckets = {(r.variant, r.bucket_cap_mib): r.buckets for r in simulate_run(
        runs / "pytorch_ddp", [1.0, 25.0], [2], allow_sweep=False).rows}
    assert buckets == {("pytorch_ddp", 1.0): 2, ("pytorch_ddp", 25.0): 1}


def _one_gradient_run(tmp_path, manifest=None):
    grad = {"Input Dims": [[10]], **FLOAT}
    return _run(tmp_path, [step(0, 0, 1000), step(1, 1000, 1100),
                           span("autograd::engine::evaluate_function: A", 100, 200),
                           span("torch::autograd::AccumulateGrad", 190, 200, **grad)], manifest)


SWEEP_ROW = '{"variant": "bucket_ddp_async", "bucket_cap_mib": 1, "step_ms": %s}'
MEASURED_CASES = {
    "not JSON": ("{nope", "not JSON"),
    "rows not a list": ('{"schema": "ddpprof.sweep", "rows": 3}', "rows: expected array"),
    "a step that is text": ('{"schema": "ddpprof.sweep", "rows": [%s]}' % (SWEEP_ROW % '"x"'),
                            "rows[0].step_ms: expected float"),
    "a negative step": ('{"schema": "ddpprof.sweep", "rows": [%s]}' % (SWEEP_ROW % "-1"),
                        "rows[0]: needs a positive bucket_cap_mib and step_ms"),
    "no cap": ('{"schema": "ddpprof.sweep", "rows": [{"variant": "bucket_ddp_async", '
               '"step_ms": 5}]}', "rows[0]: needs a positive bucket_cap_mib"),
    "a huge number": ('{"schema": "ddpprof.sweep", "rows": [%s]}' % (SWEEP_ROW % ("9" * 400)),
                      "rows[0]"),
    "another schema": ('{"schema": "ddpprof.analyze", "rows": []}',
                       "not a `ddpprof sweep --json` file (schema 'ddpprof.analyze')"),
}


@pytest.mark.parametrize("case", MEASURED_CASES)
def test_malformed_measured_files_are_one_line(case, tmp_path, ddpprof_cli):
    text, message = MEASURED_CASES[case]
    run = _one_gradient_run(tmp_path)
    (tmp_path / "sweep.json").write_text(text)
    result = ddpprof_cli("simulate", str(run), "--latency-us", "10", "--bandwidth-gbps", "1",
                         "--measured", str(tmp_path / "sweep.json"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_a_measured_file_that_is_a_device_is_refused_at_once(tmp_path, ddpprof_cli):
    run = _one_gradient_run(tmp_path)
    result = ddpprof_cli("simulate", str(run), "--latency-us", "10", "--bandwidth-gbps", "1",
                         "--measured", "/dev/zero", timeout=60)
    assert result.returncode == 2 and result.stderr == (
        "ddpprof: error: /dev/zero: not a regular file (a character device)\n")


def test_measured_points_and_their_error(tmp_path, ddpprof_cli):
    run = _one_gradient_run(tmp_path, {"status": "complete", "config": {
        "variant": "bucket_ddp_async", "world_size": 2, "bucket_cap_mb": 25.0}})
    (tmp_path / "sweep.json").write_text(
        '{"schema": "ddpprof.sweep", "version": 2, "rows": [%s]}' % (SWEEP_ROW % "2.5"))
    result = ddpprof_cli("simulate", str(run), "--latency-us", "10", "--bandwidth-gbps", "1",
                         "--world-size", "2", "--bucket-cap-mib", "1", "--measured",
                         str(tmp_path / "sweep.json"), "--json", str(tmp_path / "s.json"))
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    [at_1] = [r for r in rows if r["bucket_cap_mib"] == 1.0]
    # one 40-byte gradient: at any cap one all-reduce of 10 µs + 40 B at 1 GB/s, launched when
    # backward ends at 200 and waited for before the optimizer: 1000 + 10.04 µs per step
    assert at_1["buckets"] == 1 and at_1["step_ms"] == pytest.approx(1.01004)
    assert at_1["measured_step_ms"] == 2.5
    assert at_1["error_pct"] == pytest.approx(100 * (1.01004 - 2.5) / 2.5)
    assert "measured points: median |error| 59.6%" in result.stdout


def test_a_sweep_that_finds_no_fit_is_one_line(tmp_path, monkeypatch, capsys):
    """No calibration, collectives too few to fit, and the all-reduce sweep simulate runs
    itself finds no fit (time not growing with size on a busy machine)."""
    import ddpprof.calibrate
    from ddpprof.cli import main

    run = _one_gradient_run(tmp_path, {"status": "complete", "config": {
        "variant": "bucket_ddp_async", "world_size": 2, "backend": "gloo"}})
    monkeypatch.setattr(ddpprof.calibrate, "calibrate", lambda sweep, out, quiet=False:
                        Calibration(status="complete", error="no fit: time does not grow "
                                                             "with size"))
    with pytest.raises(SystemExit) as exit:
        main(["simulate", str(run), "--world-size", "2"])
    assert exit.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error == (f"ddpprof: error: calibration {run / 'calibration.json'} (measured now): "
                     "no cost model (no fit: time does not grow with size); give "
                     "--bandwidth-gbps with --latency-us, or --calibration FILE")


def test_the_registry_says_how_each_variant_is_replayed():
    """The variant registry is the one place that knows a variant's properties: they agree
    with one another for every variant (a new one included)."""
    for info in VARIANTS.values():
        assert info.bucketed == (info.replay in ("bucketed", "sharded")), info.name
        assert info.blocking == (info.replay == "blocking"), info.name
        if info.replay == "sharded":
            assert info.sharded and info.gradient_collective == "reduce_scatter", info.name
        if not info.distributed:
            assert info.replay == "recorded" and not info.bucketed, info.name
        # simulate refuses exactly the variants over several process groups
        assert (info.replay == "none") == info.tensor_parallel, info.name
    # bench's communication time is the sync's for exactly the blocking ones
    from ddpprof.bench import rows

    configs = [("m", name, 2) for name in ("simple_ddp", "bucket_ddp_async")]
    table = rows(configs, {c: [(0.1, 0.02)] for c in configs}, {}, 64)
    assert [row.comm_ms for row in table] == [pytest.approx(20.0), None]
