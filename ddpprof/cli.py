"""The ``ddpprof`` command: argument parsing and exit codes only; the work lives in the packages."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from . import __version__
from .atomic import atomic_path
from .errors import UsageError
from .report import table

ANALYZE_COLUMNS = ["run", "variant", "kind", "ranks", "steps", "compute_pct", "non_compute_pct",
                   "idle_pct", "overlap_pct", "comm_overhead_pct", "all_reduce_calls_per_step",
                   "all_reduce_ms_per_step", "all_reduce_busbw_gbps", "straggler_rank"]
PER_STEP_COLUMNS = ["run", "rank", "step", "compute_pct", "non_compute_pct", "idle_pct",
                    "overlap_pct", "comm_overhead_pct", "window_us"]
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
                           help="Write the table as CSV.")
_JSON_OPTION = click.option("--json", "json_file", type=click.Path(path_type=Path),
                            help="Write the table as JSON.")


@click.group()
@click.version_option(__version__, prog_name="ddpprof")
def cli() -> None:
    """Record PyTorch data-parallel training under torch.profiler and measure its overlap."""


@cli.command()
@click.option("--variant", "variant_spec", default="bucket_ddp_async", show_default=True,
              help="A variant, a comma-separated list, or 'all'.")
@click.option("--model", default="mlp-large", show_default=True)
@click.option("--model-path", type=click.Path(path_type=Path),
              help="A local Hugging Face checkpoint folder to train instead of random weights.")
@click.option("--data", type=click.Path(path_type=Path),
              help="A local .jsonl ('text' field) or text file; default: synthetic data.")
@click.option("--tokenizer", type=click.Path(path_type=Path),
              help="A local tokenizer folder for --data; default: --model-path, else bytes.")
@click.option("--seq-len", default=256, show_default=True, help="Tokens per sequence (LMs).")
@click.option("--nproc", default=2, show_default=True, help="Ranks per node.")
@click.option("--steps", default=8, show_default=True, help="Optimizer steps.")
@click.option("--global-batch", default=1024, show_default=True,
              help="Samples per optimizer step, across all ranks and micro-steps.")
@click.option("--grad-accum", type=int, default=None,
              help="Micro-steps per optimizer step [default: 1; 2 for simple_ddp_ga].")
@click.option("--bucket-cap-mb", default=25.0, show_default=True)
@click.option("--gradient-as-bucket-view", is_flag=True, help="pytorch_ddp's option of that name.")
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default="auto",
              show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("traces"), show_default=True)
@click.option("--name", help="Run folder name [default: the variant].")
@click.option("--wait", default=1, show_default=True, help="Profiler schedule: steps skipped.")
@click.option("--warmup", default=2, show_default=True, help="Profiler schedule: warm-up steps.")
@click.option("--active", default=3, show_default=True, help="Profiler schedule: traced steps.")
@click.option("--nnodes", default=1, show_default=True)
@click.option("--node-rank", default=0, show_default=True)
@click.option("--rdzv-endpoint", help="HOST:PORT of the c10d rendezvous (multi-node).")
@click.option("--lr", default=1e-3, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--timeout-s", default=300.0, show_default=True,
              help="Process-group timeout: a rank stuck this long in a collective fails.")
@_QUIET_OPTION
@_JSON_OPTION
@_CSV_OPTION
@_MARKDOWN_OPTION
def record(variant_spec: str, json_file: Path | None, csv_file: Path | None, markdown: bool,
           **options) -> None:
    """Record training runs through torchrun: one Chrome trace per rank and a run.json each."""
    from .record import RecordOptions
    from .record import record as record_runs
    from .record.launcher import parse_variants, summary_rows

    outcomes = record_runs(RecordOptions(variants=parse_variants(variant_spec), **options))
    rows = summary_rows(outcomes)
    click.echo(table.to_markdown(rows, RECORD_COLUMNS) if markdown
               else table.to_text(rows, RECORD_COLUMNS), nl=False)
    _write_outputs(rows, json_file, csv_file, schema="ddpprof.record")
    failed = [o for o in outcomes if o.status != "complete"]
    if failed:
        details = "; ".join(
            f"{o.variant} ({o.error}; log: {o.run_dir / o.manifest['error']['log']})"
            for o in failed)
        raise click.ClickException(f"{len(failed)} of {len(outcomes)} runs failed: {details}")


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "json_file", type=click.Path(path_type=Path),
              help="Write every metric, per run and per rank (the gate's input).")
@click.option("--csv", "csv_file", type=click.Path(path_type=Path),
              help="Write the per-run table, all columns, as CSV.")
@_MARKDOWN_OPTION
@click.option("--per-step", is_flag=True, help="Also break each ProfilerStep down.")
@click.option("--engine", type=click.Choice(["native", "hta"]), default="native",
              show_default=True, help="hta: HolisticTraceAnalysis computes the GPU shares.")
@click.option("--keep-last-step", is_flag=True,
              help="Analyze the last ProfilerStep too (HTA drops it by default).")
@click.option("--jobs", type=click.IntRange(min=1), help="Ranks analyzed in parallel.")
@_QUIET_OPTION
@_html_option("reports/<name>.html")
def analyze(paths: tuple[Path, ...], json_file: Path | None, csv_file: Path | None,
            markdown: bool, per_step: bool, engine: str, keep_last_step: bool,
            jobs: int | None, quiet: bool, html_file: str | None) -> None:
    """Compute, non-compute, idle and overlap shares and collective statistics of traces.

    PATH is a run folder (rank traces and an optional run.json), a folder of run folders, or
    trace files (.json or .json.gz).
    """
    from .analysis import analyze_paths, run_row, to_json_document
    from .record.progress import quiet_by_environment

    show_progress = not (quiet or quiet_by_environment()) and sys.stderr.isatty()

    def progress(index: int, total: int, run) -> None:
        if show_progress:
            click.echo(f"\r\033[K[{index + 1}/{total}] analyzing {run.name} "
                       f"({len(run.traces)} trace{'s' * (len(run.traces) != 1)})", err=True,
                       nl=False)

    analysis = analyze_paths(list(paths), keep_last_step=keep_last_step, per_step=per_step,
                             jobs=jobs, engine=engine, on_run=progress,
                             timeline=html_file is not None)
    if show_progress:
        click.echo("\r\033[K", err=True, nl=False)
    rows = [run_row(run) for run in analysis.runs]
    if rows:
        render = table.to_markdown if markdown else table.to_text
        click.echo(render(rows, ANALYZE_COLUMNS), nl=False)
        if per_step:
            step_rows = [{"run": run.name, "rank": rank.rank, **step}
                         for run in analysis.runs for rank in run.ranks for step in rank.per_step]
            click.echo("\n" + render(step_rows, PER_STEP_COLUMNS), nl=False)
        for run in analysis.runs:
            notes = [f"last ProfilerStep {run.last_step}"]
            if run.missing_ranks:
                notes.append(f"missing ranks {_ranges(run.missing_ranks)}")
            click.echo(f"{run.name}: " + "; ".join(notes), err=True)
    if json_file:
        _write_text(json_file, table.dumps(to_json_document(analysis)))
    if csv_file:
        _write_text(csv_file, table.to_csv(rows, list(rows[0]) if rows else ANALYZE_COLUMNS))
    if html_file is not None and analysis.runs:
        from .report.html import render_report

        name = paths[0].resolve().name if len(paths) == 1 else "report"
        target = Path(html_file) if html_file else Path("reports") / f"{name}.html"
        _write_text(target, render_report(analysis, f"ddpprof: {name}"))
        click.echo(f"report: {target}", err=True)
    if analysis.errors:
        for error in analysis.errors:
            click.echo(f"ddpprof: error: {error['error']}", err=True)
        sys.exit(2)


GATE_COLUMNS = ["rule", "run", "baseline", "current", "threshold", "verdict"]


@cli.command()
@click.argument("current", type=click.Path(path_type=Path))
@click.option("--baseline", "baseline_file", required=True, type=click.Path(path_type=Path),
              help="An `ddpprof analyze --json` file.")
@click.option("--rule", "rules", multiple=True,
              help="METRIC OP RHS, e.g. 'overlap_pct >= baseline - 2' or 'compute_pct >= 60'. "
                   "Repeatable. [default: overlap_pct >= baseline - 2]")
@click.option("--tolerance", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="Slack, in each metric's units, before a rule counts as broken.")
@click.option("--aggregate", type=click.Choice(["none", "median"]), default="none",
              show_default=True, help="median: repeats of a variant become their median.")
@click.option("--markdown", "markdown_file", type=click.Path(path_type=Path),
              help="Also write the verdicts as Markdown (for a PR comment).")
def gate(current: Path, baseline_file: Path, rules: tuple[str, ...], tolerance: float,
         aggregate: str, markdown_file: Path | None) -> None:
    """Fail (exit 1) when a metric of CURRENT breaks a rule against the baseline.

    CURRENT is a trace folder (analyzed now) or an `ddpprof analyze --json` file.
    Exit 0: every rule holds; 1: a regression; 2: bad input.
    """
    from . import gate as gating

    parsed = [gating.parse_rule(text) for text in rules or (gating.DEFAULT_RULE,)]
    now, before = _gate_runs(current), _gate_runs(baseline_file, must_be_json=True)
    if aggregate == "median":
        now, before = gating.aggregate_by_variant(now), gating.aggregate_by_variant(before)
    verdicts = gating.evaluate(parsed, now, before, tolerance)
    rows = [v.row() for v in verdicts]
    failed = [v for v in verdicts if v.verdict == "FAIL"]
    summary = (f"{len(failed)} of {len(verdicts)} checks failed" if failed
               else f"all {len(verdicts)} checks passed")
    click.echo(table.to_text(rows, GATE_COLUMNS) + summary)
    if markdown_file:
        _write_text(markdown_file, "### ddpprof gate\n\n" + table.to_markdown(rows, GATE_COLUMNS)
                    + f"\n**{summary}**\n")
    if failed:
        sys.exit(1)


def _gate_runs(path: Path, must_be_json: bool = False) -> list[dict]:
    """The per-run rows of an analyze --json file, or of a trace folder analyzed now."""
    import json

    from .analysis import analyze_paths, to_json_document

    if path.is_file() or must_be_json:
        try:
            document = json.loads(path.read_text())
        except OSError as error:
            raise UsageError(f"{path}: cannot be read ({error.strerror})") from None
        except ValueError as error:
            raise UsageError(f"{path}: not JSON ({error})") from None
        if not isinstance(document, dict) or document.get("schema") != "ddpprof.analyze" \
                or not isinstance(document.get("runs"), list):
            raise UsageError(f"{path}: not a `ddpprof analyze --json` file")
        if document.get("version") != 1:
            raise UsageError(f"{path}: analyze schema version {document.get('version')!r}, "
                             "this ddpprof reads version 1")
        runs = document["runs"]
        if not all(isinstance(r, dict) and isinstance(r.get("run"), str) for r in runs):
            raise UsageError(f"{path}: malformed runs (each needs a 'run' name)")
        return runs
    analysis = analyze_paths([path])
    if analysis.errors:
        raise UsageError(analysis.errors[0]["error"])
    return to_json_document(analysis)["runs"]


BENCH_COLUMNS = ["model", "variant", "nproc", "step_ms_min", "step_ms_median", "epoch_s",
                 "comm_ms", "samples_per_s", "speedup", "efficiency", "amdahl_f",
                 "amdahl_ceiling", "profiler_overhead"]


@cli.command()
@click.option("--models", default="mlp-small,mlp-medium,mlp-large,mlp-xlarge", show_default=True)
@click.option("--variants", "variant_spec",
              default="single,simple_ddp,simple_ddp_async,pytorch_ddp", show_default=True)
@click.option("--nproc", "nproc_spec", default="1,2", show_default=True,
              help="Process counts, comma-separated.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--steps", default=8, show_default=True)
@click.option("--warmup-steps", default=2, show_default=True, type=click.IntRange(min=0),
              help="Steps left out of every timing.")
@click.option("--global-batch", default=1024, show_default=True)
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default="auto",
              show_default=True)
@click.option("--overhead/--no-overhead", default=True, show_default=True,
              help="One profiled run per configuration, for the profiler's overhead.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("bench"), show_default=True)
@click.option("--json", "json_file", type=click.Path(path_type=Path),
              help="[default: <out>/bench.json]")
@_CSV_OPTION
@_MARKDOWN_OPTION
@_html_option("reports/bench.html")
@_QUIET_OPTION
def bench(models: str, variant_spec: str, nproc_spec: str, repeats: int, steps: int,
          warmup_steps: int, global_batch: int, backend: str, overhead: bool, out: Path,
          json_file: Path | None, csv_file: Path | None, markdown: bool,
          html_file: str | None, quiet: bool) -> None:
    """Seed 000's scaling benchmark: step and epoch time, communication time of the blocking
    variants, throughput, speedup, scaling efficiency and Amdahl's parallel fraction."""
    from . import bench as benching
    from .record import RecordOptions
    from .record.launcher import parse_variants, validate

    model_list = [m.strip() for m in models.split(",") if m.strip()]
    variants = parse_variants(variant_spec)
    counts = benching.parse_counts(nproc_spec)
    base = RecordOptions(variants=variants, model=model_list[0], nproc=max(counts),
                         steps=steps, global_batch=global_batch, backend=backend, out=out,
                         quiet=quiet, profile=False)
    for model in model_list:  # every configuration is checked before the first run
        validate(RecordOptions(**{**base.__dict__, "model": model}))
    rows = benching.bench(model_list, variants, counts, base, repeats, warmup_steps, overhead)
    render = table.to_markdown if markdown else table.to_text
    click.echo(render(rows, BENCH_COLUMNS), nl=False)
    _write_text(json_file or out / "bench.json", table.to_json(rows, "ddpprof.bench"))
    if csv_file:
        _write_text(csv_file, table.to_csv(rows, BENCH_COLUMNS))
    if html_file is not None:
        from .report.html import render_page, speedup_figure, throughput_figure

        target = Path(html_file) if html_file else Path("reports") / "bench.html"
        intro = [f"{repeats} interleaved repeats, unprofiled, the first {warmup_steps} steps of "
                 f"each run left out; global batch {global_batch}. Step time is the median "
                 "over steps, then the min and median over repeats."]
        _write_text(target, render_page("ddpprof bench", intro,
                                        [(c, c) for c in BENCH_COLUMNS], rows,
                                        [speedup_figure(rows), throughput_figure(rows)]))
        click.echo(f"report: {target}", err=True)


SIMULATE_COLUMNS = ["world_size", "bucket_cap_mb", "buckets", "step_ms", "exposed_comm_ms",
                    "overlap_pct", "efficiency", "measured_step_ms", "error_pct"]


@cli.command()
@click.argument("run_path", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--bucket-cap-mb", "sizes_spec", default="1,2,5,10,25,50,100", show_default=True)
@click.option("--world-size", "world_spec", default=None,
              help="World sizes to predict, comma-separated [default: the run's, 2, 4, 8].")
@click.option("--bandwidth-gbps", type=float, help="Use this bandwidth instead of the fit.")
@click.option("--latency-us", type=float, help="Use this per-call latency instead of the fit.")
@click.option("--measured", "measured_file", type=click.Path(path_type=Path),
              help="A `ddpprof sweep --json` file: measured points to compare and draw.")
@_JSON_OPTION
@_MARKDOWN_OPTION
@_html_option("reports/simulate.html")
def simulate(run_path: Path, sizes_spec: str, world_spec: str | None,
             bandwidth_gbps: float | None, latency_us: float | None,
             measured_file: Path | None, json_file: Path | None, markdown: bool,
             html_file: str | None) -> None:
    """Predict step time, exposed communication, overlap and scaling efficiency for other
    bucket sizes and world sizes, from one recorded run."""

    from . import simulate as sim
    from .bench import parse_counts
    from .sweep import DEFAULT_BUCKET_CAP_MB, parse_sizes

    if (bandwidth_gbps is None) != (latency_us is None):
        raise UsageError("--bandwidth-gbps and --latency-us go together")
    result = sim.simulate_run(run_path, parse_sizes(sizes_spec),
                              parse_counts(world_spec) if world_spec else None,
                              bandwidth_gbps, latency_us, measured_file)
    cost, model, rows, predictions = result.cost, result.model, result.rows, result.predictions
    fit = ("given" if cost.r2 is None else f"fitted on {cost.samples} collectives, "
           f"R² = {cost.r2:.3f}")
    click.echo(f"cost model: α = {cost.alpha_us:.1f} µs, β = {cost.beta_bytes_per_us / 1e3:.3f} "
               f"GB/s on ring traffic ({fit}); step model from {result.trace_name}: "
               f"forward {model.pre_us / 1e3:.2f} ms, backward {model.backward_us / 1e3:.2f} ms, "
               f"optimizer {model.post_us / 1e3:.2f} ms, {len(model.grads)} gradients, "
               f"world size {model.world_size}")
    render = table.to_markdown if markdown else table.to_text
    click.echo(render(rows, SIMULATE_COLUMNS), nl=False)
    for n, top in sim.best(predictions).items():
        default = next((p for p in predictions if p.world_size == n
                        and p.bucket_cap_mb == DEFAULT_BUCKET_CAP_MB), None)
        gap = (f"; the default {DEFAULT_BUCKET_CAP_MB:g} MB is "
               f"{100 * (default.step_ms / top.step_ms - 1):.1f}% slower" if default else "")
        click.echo(f"world size {n}: best predicted bucket {top.bucket_cap_mb:g} MB, "
                   f"{top.step_ms:.2f} ms{gap}")
    error = sim.median_error_pct([(r["step_ms"], r["measured_step_ms"]) for r in rows
                                  if r["measured_step_ms"]])
    if error is not None:
        click.echo(f"measured points: median |error| {error:.1f}%")
    if json_file:
        _write_text(json_file, table.dumps({
            "schema": "ddpprof.simulate", "version": 1, "rows": rows,
            "cost": {"alpha_us": cost.alpha_us, "beta_gbps": cost.beta_bytes_per_us / 1e3,
                     "r2": cost.r2, "samples": cost.samples}}))
    if html_file is not None:
        from .report.html import prediction_figure, render_page

        target = Path(html_file) if html_file else Path("reports") / "simulate.html"
        _write_text(target, render_page(
            "ddpprof simulate", [f"Calibrated from {run_path}: cost model {fit}."],
            [(c, c) for c in SIMULATE_COLUMNS], rows,
            [prediction_figure(rows, DEFAULT_BUCKET_CAP_MB)]))
        click.echo(f"report: {target}", err=True)



SWEEP_COLUMNS = ["variant", "bucket_cap_mb", "status", "buckets", "step_ms", "samples_per_s",
                 "overlap_pct", "all_reduce_calls_per_step", "exposed_comm_ms_per_step"]


@cli.command()
@click.option("--variants", "variant_spec", default="pytorch_ddp,bucket_ddp_async",
              show_default=True)
@click.option("--bucket-cap-mb", "sizes_spec", default="1,2,5,10,25,50,100", show_default=True,
              help="Bucket sizes to try, comma-separated.")
@click.option("--model", default="mlp-xlarge", show_default=True)
@click.option("--nproc", default=2, show_default=True)
@click.option("--steps", default=8, show_default=True)
@click.option("--global-batch", default=1024, show_default=True)
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default="auto",
              show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("sweep"),
              show_default=True)
@_html_option("reports/sweep.html")
@_JSON_OPTION
@_CSV_OPTION
@_MARKDOWN_OPTION
@_QUIET_OPTION
def sweep(variant_spec: str, sizes_spec: str, model: str, nproc: int, steps: int,
          global_batch: int, backend: str, out: Path, html_file: str | None,
          json_file: Path | None, csv_file: Path | None, markdown: bool, quiet: bool) -> None:
    """Measure step time, overlap, all-reduce calls and exposed communication for each bucket
    size: the bucket-size valley of seed 002."""
    from . import sweep as sweeping
    from .record import RecordOptions
    from .record.launcher import parse_variants

    base = RecordOptions(variants=parse_variants(variant_spec), model=model, nproc=nproc,
                         steps=steps, global_batch=global_batch, backend=backend, out=out,
                         quiet=quiet)
    rows = sweeping.sweep(base.variants, sweeping.parse_sizes(sizes_spec), base)
    render = table.to_markdown if markdown else table.to_text
    click.echo(render(rows, SWEEP_COLUMNS), nl=False)
    best = sweeping.best_sizes(rows)
    for variant, size in best.items():
        click.echo(f"{variant}: fastest at {size:g} MB", err=True)
    if json_file:
        _write_text(json_file, table.to_json(rows, "ddpprof.sweep"))
    if csv_file:
        _write_text(csv_file, table.to_csv(rows, SWEEP_COLUMNS))
    if html_file is not None:
        from .report.html import render_page, valley_figure

        target = Path(html_file) if html_file else Path("reports") / "sweep.html"
        intro = [f"{model}, {nproc} ranks per node, global batch {global_batch}. Step time is "
                 "the median of each run's unprofiled steps; overlap and calls come from its "
                 "profiled steps."]
        _write_text(target, render_page(
            "ddpprof sweep: bucket size", intro, [(c, c) for c in SWEEP_COLUMNS], rows,
            [valley_figure(rows, sweeping.DEFAULT_BUCKET_CAP_MB)]))
        click.echo(f"report: {target}", err=True)
    failed = [r for r in rows if r["status"] != "complete"]
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(rows)} runs failed: "
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


def _write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _write_outputs(rows: list[dict], json_file: Path | None, csv_file: Path | None,
                   schema: str) -> None:
    if json_file is not None:
        _write_text(json_file, table.to_json(rows, schema))
    if csv_file is not None:
        _write_text(csv_file, table.to_csv(rows, RECORD_COLUMNS))


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input is one line on stderr and exit 2; a failed run is exit 1."""
    try:
        cli.main(args=argv, prog_name="ddpprof", standalone_mode=False)
    except UsageError as error:
        click.echo(f"ddpprof: error: {error}", err=True)
        sys.exit(2)
    except click.UsageError as error:
        click.echo(f"ddpprof: error: {error.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as error:
        click.echo(f"ddpprof: error: {error.format_message()}", err=True)
        sys.exit(1)
    except click.exceptions.Abort:
        click.echo("ddpprof: aborted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
