"""The ``ddpprof`` command: the options of each command (their grammar: ``grammar``), one
call per command (``commands``), its output printed and written (``render.output``), and
errors mapped to exit codes: 0 done, 1 a regression or a failed run, 2 bad input."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any

import click
import rich_click.rich_click as help_style
from rich_click import RichCommand, RichGroup

from . import __version__
from .commands import options_from
from .commands.variants import help_text
from .core.errors import Interrupted, RunFailed, UsageError, describe_os_error, without_secrets
from .core.processes import import_numpy_with_one_blas_thread, out_of_memory
from .grammar import groups as g
from .grammar import options as o
from .grammar.options import exits
from .record.faults import FAULT, kind_names
from .render.ascii import install
from .render.output import Output, Outputs, emit
from .render.table import terminal_text
from .run.config import option_fields, record_option_fields
from .variants import DEFAULT_BUCKET_CAP_MIB

help_style.OPTIONS_TABLE_COLUMN_TYPES = ["required", "opt_short", "opt_long", "help"]
help_style.OPTIONS_TABLE_HELP_SECTIONS = ["help", "deprecated", "envvar", "default", "required",
                                         "metavar"]  # the type after the help: more room


class Commands(RichGroup):
    command_class = RichCommand

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # as declared: the order a user works in


def run(command: str, outputs: Outputs, parsed: dict[str, Any] | None = None) -> None:
    """Call ``ddpprof.commands.<command>`` with its options object (``<Command>Options``,
    declared beside it, built from ``parsed``: ``commands.options_from``) and ``outputs``;
    print and write what it returns, exit with its status."""
    import_numpy_with_one_blas_thread()
    module = importlib.import_module(f"{__package__}.commands.{command}")
    function = getattr(module, command)
    if parsed is None:
        output: Output = function(outputs)
    else:
        kind = getattr(module, "".join(w.title() for w in command.split("_")) + "Options")
        output = function(options_from(kind, parsed), outputs)
    emit(output, outputs)
    if output.exit_code:
        sys.exit(output.exit_code)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ddpprof")
def cli() -> None:
    """Record PyTorch data-parallel training under torch.profiler and measure its overlap:
    how much gradient communication hides behind backward, and what to change."""


@cli.command(epilog="\n\n".join(["Variants (--variant):", *help_text(), exits("a run failed")]))
@o.variant_option("bucket_ddp_async")
@o.model_option("mlp-small", "Any name with --model-path. ")
@o.nproc_option("2")
@o.bucket_cap_option(f"{DEFAULT_BUCKET_CAP_MIB:g}", "Gradient bucket size in MiB (variants "
                     "with buckets).")
@o.config_options(option_fields(), only=[f.name for f in record_option_fields()])
@o.out_option("traces", "The folder the run folders go in.")
@click.option("--name", type=o.RUN_NAME,
              help="The run folder's name [default: the variant]; with several runs, the "
                   "folder that holds them.")
@click.option("--fault", "faults", type=FAULT, multiple=True, metavar="KIND[:RANK[:AMOUNT]]",
              help="Testing: inject a fault with a known culprit, with no marker in the trace "
                   "(run.json records it under injected_faults); repeatable. Kinds: "
                   f"{kind_names()} (see docs/recording.md#faults).")
@o.outputs("one row per run", progress=True)
def record(outputs: Outputs, **parsed: Any) -> None:
    """Record training runs through torchrun: one Chrome trace per rank and a run.json each.

    Every variant runs under every combination of --model, --nproc and --bucket-cap-mib.
    One run goes in OUT/NAME (NAME: the variant); several in `OUT/[NAME/]LABEL`, LABEL being
    `VARIANT[-MODEL][-nNPROC][-capMIB]` with a part for each option given several values.
    """
    config = {field.name: parsed.pop(field.name) for field in record_option_fields()}
    run("record", outputs, {**parsed, "config": MappingProxyType(config)})


@cli.command(epilog=exits(""))
@click.argument("paths", nargs=-1, required=True)
@g.analysis_options()
@o.outputs("every metric, per run and per rank (the gate's input)", html="<name>",
           progress=True)
def analyze(outputs: Outputs, **parsed: Any) -> None:
    """Compute, non-compute, idle and overlap shares and collective statistics of traces.

    PATH is a run folder (rank traces and an optional run.json), a folder of run folders, or
    trace files (.json or .json.gz), on disk or at a URL (s3://, gs://, az://, http(s)://).
    --html writes reports/<name>.html, <name> being the folder's or file's name.
    """
    run("analyze", outputs, parsed)


@cli.command("critical-path", epilog=exits(""))
@click.argument("paths", nargs=-1, required=True)
@o.keep_last_step_option()
@g.what_if_options()
@o.outputs("the critical path of every step", html="<name>-critical-path", progress=True)
def critical_path(outputs: Outputs, **parsed: Any) -> None:
    """The chain of work across ranks that sets each step's length, and what it is made of:
    compute on each rank, exposed communication, waiting for a rank, host time and idle.

    PATH is what `ddpprof analyze` takes. Each step's dependency graph (ops in order per
    thread and stream, launches, collectives across ranks) is replayed: the --faster,
    --faster-network and --rank-delay options predict the step after that change.
    """
    run("critical_path", outputs, parsed)


@cli.command(epilog=exits(""))
@click.argument("before", metavar="A")
@click.argument("after", metavar="B")
@g.diff_options()
@o.outputs("the parts, the moved items and the noise of every pair", html="diff-<A>-<B>",
           progress=True)
def diff(outputs: Outputs, **parsed: Any) -> None:
    """Why B's step differs from A's: the change split into parts that add up to it, each
    against the noise of the runs (their repeats, their steps, or the CPU prior for runs
    recorded like it), and what moved inside them. A and B are what `ddpprof analyze` takes,
    or its --json files (docs/diff.md)."""
    run("diff", outputs, parsed)


@cli.command(epilog=exits("a rule is broken (a regression)"))
@click.argument("current", type=o.FOLDER)
@g.gate_options()
@o.outputs("the verdicts", progress=True)
def gate(outputs: Outputs, **parsed: Any) -> None:
    """Fail (exit 1) when a metric of CURRENT breaks a rule against the baseline.

    CURRENT is a trace folder (analyzed now) or an `ddpprof analyze --json` file. Runs are
    matched by name (names must be unique), else by variant and configuration.
    """
    run("gate", outputs, parsed)


@cli.command(epilog=exits("the dumps show no hang"))
@click.argument("path", metavar="RUN_OR_DUMPS", type=click.Path(path_type=Path))
@o.outputs("the diagnosis", progress=True)
def hang(outputs: Outputs, **parsed: Any) -> None:
    """Why a job hung: the first collective its ranks did not all reach alike, the ranks to
    blame and what each did instead, and where in the code, from Flight Recorder dumps.

    RUN_OR_DUMPS is a run folder `ddpprof record` wrote (its dumps are in fr/), a folder of
    PyTorch's Flight Recorder dumps (pickle or JSON, named <prefix><rank>), or that prefix
    (TORCH_FR_DUMP_TEMP_FILE). Exit 0 with a diagnosis.
    """
    run("hang", outputs, parsed)


@cli.command(epilog=exits(""))
@click.argument("run_path", metavar="RUN", type=o.FOLDER)
@o.bucket_cap_option(o.WHAT_IF_CAPS_MIB, "Bucket sizes to predict, in MiB.")
@o.world_size_option("World sizes to predict [default: the run's, 2, 4, 8].")
@g.edit_options("all apply to every row")
@g.cost_model_options()
@o.keep_last_step_option()
@o.outputs("the predictions, the cost model and the notes", html="<run>-simulate",
           progress=True)
def simulate(outputs: Outputs, **parsed: Any) -> None:
    """Predict step time, exposed communication, overlap and scaling efficiency of a recorded
    run's own configuration and of other bucket sizes and world sizes, by replaying its
    steps' dependency graphs across ranks with those edits."""
    run("simulate", outputs, parsed)


@cli.command(epilog=exits("the sweep failed"))
@o.config_options(option_fields(), only=("backend",))
@o.nproc_option("2")
@o.config_options(option_fields(), only=("nnodes", "node_rank", "rdzv_endpoint", "timeout_s"))
@g.sweep_size_options()
@click.option("--tax-from", type=o.FOLDER, metavar="RUN",
              help="Also measure the overlap tax on this recorded run and store it: simulate "
                   "then replays every run with it.")
@o.out_option("calibration", "The folder calibration.json goes in.")
@o.outputs("the calibration (as OUT/calibration.json)", html="calibration", progress=True)
def calibrate(outputs: Outputs, **parsed: Any) -> None:
    """Measure all-reduce time against size (an nccl-tests-style sweep through torchrun) and
    fit the latency α and bandwidth β that `ddpprof simulate` uses: OUT/calibration.json."""
    run("calibrate", outputs, parsed)


@cli.command(epilog=exits("a run failed"))
@o.variant_option("pytorch_ddp,bucket_ddp_async", bucketed=True)
@o.bucket_cap_option(o.WHAT_IF_CAPS_MIB, "Bucket sizes to try, in MiB.")
@o.model_option("mlp-xlarge")
@o.nproc_option("2")
@o.config_options(option_fields(), only=("steps", "global_batch", "backend"))
@o.out_option("sweep", "The folder the run folders go in (named as record names them).")
@o.outputs("one row per run", html="sweep", progress=True)
def sweep(outputs: Outputs, **parsed: Any) -> None:
    """Measure step time, overlap, gradient collectives and exposed communication of the
    variants with buckets at each bucket size: the bucket-size valley."""
    run("sweep", outputs, parsed)


@cli.command(epilog=exits("a run failed"))
@o.model_option("mlp-small,mlp-medium,mlp-large,mlp-xlarge")
@o.variant_option("single,simple_ddp,simple_ddp_async,pytorch_ddp")
@o.nproc_option("1,2")
@o.config_options(option_fields(), only=("steps", "global_batch", "backend"))
@g.bench_options()
@o.out_option("bench", "The folder the run folders go in (VARIANT-MODEL-nN-TAG).")
@o.outputs("one row per configuration", html="bench", progress=True)
def bench(outputs: Outputs, **parsed: Any) -> None:
    """The scaling benchmark: step and epoch time, communication time of the blocking
    variants, throughput, speedup, scaling efficiency and Amdahl's parallel fraction."""
    run("bench", outputs, parsed)


@cli.command(epilog=exits(""))
@click.argument("run_paths", metavar="[RUN]...", nargs=-1, type=o.FOLDER)
@o.model_option(None, "Parameters counted from its definition. ")
@g.memory_options()
@o.outputs("the estimates, or each run's ranks beside its estimate", progress=True)
def memory(outputs: Outputs, **parsed: Any) -> None:
    """Bytes per rank for DDP and ZeRO stages 1-3 (parameters, gradients, optimizer state) and
    communication per step, for --model or --model-path at --world-size; or, for recorded RUN
    folders, each rank's measured steady state beside the estimate."""
    run("memory", outputs, parsed)


@cli.command(epilog=exits(""))
@o.outputs("the variants and their properties")
def variants(outputs: Outputs) -> None:
    """The data-parallel variants `ddpprof record` runs (--variant), one line each."""
    run("variants", outputs)


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input is one line on stderr and exit 2; a failed run is one line and
    exit 1; a signal that stopped a recording is exit 128 + its number."""
    install()       # a stream that cannot encode a rule, an arrow or µ gets ASCII
    try:
        cli.main(args=argv, prog_name="ddpprof", standalone_mode=False)
    except (UsageError, click.UsageError) as error:
        _fail(error.format_message() if isinstance(error, click.UsageError) else str(error), 2)
    except Interrupted as error:
        _fail(str(error), error.exit_code)
    except (RunFailed, click.ClickException) as error:
        _fail(error.format_message() if isinstance(error, click.ClickException) else str(error),
              1)
    except MemoryError:
        _fail(out_of_memory(), 2)
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
    # one line, whatever a file name holds (a line break, an escape sequence)
    # (sys.stderr itself: click's own stderr writes UTF-8 to a stream that cannot take it)
    click.echo(f"{prefix}{terminal_text(without_secrets(message))}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
