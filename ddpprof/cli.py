"""The ``ddpprof`` command: argument parsing and exit codes only; the work lives in the packages."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from . import __version__, options
from .atomic import check_outputs, is_stdout, json_text, refuse_inputs, write_text
from .errors import Interrupted, RunFailed, UsageError, describe_os_error
from .record.config import option_fields
from .report import table

RECORD_COLUMNS = ["run", "variant", "status", "ranks", "grad_accum", "step_ms", "samples_per_s",
                  "allreduces_per_step", "folder"]


def _html_option(default_file: str):
    return click.option("--html", "html_file", is_flag=False, flag_value="", default=None,
                        metavar="[FILE]",
                        help=f"Write the self-contained HTML page [default FILE: {default_file}].")


_QUIET_OPTION = click.option("--quiet", is_flag=True,
                             help="No progress display (also under CI=true).")
_MARKDOWN_OPTION = click.option("--markdown", is_flag=True, help="Print the table as Markdown.")
_CSV_OPTION = click.option("--csv", "csv_file", type=click.Path(path_type=Path),
                           help="Write the table as CSV (- for standard output).")
_JSON_OPTION = click.option("--json", "json_file", type=click.Path(path_type=Path),
                            help="Write the table as JSON (- for standard output).")


@click.group()
@click.version_option(__version__, prog_name="ddpprof")
def cli() -> None:
    """Record PyTorch data-parallel training under torch.profiler and measure its overlap."""


@cli.command()
@click.option("--variant", "variant_spec", default="bucket_ddp_async", show_default=True,
              help="A variant, a comma-separated list, or 'all'.")
@options.config_options(option_fields())
@click.option("--out", type=click.Path(path_type=Path), default=Path("traces"), show_default=True,
              help="The folder the run folders go in.")
@click.option("--name", type=options.RUN_NAME,
              help="Run folder name [default: the variant]; with several variants, the folder "
                   "that holds one per variant.")
@_QUIET_OPTION
@_JSON_OPTION
@_CSV_OPTION
@_MARKDOWN_OPTION
def record(variant_spec: str, out: Path, name: str | None, quiet: bool, json_file: Path | None,
           csv_file: Path | None, markdown: bool, **fields) -> None:
    """Record training runs through torchrun: one Chrome trace per rank and a run.json each."""
    from .record.config import RunConfig
    from .record.launcher import Recording, parse_variants, summary_rows
    from .record.launcher import record as record_runs

    check_outputs(json=json_file, csv=csv_file)
    recording = Recording(parse_variants(variant_spec), RunConfig(**fields), out, name, quiet)
    refuse_inputs({"--json": json_file, "--csv": csv_file},
                  folders=[*recording.targets(), *map(recording.run_dir, recording.variants)])
    outcomes = record_runs(recording)
    rows = summary_rows(outcomes)
    _echo_table(table.to_markdown(rows, RECORD_COLUMNS) if markdown
                else table.to_text(rows, RECORD_COLUMNS), json_file, csv_file)
    _write_outputs(rows, RECORD_COLUMNS, "ddpprof.record", json_file, csv_file, ran=True)
    failed = [o for o in outcomes if o.status != "complete"]
    if failed:
        details = "; ".join(
            f"{o.variant} ({o.error}; log: {o.run_dir / (o.manifest.error.log or '')})"
            if o.manifest.error else f"{o.variant} ({o.error})" for o in failed)
        raise RunFailed(f"{len(failed)} of {len(outcomes)} runs failed: {details}")


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "json_file", type=click.Path(path_type=Path),
              help="Write every metric, per run and per rank (the gate's input).")
@click.option("--csv", "csv_file", type=click.Path(path_type=Path),
              help="Write the per-run table, all columns, as CSV.")
@_MARKDOWN_OPTION
@click.option("--per-step", is_flag=True, help="Also break each ProfilerStep down.")
@click.option("--hta-compat", is_flag=True,
              help="Reproduce HTA 0.5.0's defaults: timestamps rounded inward to whole µs, "
                   "only NCCL kernels as communication.")
@click.option("--comm-kernel", "comm_kernels", multiple=True, metavar="REGEX",
              help="Also count kernels whose name matches REGEX as communication. Repeatable.")
@click.option("--engine", type=click.Choice(["native", "hta"]), default="native",
              show_default=True, help="hta: HolisticTraceAnalysis computes the GPU shares.")
@click.option("--keep-last-step", is_flag=True,
              help="Analyze the last ProfilerStep too (HTA drops it by default).")
@click.option("--jobs", type=options.POSITIVE_INT, help="Ranks analyzed in parallel.")
@click.option("--scheduler", envvar="DDPPROF_SCHEDULER", metavar="ADDRESS",
              help="Analyze the ranks on this Dask cluster (tcp://host:8786) [env: "
                   "DDPPROF_SCHEDULER]; the workers read the traces.")
@_QUIET_OPTION
@_html_option("reports/<name>.html")
def analyze(paths: tuple[str, ...], json_file: Path | None, csv_file: Path | None,
            markdown: bool, per_step: bool, hta_compat: bool, comm_kernels: tuple[str, ...],
            engine: str, keep_last_step: bool, jobs: int | None, scheduler: str | None,
            quiet: bool, html_file: str | None) -> None:
    """Compute, non-compute, idle and overlap shares and collective statistics of traces.

    PATH is a run folder (rank traces and an optional run.json), a folder of run folders, or
    trace files (.json or .json.gz), on disk or at a URL (s3://, gs://, az://, http(s)://).
    """
    from .analysis import AnalysisOptions, analyze_paths, run_row, to_json_document
    from .findings import findings
    from .progress import quiet_by_environment
    from .report import console
    from .simulate import cap_advice_for_runs
    from .trace.classify import validate_comm_patterns
    from .trace.storage import location_of, report_name

    title = report_name(location_of(paths[0])) if len(paths) == 1 else "report"
    html_target = _html_target(html_file, title)
    check_outputs(json=json_file, csv=csv_file, html=html_target)
    options = AnalysisOptions(
        keep_last_step=keep_last_step, per_step=per_step, timeline=html_file is not None,
        hta_compat=hta_compat, comm_kernels=tuple(validate_comm_patterns(comm_kernels)),
        engine=engine, jobs=jobs, scheduler=scheduler or None)
    show_progress = not (quiet or quiet_by_environment()) and sys.stderr.isatty()
    current = {"label": ""}

    def on_run(index: int, total: int, run) -> None:
        current["label"] = f"[{index + 1}/{total}] analyzing {run.name}"
        if show_progress:
            click.echo(f"\r\033[K{current['label']} ({len(run.traces)} trace"
                       f"{'s' * (len(run.traces) != 1)})", err=True, nl=False)

    def on_rank(done: int, total: int) -> None:
        if show_progress:
            click.echo(f"\r\033[K{current['label']}: {done}/{total} ranks", err=True, nl=False)

    analysis = analyze_paths([location_of(p) for p in paths], options, on_run=on_run,
                             on_rank=on_rank)
    if show_progress:
        click.echo("\r\033[K", err=True, nl=False)
    refuse_inputs({"--json": json_file, "--csv": csv_file, "--html": html_target},
                  files=[*(r.path for run in analysis.runs for r in run.ranks),
                         *(Path(run.folder) / "run.json" for run in analysis.runs)],
                  what="a trace being analyzed")
    advice = findings(analysis.runs, cap_advice_for_runs(analysis.runs))
    to_stdout = any(is_stdout(o) for o in (json_file, csv_file))
    click.echo(console.analysis_text(analysis, advice, markdown, per_step), nl=False,
               err=to_stdout)
    for line in console.note_lines(analysis):
        click.echo(line, err=True)
    if json_file:
        _write_text(json_file, json_text(to_json_document(analysis, advice)))
    if csv_file:
        rows = [run_row(run).to_dict() for run in analysis.runs]
        _write_text(csv_file, table.to_csv(rows, list(rows[0]) if rows
                                           else console.ANALYZE_COLUMNS))
    if html_target is not None and analysis.runs:
        from .report.html import render_report

        _write_text(html_target, render_report(analysis, f"ddpprof: {title}", advice))
        click.echo(f"report: {html_target}", err=True)
    if analysis.errors or (analysis.unfinished and not analysis.runs):
        for error in analysis.errors:
            click.echo(f"ddpprof: error: {error.error}", err=True)
        if not analysis.errors:
            click.echo("ddpprof: error: no run finished recording", err=True)
        sys.exit(2)


GATE_COLUMNS = ["rule", "run", "baseline", "current", "threshold", "verdict"]
GATE_REPEAT_COLUMNS = ["baseline_repeats", "current_repeats"]


@cli.command()
@click.argument("current", type=click.Path(path_type=Path))
@click.option("--baseline", "baseline_file", required=True, type=click.Path(path_type=Path),
              help="An `ddpprof analyze --json` file.")
@click.option("--rule", "rules", multiple=True,
              help="METRIC OP RHS, e.g. 'overlap_pct >= baseline - 2' or 'compute_pct >= 60'. "
                   "Repeatable. [default: overlap_pct >= baseline - 2]")
@click.option("--tolerance", default=0.0, show_default=True, type=options.NON_NEGATIVE_FLOAT,
              help="Slack, in each metric's units, before a rule counts as broken.")
@click.option("--aggregate", type=click.Choice(["none", "median"]), default="none",
              show_default=True,
              help="median: the repeats of each variant and configuration become their median.")
@click.option("--markdown", "markdown_file", type=click.Path(path_type=Path),
              help="Also write the verdicts as Markdown, for a PR comment (- for standard "
                   "output).")
def gate(current: Path, baseline_file: Path, rules: tuple[str, ...], tolerance: float,
         aggregate: str, markdown_file: Path | None) -> None:
    """Fail (exit 1) when a metric of CURRENT breaks a rule against the baseline.

    CURRENT is a trace folder (analyzed now) or an `ddpprof analyze --json` file.
    Exit 0: every rule holds; 1: a regression; 2: bad input.
    """
    from . import gate as gating

    check_outputs(markdown=markdown_file)
    refuse_inputs({"--markdown": markdown_file}, files=[current, baseline_file],
                  what="an input of the gate")
    parsed = [gating.parse_rule(text) for text in rules or (gating.DEFAULT_RULE,)]
    now = gating.load_runs(current)
    before = gating.load_runs(baseline_file, must_be_json=True)
    if aggregate == "median":
        now, before = gating.aggregate(now), gating.aggregate(before)
    verdicts = gating.evaluate(parsed, now, before, tolerance)
    columns = GATE_COLUMNS + (GATE_REPEAT_COLUMNS if aggregate == "median" else [])
    rows = [v.row() for v in verdicts]
    failed = [v for v in verdicts if v.verdict == "FAIL"]
    summary = (f"{len(failed)} of {len(verdicts)} checks failed" if failed
               else f"all {len(verdicts)} checks passed")
    if markdown_file:  # written before the verdict is printed, so a failure cannot follow it
        _write_text(markdown_file, "### ddpprof gate\n\n" + table.to_markdown(rows, columns)
                    + f"\n**{summary}**\n")
    _echo_table(table.to_text(rows, columns) + summary + "\n", markdown_file)
    if failed:
        sys.exit(1)


BENCH_COLUMNS = ["model", "variant", "nproc", "step_ms_min", "step_ms_median", "epoch_s",
                 "comm_ms", "samples_per_s", "speedup", "efficiency", "amdahl_f",
                 "amdahl_ceiling", "profiler_overhead"]


@cli.command()
@click.option("--models", default="mlp-small,mlp-medium,mlp-large,mlp-xlarge", show_default=True)
@click.option("--variants", "variant_spec",
              default="single,simple_ddp,simple_ddp_async,pytorch_ddp", show_default=True)
@click.option("--nproc", "nprocs", default="1,2", show_default=True,
              type=options.POSITIVE_INT_LIST, help="Process counts, comma-separated.")
@click.option("--repeats", default=3, show_default=True, type=options.POSITIVE_INT)
@options.config_options(option_fields(), only=("steps", "global_batch", "backend"))
@click.option("--warmup-steps", default=2, show_default=True, type=options.NON_NEGATIVE_INT,
              help="Steps left out of every timing.")
@click.option("--overhead/--no-overhead", default=True, show_default=True,
              help="One profiled run per configuration, for the profiler's overhead.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("bench"), show_default=True)
@click.option("--json", "json_file", type=click.Path(path_type=Path),
              help="[default: <out>/bench.json] (- for standard output)")
@_CSV_OPTION
@_MARKDOWN_OPTION
@_html_option("reports/bench.html")
@_QUIET_OPTION
def bench(models: str, variant_spec: str, nprocs: list[int], repeats: int, steps: int,
          global_batch: int, backend: str, warmup_steps: int, overhead: bool, out: Path,
          json_file: Path | None, csv_file: Path | None, markdown: bool,
          html_file: str | None, quiet: bool) -> None:
    """Seed 000's scaling benchmark: step and epoch time, communication time of the blocking
    variants, throughput, speedup, scaling efficiency and Amdahl's parallel fraction."""
    from . import bench as benching
    from .record.config import RunConfig
    from .record.launcher import Recording, parse_variants, validate

    model_list = [m.strip() for m in models.split(",") if m.strip()]
    variants = parse_variants(variant_spec)
    json_file = json_file or out / "bench.json"
    html_target = _html_target(html_file, "bench")
    check_outputs(json=json_file, csv=csv_file, html=html_target)
    refuse_inputs({"--json": json_file, "--csv": csv_file, "--html": html_target},
                  runs_under=[out])
    base = Recording(variants, RunConfig(model=model_list[0], nproc=max(nprocs), steps=steps,
                                         global_batch=global_batch, backend=backend,
                                         profile=False), out=out, quiet=quiet)
    for model in model_list:  # every configuration is checked before the first run
        validate(Recording(variants, base.config.replace(model=model), out=out))
    rows = benching.bench(model_list, variants, nprocs, base, repeats, warmup_steps, overhead)
    render = table.to_markdown if markdown else table.to_text
    _echo_table(render(rows, BENCH_COLUMNS), json_file, csv_file)
    _write_outputs(rows, BENCH_COLUMNS, "ddpprof.bench", json_file, csv_file, ran=True)
    if html_target is not None:
        from .report.html import render_page, speedup_figure, throughput_figure

        intro = [f"{repeats} interleaved repeats, unprofiled, the first {warmup_steps} steps of "
                 f"each run left out; global batch {global_batch}. Step time is the median "
                 "over steps, then the min and median over repeats."]
        _write_text(html_target, render_page("ddpprof bench", intro,
                                             [(c, c) for c in BENCH_COLUMNS], rows,
                                             [speedup_figure(rows), throughput_figure(rows)]),
                    failure=RunFailed)
        click.echo(f"report: {html_target}", err=True)


@cli.command()
@click.argument("run_paths", metavar="[RUN]...", nargs=-1, type=click.Path(path_type=Path))
@click.option("--model", help="A model ddpprof knows (its parameters counted from its definition).")
@click.option("--model-path", type=click.Path(path_type=Path),
              help="A local Hugging Face checkpoint folder (parameters counted on the meta "
                   "device).")
@click.option("--world-size", type=click.IntRange(min=1), help="Ranks N.")
@click.option("--precision", type=click.Choice(["fp32", "bf16-mixed"]),
              help="[default: both]")
@click.option("--optimizer", type=click.Choice(["adamw", "sgd-momentum", "sgd"]),
              help="sgd: no momentum buffer. [default: all three]")
@_JSON_OPTION
@_MARKDOWN_OPTION
def memory(run_paths: tuple[Path, ...], model: str | None, model_path: Path | None,
           world_size: int | None, precision: str | None, optimizer: str | None,
           json_file: Path | None, markdown: bool) -> None:
    """Bytes per rank for DDP and ZeRO stages 1-3 (parameters, gradients, optimizer state) and
    communication per step, for --model or --model-path at --world-size; or, for recorded RUN
    folders, each rank's measured steady state beside the estimate."""
    from . import memory as estimator

    render = table.to_markdown if markdown else table.to_text
    if run_paths:
        if model or model_path or world_size or precision or optimizer:
            raise UsageError("give RUN folders, or --model/--model-path with --world-size; "
                             "a run's model, world size, precision and optimizer are its own")
        found = estimator.find_runs(list(run_paths))
        refuse_inputs({"--json": json_file}, files=[path / "run.json" for path in found],
                      what="a run's manifest")
        runs = [estimator.compare_run(path) for path in found]
        rows, columns = estimator.comparison_rows(runs)
        click.echo(render(rows, columns), nl=False)
        worst = max(runs, key=lambda run: max(abs(r.error_pct) for r in run.ranks))
        click.echo(f"largest |error|: {max(abs(r.error_pct) for r in worst.ranks):.2f}% "
                   f"({worst.run}); estimate: {estimator.RECORDED_PRECISION} "
                   f"{estimator.RECORDED_OPTIMIZER}, as ddpprof record trains", err=True)
        if json_file:
            _write_text(json_file, json_text(estimator.comparison_document(runs)))
        return
    if not (model or model_path) or world_size is None:
        raise UsageError("give --model NAME (or --model-path DIR) and --world-size N, "
                         "or recorded RUN folders")
    label, parameters = estimator.model_parameters(model, model_path)
    estimates = estimator.estimate_table(
        parameters, world_size, (precision,) if precision else estimator.PRECISIONS,
        (optimizer,) if optimizer else estimator.OPTIMIZERS)
    click.echo(f"{label}: Ψ = {parameters:,} parameters, N = {world_size} ranks; bytes per "
               "rank, communication sent per rank per optimizer step (ring)")
    rows, columns = estimator.estimate_rows(estimates)
    click.echo(render(rows, columns), nl=False)
    if json_file:
        _write_text(json_file, json_text(estimator.estimate_document(label, estimates)))


SIMULATE_COLUMNS = ["variant", "world_size", "bucket_cap_mb", "buckets", "step_ms",
                    "exposed_comm_ms", "overlap_pct", "efficiency", "measured_step_ms",
                    "error_pct"]


@cli.command()
@click.argument("run_path", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--bucket-cap-mb", "sizes_mib", default="1,2,5,10,25,50,100", show_default=True,
              type=options.POSITIVE_FLOAT_LIST, help="Bucket sizes in MiB, comma-separated.")
@click.option("--world-size", "world_sizes", default=None, type=options.POSITIVE_INT_LIST,
              help="World sizes to predict, comma-separated [default: the run's, 2, 4, 8].")
@click.option("--calibration", "calibration_file", type=click.Path(path_type=Path),
              help="A `ddpprof calibrate` file [default: calibration.json in the run folder "
                   "or its parent, else a fit over the run's collectives, else a sweep now].")
@click.option("--bandwidth-gbps", type=options.POSITIVE_FLOAT,
              help="Use this bus bandwidth (GB/s) instead of a calibration or fit.")
@click.option("--latency-us", type=options.NON_NEGATIVE_FLOAT,
              help="Use this per-call latency (µs) instead of a calibration or fit.")
@click.option("--ready-order", is_flag=True,
              help="Bucket gradients in the order they become ready, not in reverse "
                   "registration order (what PyTorch's Reducer and bucket_ddp_async do).")
@click.option("--measured", "measured_file", type=click.Path(path_type=Path),
              help="A `ddpprof sweep --json` file: measured points to compare and draw.")
@_JSON_OPTION
@_MARKDOWN_OPTION
@_html_option("reports/simulate.html")
def simulate(run_path: Path, sizes_mib: list[float], world_sizes: list[int] | None,
             calibration_file: Path | None, bandwidth_gbps: float | None,
             latency_us: float | None, ready_order: bool, measured_file: Path | None,
             json_file: Path | None, markdown: bool, html_file: str | None) -> None:
    """Predict step time, exposed communication, overlap and scaling efficiency of a recorded
    run's own configuration and of other bucket sizes and world sizes."""

    from . import simulate as sim
    from .sweep import DEFAULT_BUCKET_CAP_MB

    if (bandwidth_gbps is None) != (latency_us is None):
        raise UsageError("--bandwidth-gbps and --latency-us go together")
    if calibration_file is not None and bandwidth_gbps is not None:
        raise UsageError("--calibration, or --bandwidth-gbps with --latency-us: not both")
    html_target = _html_target(html_file, "simulate")
    check_outputs(json=json_file, html=html_target)
    refuse_inputs({"--json": json_file, "--html": html_target},
                  files=[*(f for f in (measured_file, calibration_file) if f),
                         *(run_path.glob("*.json*") if run_path.is_dir() else [run_path])],
                  what="an input of simulate")
    info = is_stdout(json_file)

    def note(text: str) -> None:
        click.echo(f"simulate: {text}", err=True)

    result = sim.simulate_run(run_path, sizes_mib, world_sizes, bandwidth_gbps, latency_us,
                              measured_file, calibration_file, ready_order, on_note=note)
    for line in sim.summary_lines(result):
        click.echo(line, err=info)
    render = table.to_markdown if markdown else table.to_text
    _echo_table(render(result.rows, SIMULATE_COLUMNS), json_file)
    for line in sim.verdict_lines(result, DEFAULT_BUCKET_CAP_MB):
        click.echo(line, err=info)
    if json_file:
        _write_text(json_file, json_text(sim.to_json_document(result)))
    if html_target is not None:
        from .report.html import prediction_figure, render_page

        capped = [r for r in result.rows if r["bucket_cap_mb"] is not None]
        _write_text(html_target, render_page(
            "ddpprof simulate", sim.summary_lines(result), [(c, c) for c in SIMULATE_COLUMNS],
            result.rows, [prediction_figure(capped, DEFAULT_BUCKET_CAP_MB)] if capped else []))
        click.echo(f"report: {html_target}", err=True)


CALIBRATE_COLUMNS = ["size_bytes", "time_us", "time_min_us", "time_max_us", "algbw_gbps",
                     "busbw_gbps", "model_time_us"]


@cli.command()
@options.config_options(option_fields(), only=("backend", "nproc", "nnodes", "node_rank",
                                               "rdzv_endpoint", "timeout_s"))
@click.option("--min-bytes", default="4K", show_default=True, type=options.ByteSize(min=4),
              help="Smallest all-reduce (4096, 4K, 1M, ...).")
@click.option("--max-bytes", default="256M", show_default=True, type=options.ByteSize(min=4),
              help="Largest all-reduce.")
@click.option("--step-factor", default=2.0, show_default=True,
              type=options.FiniteFloat(min=1, min_open=True),
              help="Each size is the previous one times this.")
@click.option("--warmup-iters", default=5, show_default=True, type=options.NON_NEGATIVE_INT,
              help="Untimed calls per size.")
@click.option("--iters", default=20, show_default=True, type=options.POSITIVE_INT,
              help="Timed calls per size (their median is the size's time).")
@click.option("--out", type=click.Path(path_type=Path), default=Path("calibration"),
              show_default=True, help="The folder calibration.json goes in.")
@_MARKDOWN_OPTION
@_html_option("reports/calibration.html")
@_QUIET_OPTION
def calibrate(backend: str, nproc: int, nnodes: int, node_rank: int, rdzv_endpoint: str | None,
              timeout_s: float, min_bytes: int, max_bytes: int, step_factor: float,
              warmup_iters: int, iters: int, out: Path, markdown: bool, html_file: str | None,
              quiet: bool) -> None:
    """Measure all-reduce time against size (an nccl-tests-style sweep through torchrun) and
    fit the latency α and bandwidth β that `ddpprof simulate` uses: OUT/calibration.json."""
    from . import calibrate as calibration

    html_target = _html_target(html_file, "calibration")
    check_outputs(html=html_target)
    refuse_inputs({"--html": html_target}, folders=[out])
    sweep = calibration.Sweep(
        backend=backend, nproc=nproc, nnodes=nnodes, node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint, timeout_s=timeout_s,
        sizes_bytes=calibration.sweep_sizes(min_bytes, max_bytes, step_factor),
        warmup_iters=warmup_iters, iters=iters)
    result = calibration.calibrate(sweep, out, quiet)
    if not result.points:  # another node's launcher: node 0 writes the file
        click.echo(f"node {node_rank}: sweep done; node 0 writes {calibration.CALIBRATION_NAME}",
                   err=True)
        return
    if result.fit is None:
        raise RunFailed(f"{out / calibration.CALIBRATION_NAME}: the sweep ran, but "
                        f"{result.error}; measure a wider range of sizes (--max-bytes)")
    rows = calibration.point_rows(result)
    render = table.to_markdown if markdown else table.to_text
    click.echo(render(rows, CALIBRATE_COLUMNS), nl=False)
    summary = calibration.describe(result)
    click.echo(summary + f"\nwritten: {out / calibration.CALIBRATION_NAME}", err=True)
    if html_target is not None:
        from .report.html import calibration_figure, render_page

        _write_text(html_target, render_page(
            "ddpprof calibrate: all-reduce", [summary], [(c, c) for c in CALIBRATE_COLUMNS],
            rows, [calibration_figure(rows)]), failure=RunFailed)
        click.echo(f"report: {html_target}", err=True)


SWEEP_COLUMNS = ["variant", "bucket_cap_mb", "status", "buckets", "step_ms", "samples_per_s",
                 "overlap_pct", "all_reduce_calls_per_step", "exposed_comm_ms_per_step"]


@cli.command()
@click.option("--variants", "variant_spec", default="pytorch_ddp,bucket_ddp_async",
              show_default=True)
@click.option("--bucket-cap-mb", "sizes_mib", default="1,2,5,10,25,50,100", show_default=True,
              type=options.POSITIVE_FLOAT_LIST, help="Bucket sizes to try, in MiB, "
                                                     "comma-separated.")
@options.config_options(option_fields(), only=("model", "nproc", "steps", "global_batch",
                                               "backend"), model="mlp-xlarge")
@click.option("--out", type=click.Path(path_type=Path), default=Path("sweep"),
              show_default=True)
@_html_option("reports/sweep.html")
@_JSON_OPTION
@_CSV_OPTION
@_MARKDOWN_OPTION
@_QUIET_OPTION
def sweep(variant_spec: str, sizes_mib: list[float], model: str, nproc: int, steps: int,
          global_batch: int, backend: str, out: Path, html_file: str | None,
          json_file: Path | None, csv_file: Path | None, markdown: bool, quiet: bool) -> None:
    """Measure step time, overlap, all-reduce calls and exposed communication for each bucket
    size: the bucket-size valley of seed 002."""
    from . import sweep as sweeping
    from .record.config import RunConfig
    from .record.launcher import Recording, parse_variants

    html_target = _html_target(html_file, "sweep")
    check_outputs(json=json_file, csv=csv_file, html=html_target)
    refuse_inputs({"--json": json_file, "--csv": csv_file, "--html": html_target},
                  runs_under=[out])
    base = Recording(parse_variants(variant_spec),
                     RunConfig(model=model, nproc=nproc, steps=steps, global_batch=global_batch,
                               backend=backend), out=out, quiet=quiet)
    rows = sweeping.sweep(base.variants, sizes_mib, base)
    render = table.to_markdown if markdown else table.to_text
    _echo_table(render(rows, SWEEP_COLUMNS), json_file, csv_file)
    best = sweeping.best_sizes(rows)
    for variant, size in best.items():
        click.echo(f"{variant}: fastest at {size:g} MiB", err=True)
    _write_outputs(rows, SWEEP_COLUMNS, "ddpprof.sweep", json_file, csv_file, ran=True)
    if html_target is not None:
        from .report.html import render_page, valley_figure

        intro = [f"{model}, {nproc} ranks per node, global batch {global_batch}. Step time is "
                 "the median of each run's unprofiled steps; overlap and calls come from its "
                 "profiled steps."]
        _write_text(html_target, render_page(
            "ddpprof sweep: bucket size", intro, [(c, c) for c in SWEEP_COLUMNS], rows,
            [valley_figure(rows, sweeping.DEFAULT_BUCKET_CAP_MB)]), failure=RunFailed)
        click.echo(f"report: {html_target}", err=True)
    failed = [r for r in rows if r["status"] != "complete"]
    if failed:
        raise RunFailed(f"{len(failed)} of {len(rows)} runs failed: "
                        + "; ".join(f"{r['run']} ({r['error']})" for r in failed))


def _ranges(numbers: list[int]) -> str:
    """[2, 3, 4, 9] -> "2-4, 9"."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _html_target(html_file: str | None, name: str) -> Path | None:
    """Where ``--html [FILE]`` writes: FILE, or ``reports/<name>.html``; None without it."""
    if html_file is None:
        return None
    return Path(html_file) if html_file else Path("reports") / f"{name}.html"


def _echo_table(text: str, *outputs: Path | None) -> None:
    """Print a table on standard output, or on stderr when an output file is ``-`` (standard
    output carries that file then)."""
    click.echo(text, nl=False, err=any(is_stdout(o) for o in outputs))


def _write_text(path: Path, text: str, failure: type[Exception] = UsageError) -> None:
    """Write an output file (see ``atomic.write_text``); an OSError is one line naming it:
    a ``UsageError`` (exit 2) when nothing was run, ``RunFailed`` (exit 1) after runs."""
    try:
        write_text(path, text)
    except OSError as error:
        raise failure(describe_os_error(path, error)) from None


def _write_outputs(rows: list[dict], columns: list[str], schema: str, json_file: Path | None,
                   csv_file: Path | None, ran: bool = False) -> None:
    failure = RunFailed if ran else UsageError
    if json_file is not None:
        _write_text(json_file, json_text({"schema": schema, "version": 1, "rows": rows}),
                    failure)
    if csv_file is not None:
        _write_text(csv_file, table.to_csv(rows, columns), failure)


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input is one line on stderr and exit 2; a failed run is one line and
    exit 1; a signal that stopped a recording is exit 128 + its number."""
    try:
        cli.main(args=argv, prog_name="ddpprof", standalone_mode=False)
    except (UsageError, click.UsageError) as error:
        _fail(error.format_message() if isinstance(error, click.UsageError) else str(error), 2)
    except Interrupted as error:
        _fail(str(error), error.exit_code)
    except (RunFailed, click.ClickException) as error:
        _fail(error.format_message() if isinstance(error, click.ClickException) else str(error),
              1)
    except click.exceptions.Abort:
        _fail("aborted", 130, prefix="ddpprof: ")
    except BrokenPipeError:
        # The reader of standard output went away (| head): nothing more to say, to anyone.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except OSError as error:
        _fail(describe_os_error(error.filename or "", error) if error.filename
              else str(error), 1)


def _fail(message: str, code: int, prefix: str = "ddpprof: error: ") -> None:
    click.echo(f"{prefix}{message}", err=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
