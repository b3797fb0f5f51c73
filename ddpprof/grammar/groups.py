"""Each command's own options, in groups (``ddpprof/cli.py`` puts them on the command): the
options of one command only. Their types, and the options several commands share, are
``ddpprof.grammar.options``'."""

from __future__ import annotations

from collections.abc import Callable

import click

from .options import (
    BANDWIDTH_GBPS,
    FASTER,
    FASTER_NETWORK,
    FOLDER,
    LATENCY_US,
    LEVEL,
    NON_NEGATIVE_FLOAT,
    NON_NEGATIVE_REPEATS,
    OUTPUT,
    POSITIVE_INT,
    RANK_DELAY,
    REPEATS,
    SHARED_CORES,
    STEP_FACTOR,
    ByteSize,
    F,
    keep_last_step_option,
    list_option,
    run_noise_option,
    world_size_option,
)


def _stack(*chosen: Callable[[F], F]) -> Callable[[F], F]:
    def decorate(command: F) -> F:
        for option in reversed(chosen):
            command = option(command)
        return command

    return decorate


def sweep_size_options() -> Callable[[F], F]:
    """``calibrate``'s sizes and repetitions (nccl-tests' ``-b -e -f -w -n``)."""
    return _stack(
        click.option("--min-bytes", default="4K", show_default=True, type=ByteSize(min=4),
                     help="Smallest all-reduce (4096, 4K, 1M, ...)."),
        click.option("--max-bytes", default="256M", show_default=True, type=ByteSize(min=4),
                     help="Largest all-reduce."),
        click.option("--step-factor", default=2.0, show_default=True, type=STEP_FACTOR,
                     help="Each size is the previous one times this."),
        click.option("--warmup-iters", default=5, show_default=True,
                     type=NON_NEGATIVE_REPEATS,
                     help="Untimed calls per size."),
        click.option("--iters", default=20, show_default=True, type=REPEATS,
                     help="Timed calls per size (their median is the size's time)."))


def cost_model_options() -> Callable[[F], F]:
    """Where ``simulate`` takes its cost model and its measured points from."""
    return _stack(
        click.option("--calibration", type=FOLDER,
                     help="A `ddpprof calibrate` file [default: calibration.json in the run "
                          "folder or its parent, else a fit over the run's collectives, else "
                          "a sweep now]."),
        click.option("--bandwidth-gbps", type=BANDWIDTH_GBPS,
                     help="Use this bus bandwidth (GB/s) instead of a calibration or fit."),
        click.option("--latency-us", type=LATENCY_US,
                     help="Use this per-call latency (µs) instead of a calibration or fit."),
        click.option("--shared-cores", type=SHARED_CORES, metavar="C",
                     help="Every rank, at any world size, shares these C cores (the ranks of a "
                          "CPU run on one host): where the ranks' threads outnumber them, all "
                          "work slows in proportion; 0: each rank brings its own device or "
                          "cores. [default: the host's cores for a run of CPU ranks on one "
                          "host (run.json), else 0]"),
        click.option("--ready-order", is_flag=True,
                     help="Bucket gradients in the order they become ready, not in reverse "
                          "registration order (what PyTorch's Reducer and bucket_ddp_async "
                          "do)."),
        click.option("--measured", type=FOLDER,
                     help="A `ddpprof sweep --json` file: measured points to compare and draw."))


def analysis_options() -> Callable[[F], F]:
    """How ``analyze`` reads the traces and where it runs."""
    return _stack(
        click.option("--per-step", is_flag=True, help="Also break each ProfilerStep down."),
        click.option("--hta-compat", is_flag=True,
                     help="Reproduce HTA 0.5.0's defaults: timestamps rounded inward to whole "
                          "µs, only NCCL kernels as communication."),
        click.option("--comm-kernel", "comm_kernels", multiple=True, metavar="REGEX",
                     help="Also count kernels whose name matches REGEX as communication. "
                          "Repeatable."),
        click.option("--no-structural-comm", "structural_comm", is_flag=True, default=True,
                     flag_value=False,
                     help="Count kernels as communication by name only, not also those "
                          "launched inside collectives' spans (see docs/metrics.md)."),
        click.option("--engine", type=click.Choice(["native", "hta"]), default="native",
                     show_default=True,
                     help="hta: HolisticTraceAnalysis computes the GPU shares."),
        keep_last_step_option(),
        click.option("--critical-path", is_flag=True,
                     help="Also each step's critical path across ranks (see `ddpprof "
                          "critical-path`)."),
        click.option("--jobs", "-j", "jobs", type=POSITIVE_INT,
                     help="Ranks analyzed in parallel [default: the cores, one for a small "
                          "run]."),
        click.option("--scheduler", envvar="DDPPROF_SCHEDULER", metavar="ADDRESS",
                     help="Analyze the ranks on this Dask cluster (tcp://host:8786) [env: "
                          "DDPPROF_SCHEDULER]; the workers read the traces."))


def edit_options(each: str) -> Callable[[F], F]:
    """The graph edits ``critical-path`` and ``simulate`` replay (``ddpprof.graph.whatif``);
    ``each`` says what one of them gives."""
    return _stack(
        click.option("--faster", multiple=True, metavar="CLASS=PCT", type=FASTER,
                     help="Replay with the work of CLASS (gemm or compute) PCT % shorter, e.g. "
                          f"gemm=20. Repeatable: {each}."),
        click.option("--faster-network", multiple=True, metavar="PCT", type=FASTER_NETWORK,
                     help=f"Replay with every collective's transfer PCT % shorter. Repeatable: "
                          f"{each}."),
        click.option("--rank-delay", multiple=True, metavar="RANK=US", type=RANK_DELAY,
                     help="Replay with RANK starting its step US µs later (negative: sooner). "
                          f"Repeatable: {each}."))


def what_if_options() -> Callable[[F], F]:
    """``critical-path``'s edits to replay, and its graph output."""
    return _stack(
        edit_options("one replay each"),
        click.option("--graph-json", type=OUTPUT, metavar="FILE|-",
                     help="Write every step's dependency graph as JSON (- for standard "
                          "output)."))


def gate_options() -> Callable[[F], F]:
    """The gate's baseline and rules."""
    return _stack(
        click.option("--baseline", required=True, type=FOLDER,
                     help="A `ddpprof analyze --json` file."),
        click.option("--rule", "rules", multiple=True,
                     help="METRIC OP RHS, e.g. 'overlap_pct >= baseline - 2' or 'compute_pct "
                          ">= 60'. Repeatable. [default: overlap_pct >= baseline - 2]"),
        click.option("--tolerance", default=0.0, show_default=True, type=NON_NEGATIVE_FLOAT,
                     help="Slack, in each metric's units, before a rule counts as broken."),
        click.option("--aggregate", type=click.Choice(["none", "median"]), default="none",
                     show_default=True, help="median: the repeats of each variant and "
                                             "configuration become their median."),
        click.option("--significance", type=LEVEL,
                     help="Fail only when a rule is broken beyond the noise at this level "
                          "(0.95)."),
        run_noise_option())


def diff_options() -> Callable[[F], F]:
    """``diff``'s level, analyzed window and noise prior."""
    return _stack(
        click.option("--significance", default=0.95, show_default=True, type=LEVEL,
                     help="Level of the intervals, simultaneous over the parts."),
        keep_last_step_option(),
        run_noise_option())


def bench_options() -> Callable[[F], F]:
    """``bench``'s repetitions, warm-up and profiled run."""
    return _stack(
        click.option("--repeats", default=3, show_default=True, type=REPEATS,
                     help="Timed runs per configuration, interleaved."),
        click.option("--warmup-steps", default=2, show_default=True,
                     type=NON_NEGATIVE_REPEATS,
                     help="Steps left out of every timing."),
        click.option("--overhead/--no-overhead", default=True, show_default=True,
                     help="One profiled run per configuration, for the profiler's overhead."))


def memory_options() -> Callable[[F], F]:
    """What ``memory`` estimates for, beside ``--model`` and ``--world-size``."""
    return _stack(
        click.option("--model-path", type=FOLDER,
                     help="A local Hugging Face checkpoint folder (parameters counted on the "
                          "meta device; needs the [record] extra)."),
        world_size_option("Ranks N."),
        list_option("--precision", "precisions", item=click.Choice(["fp32", "bf16-mixed"]),
                    metavar="P", help="fp32 or bf16-mixed [default: both]."),
        list_option("--optimizer", "optimizers",
                    item=click.Choice(["adamw", "sgd-momentum", "sgd"]), metavar="O",
                    help="adamw, sgd-momentum or sgd (no momentum) [default: all]."))
