"""``ddpprof simulate``: the cost fit, the bucketing, where the cost model and the overlap tax
come from, and the command's replays of a synthetic two-rank run worked out by hand
(``test_replay``); then the recorded run of every variant replayed."""

from __future__ import annotations

import json
import shutil
import statistics

import msgspec
import numpy as np
import pytest
import trace_builders as tb
from trace_builders import span, step, write_trace

from ddpprof.analysis import AnalysisOptions, analyze_run
from ddpprof.core.errors import UsageError
from ddpprof.graph.build import join_steps
from ddpprof.graph.contended import Tax
from ddpprof.graph.path import replay, step_length_us
from ddpprof.graph.whatif import replay_edited
from ddpprof.metrics.cost import CostModel, FitError, fit_cost, measured_curve, traffic_bytes
from ddpprof.metrics.tax import OverlapTax, TaxRow
from ddpprof.run.config import RunConfig
from ddpprof.run.discover import discover
from ddpprof.run.manifest import BucketRecord, RunManifest, RunMeasurements
from ddpprof.simulate.calibrate import Calibration, Fit, TaxCalibration
from ddpprof.simulate.run import cores_shared, simulate_run
from ddpprof.simulate.steps import registration_positions
from ddpprof.variants import VARIANTS
from ddpprof.variants.bucketing import assign_buckets

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
    """metrics/ raises its own error, not the CLI's: the caller decides what it means (the
    CLI's one line for calibrate's sweep, a fallback for the others)."""
    with pytest.raises(FitError, match="single size") as raised:
        fit_cost(np.array([4e6, 4e6]), np.array([10.0, 11.0]), "test")
    assert not isinstance(raised.value, UsageError)


def test_a_measured_curve_is_followed_where_it_reaches():
    """Points (1000 B, 100 µs) and (4000 B, 400 µs) on 2 ranks (traffic = size): halfway in
    log size, 2000 B, the power law through them gives 200 µs; below the first point its time;
    beyond the last, 400 µs plus the extra 4000 B at β = 10 B/µs: 800 µs."""
    model = CostModel(5.0, 10.0, None, 2, "test", ((1000.0, 100.0), (4000.0, 400.0)))
    assert model.time_us(2000, 2) == pytest.approx(200.0)
    assert model.time_us(10, 2) == 100.0
    assert model.time_us(8000, 2) == pytest.approx(800.0)
    assert model.time_us(8000, 1) == 0.0
    assert CostModel(5.0, 10.0, None, 2).time_us(8000, 2) == 5.0 + 800.0   # no curve: the line


def test_a_measured_curve_never_falls_with_size():
    """Medians 5, 9, 7 µs at 1, 2, 3 B: the 9 is noise (3 B took 7): each point takes the least
    time measured at its size or more, 5, 7, 7."""
    assert measured_curve([3.0, 1.0, 2.0], [7.0, 5.0, 9.0]) == ((1.0, 5.0), (2.0, 7.0),
                                                                (3.0, 7.0))
    assert measured_curve([1.0], [5.0]) == ()


def test_buckets_close_at_the_cap():
    # registration order; taken in reverse: [1, 1, 5] reaches 6, [3, 3] too
    assert assign_buckets([3, 3, 5, 1, 1], cap_bytes=6) == [[4, 3, 2], [1, 0]]
    # in the order given, one dtype per bucket: float32 [3, 5] reaches 6, [1] is left over;
    # bfloat16 [3, 1] stays open
    groups = ["float32", "bfloat16", "float32", "bfloat16", "float32"]
    assert assign_buckets([3, 3, 5, 1, 1], 6, groups, order=range(5)) == [[0, 2], [1, 3],
                                                                          [4]]


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


def bucketed_run(tmp_path, cap_mib: float = 0.05, name: str = "run"):
    """``trace_builders.two_buckets`` as a recorded bucket_ddp_async run at ``cap_mib``."""
    folder = tmp_path / name
    tb.two_buckets(folder)
    (folder / "run.json").write_text(json.dumps({"status": "complete", "config": {
        "variant": "bucket_ddp_async", "world_size": 2, "nproc": 2, "backend": "gloo",
        "bucket_cap_mb": cap_mib}}))
    return folder


#: α = 0 and 1 GB/s: a 100,000-byte all-reduce on 2 ranks takes 100 µs, as recorded
GIVEN_COST = ["--latency-us", "0", "--bandwidth-gbps", "1"]


def test_every_edit_through_the_command(tmp_path, ddpprof_cli):
    """The replays of ``test_replay.test_each_edit_by_hand``, as ``simulate`` prints them
    (no profiler overhead recorded: none divided out)."""
    run = bucketed_run(tmp_path)
    result = ddpprof_cli("simulate", str(run), *GIVEN_COST, "--bucket-cap-mib", "1",
                         "--world-size", "2,4", "--json", str(tmp_path / "s.json"))
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "s.json").read_text())
    assert (document["schema"], document["version"]) == ("ddpprof.simulate", 5)
    rows = {(r["world_size"], r["bucket_cap_mib"]): r for r in document["rows"]}
    # as recorded (two buckets at its 0.05 MiB); one bucket at 1 MiB; at 4 ranks
    assert rows[(2, 0.05)]["step_ms"] == pytest.approx(1.0)
    assert (rows[(2, 1.0)]["step_ms"], rows[(2, 1.0)]["buckets"]) == (pytest.approx(1.09), 1)
    assert rows[(4, 0.05)]["step_ms"] == pytest.approx(0.75)
    assert document["cost_level"] == pytest.approx(1.0)
    assert "world size 2: best predicted bucket 0.05 MiB" in result.stdout
    # an edit applies to every row, and the run's own is no longer compared with its
    # measurement
    faster = ddpprof_cli("simulate", str(run), *GIVEN_COST, "--world-size", "2",
                         "--bucket-cap-mib", "1", "--faster", "gemm=50", "--json", "-")
    assert faster.returncode == 0, faster.stderr
    document = json.loads(faster.stdout)
    assert document["edits"] == ["gemm 50% faster"]
    own = next(r for r in document["rows"] if r["recorded"])
    assert own["step_ms"] == pytest.approx(0.70) and own["measured_step_ms"] is None


def test_a_variant_without_buckets_gets_world_sizes_only(tmp_path, ddpprof_cli):
    run = bucketed_run(tmp_path)
    manifest = json.loads((run / "run.json").read_text())
    manifest["config"]["variant"] = "simple_ddp_async"
    (run / "run.json").write_text(json.dumps(manifest))
    result = ddpprof_cli("simulate", str(run), *GIVEN_COST, "--world-size", "2,4",
                         "--json", "-")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [(r["world_size"], r["bucket_cap_mib"]) for r in document["rows"]] == [
        (2, None), (4, None)]
    assert any("no cap applies; world sizes only" in note for note in document["notes"])


def _run(tmp_path, events, manifest=None, name="run"):
    folder = tmp_path / name
    write_trace(folder / "rank0.json", events)
    if manifest is not None:
        (folder / "run.json").write_text(json.dumps(manifest))
    return folder


def _calibration(path, status="complete", backend="gloo", tax=None):
    calibration = Calibration(status=status, backend=backend, world_size=2,
                              fit=Fit(alpha_us=10.0, beta_busbw_gbps=1.0, r2=None),
                              overlap_tax=tax)
    path.write_bytes(msgspec.json.encode(calibration))
    return path


def test_a_calibration_beside_the_run_is_used(tmp_path):
    runs = tmp_path / "runs"
    run = bucketed_run(runs)
    _calibration(runs / "calibration.json")
    simulation = simulate_run(run, [1.0], [2])
    assert simulation.cost.source == f"calibration {runs / 'calibration.json'}"
    assert (simulation.cost.alpha_us, simulation.cost.beta_bytes_per_us) == (10.0, 1000.0)
    # the run's transfers (100 µs each) over the model's (10 + 100): its cost level
    assert simulation.cost_level == pytest.approx(100 / 110)
    assert simulation.tax_source == "measured on the run"
    # a calibration that carries an overlap tax gives it to every run it calibrates
    tax = OverlapTax([TaxRow("compute", "all", "all", 30.0, 10.0, 50.0, 3, 5, 5),
                      TaxRow("communication", "all", "all", 100.0, -20.0, 200.0, 1, 4, 4)])
    _calibration(runs / "calibration.json", tax=TaxCalibration(run="elsewhere", tax=tax))
    simulation = simulate_run(run, [1.0], [2])
    assert simulation.tax_source == "from the calibration (measured on elsewhere)"
    # the communication tax's interval holds 0: not told apart from none
    assert (simulation.tax.compute, simulation.tax.communication) == (
        {"gemm": 0.3, "other": 0.3}, 0.0)
    # one of another backend is passed over, and said so; the run's own collectives are of
    # one size: no cost model, the run's own configuration still replayed
    _calibration(runs / "calibration.json", backend="nccl")
    simulation = simulate_run(run, [1.0], [2])
    assert simulation.cost.source.startswith("none: no cost model: the collectives have a "
                                             "single size")
    assert (f"the calibration beside the run is passed over: {runs / 'calibration.json'} "
            "(measured with nccl, the run used gloo)") in simulation.cost.source


def _host(devices: list[str], nnodes: int = 1, host_cores: int | None = 2) -> RunManifest:
    return RunManifest(config=RunConfig(variant="pytorch_ddp", nproc=2, nnodes=nnodes),
                       measured=RunMeasurements(devices=devices, threads_per_rank=1,
                                                host_cores=host_cores))


@pytest.mark.parametrize(("manifest", "asked", "cores", "note"), [
    # CPU ranks on one host share its cores, unless told otherwise
    (_host(["cpu (x86_64, 1 threads)"] * 2), None, 2, "ran as CPU processes on one host"),
    (_host(["cpu (x86_64, 1 threads)"] * 2), 0, None, "each rank brings its own device"),
    (_host(["cpu (x86_64, 1 threads)"] * 2), 6, 6, "every rank shares 6 cores"),
    # GPU ranks bring their own devices; ranks on several hosts do not share one's cores; a
    # run.json that does not say how many cores the host had (recorded before it did)
    (_host(["cuda:0 (NVIDIA H100)"] * 2), None, None, "--shared-cores C for ranks sharing"),
    (_host(["cpu (x86_64, 1 threads)"] * 2, nnodes=2), None, None, "brings its own"),
    (_host(["cpu (x86_64, 1 threads)"] * 2, host_cores=None), None, None, "brings its own"),
])
def test_the_cores_the_ranks_share(manifest, asked, cores, note):
    notes: list[str] = []
    assert cores_shared(manifest, asked, 1, notes) == cores
    assert len(notes) == 1 and note in notes[0]


@pytest.mark.parametrize(("args", "message"), [
    (["--bucket-cap-mib", "0"], "'0' is not > 0"),
    (["--bucket-cap-mb", "0"], "'0' is not > 0"),   # the old spelling still works
    (["--latency-us", "5"], "go together"),
    (["--calibration", "c.json", "--latency-us", "1", "--bandwidth-gbps", "1"], "not both"),
    (["--calibration", "missing.json"], "missing.json: no such file"),
    (["--shared-cores", "-1"], "'--shared-cores': -1 is not in the range 0<=x<="),
    (["--faster", "tensor=20"], "the class is one of gemm, compute"),
    (["--faster-network", "100"], "the percentage must be in [0, 100)"),
    (["--rank-delay", "x=5"], "RANK must be a rank number"),
])
def test_bad_input(args, message, tmp_path, ddpprof_cli):
    run = _run(tmp_path, [step(0, 0, 10), span("aten::mm", 1, 2)])
    result = ddpprof_cli("simulate", str(run), *args, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_tax_that_cannot_be_measured_is_refused_before_the_sweep(tmp_path, ddpprof_cli):
    """``calibrate --tax-from``: a run with no trace, or none with an op seen both alone and
    overlapped, is one line and exit 2, before any rank starts."""
    pytest.importorskip("torch")
    run = _run(tmp_path, [step(0, 0, 10), span("aten::mm", 1, 2)])
    empty = tmp_path / "empty"
    empty.mkdir()
    for source, message in ((run, "no overlap tax can be measured there"),
                            (empty, "no trace files")):
        result = ddpprof_cli("calibrate", "--tax-from", str(source), "--out",
                             str(tmp_path / "cal"), "--quiet")
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not (tmp_path / "cal" / "calibration.json").exists()


def test_an_unfinished_calibration_is_refused(tmp_path, ddpprof_cli):
    run = bucketed_run(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    calibration = _calibration(tmp_path / "elsewhere" / "c.json", status="failed")
    result = ddpprof_cli("simulate", str(run), "--calibration", str(calibration))
    assert result.returncode == 2 and "the sweep is failed" in result.stderr


def test_a_run_without_a_trace(tmp_path, ddpprof_cli):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    result = ddpprof_cli("simulate", str(tmp_path / "run"))
    assert result.returncode == 2 and "no trace files" in result.stderr


def test_a_run_with_gradient_accumulation_is_replayed_as_recorded(tmp_path, ddpprof_cli):
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
    [own] = json.loads((tmp_path / "s.json").read_text())["rows"]
    assert (own["variant"], own["step_ms"]) == ("simple_ddp_ga", pytest.approx(1.0))


def test_single_size_collectives_take_the_calibration(tmp_path, ddpprof_cli):
    # the run's two all-reduces are of one size, so no fit: the calibration beside it
    run = bucketed_run(tmp_path)
    _calibration(tmp_path / "calibration.json")
    result = ddpprof_cli("simulate", str(run), "--world-size", "2", "--json", "-")
    assert result.returncode == 0, result.stderr
    cost = json.loads(result.stdout)["cost"]
    assert (cost["alpha_us"], cost["beta_gbps"]) == (10.0, 1.0)
    assert cost["source"] == f"calibration {tmp_path / 'calibration.json'}"


@pytest.mark.slow
def test_every_variants_run_replays_its_recorded_steps(all_variants, tmp_path, ddpprof_cli):
    """The recorded run of every variant (2 gloo ranks, mlp-small, 1 MiB buckets): each
    analyzed step's unedited replay, under the run's own overlap tax, is the recorded step
    (the home rank's ProfilerStep), the run's own prediction their median over the
    profiler's overhead, and its overlap analyze's; a bucketed variant is re-bucketed at other
    caps."""
    out, recorded = all_variants
    assert recorded.returncode == 0, recorded.stderr
    runs = tmp_path / "runs"
    shutil.copytree(out, runs, ignore=shutil.ignore_patterns(".*"), dirs_exist_ok=True)
    for variant in sorted(p.name for p in runs.iterdir() if p.is_dir()):
        [run] = analyze_run(discover([runs / variant])[0], AnalysisOptions(step_graphs=True))
        graphs, _ = join_steps({r.rank: r.graph_steps for r in run.ranks})
        tax = Tax.measured(run.overlap_tax, [])
        steps = [step_length_us(g, replay(g)) for g in graphs]
        assert [replay_edited(g, tax).step_us for g in graphs] == pytest.approx(steps,
                                                                              abs=1e-3)
        simulation = simulate_run(runs / variant, [1.0, 25.0], [2], 1.0, 300.0)
        assert simulation.own.step_ms == pytest.approx(
            statistics.median(steps) / simulation.overhead_ratio / 1e3), variant
        # its overlap is analyze's over the same window (every analyzed step replayed)
        if simulation.measured.overlap_pct is not None:
            assert simulation.own.overlap_pct == pytest.approx(
                simulation.measured.overlap_pct, abs=1e-6), variant
        info = VARIANTS[variant]
        caps = {r.bucket_cap_mib for r in simulation.rows}
        assert caps == ({1.0, 25.0} if info.bucketed else {None}), variant
    # the recorded buckets: 2 at 1 MiB, 1 at 25 MiB (5.85 MB of gradients)
    buckets = {r.bucket_cap_mib: r.buckets for r in simulate_run(
        runs / "pytorch_ddp", [1.0, 25.0], [2], 1.0, 300.0).rows}
    assert buckets == {1.0: 2, 25.0: 1}
    page = ddpprof_cli("simulate", str(runs / "zero1"), *GIVEN_COST, "--html-out",
                       str(tmp_path / "zero1.html"))
    assert page.returncode == 0, page.stderr
    assert 'data-figures="1"' in (tmp_path / "zero1.html").read_text()


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
                        "rows[0].step_ms: expected float >= 0.0"),
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
    run = bucketed_run(tmp_path)
    (tmp_path / "sweep.json").write_text(
        '{"schema": "ddpprof.sweep", "version": 2, "rows": [%s]}' % (SWEEP_ROW % "2.5"))
    result = ddpprof_cli("simulate", str(run), *GIVEN_COST, "--world-size", "2",
                         "--bucket-cap-mib", "1", "--measured", str(tmp_path / "sweep.json"),
                         "--json", str(tmp_path / "s.json"))
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    [at_1] = [r for r in rows if r["bucket_cap_mib"] == 1.0]
    # one bucket: 1.09 ms (test_replay.test_each_edit_by_hand), against 2.5 measured
    assert at_1["buckets"] == 1 and at_1["step_ms"] == pytest.approx(1.09)
    assert at_1["measured_step_ms"] == 2.5
    assert at_1["error_pct"] == pytest.approx(100 * (1.09 - 2.5) / 2.5)
    # the recorded configuration's point is told apart ("as recorded ... measured")
    assert "measured points (1, the recorded one aside): median |error| 56.4%" in result.stdout


def test_no_cost_model_answers_the_recorded_configuration_and_runs_nothing(
        tmp_path, monkeypatch, capsys):
    """No calibration, and collectives of one size (no fit): simulate replays the recorded
    configuration and says why no other is predicted; it never starts a sweep of its own
    (which would write calibration.json beside the run)."""
    import ddpprof.simulate.calibrate
    from ddpprof.cli import main

    run = bucketed_run(tmp_path)        # its all-reduces are of one size: no fit

    def no_sweep(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulate started a calibration sweep")

    monkeypatch.setattr(ddpprof.simulate.calibrate, "calibrate", no_sweep)
    before = sorted(p.name for p in run.iterdir())
    main(["simulate", str(run), "--world-size", "2"])    # returns: exit 0
    out = capsys.readouterr().out
    assert "as recorded" in out
    assert ("other world sizes and bucket caps: not predicted: no cost model: the collectives "
            "have a single size") in " ".join(out.split())
    assert sorted(p.name for p in run.iterdir()) == before


def test_the_registry_says_how_each_variant_syncs():
    """The variant registry is the one place that knows a variant's properties: they agree
    with one another for every variant (a new one included)."""
    for info in VARIANTS.values():
        assert info.bucketed == (info.gradient_sync in ("buckets", "sharded_buckets")), \
            info.name
        assert info.blocking == (info.gradient_sync == "blocking"), info.name
        if info.gradient_sync == "sharded_buckets":
            assert info.sharded and info.gradient_collective == "reduce_scatter", info.name
        assert info.distributed == (info.gradient_sync != "none"), info.name
    # bench's communication time is the sync's for exactly the blocking ones
    from ddpprof.bench.scaling import rows

    configs = [("m", name, 2) for name in ("simple_ddp", "bucket_ddp_async")]
    table = rows(configs, {c: [(0.1, 0.02)] for c in configs}, {}, 64)
    assert [row.comm_ms for row in table] == [pytest.approx(20.0), None]
