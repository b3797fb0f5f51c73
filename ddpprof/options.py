"""The command-line grammar, defined once: parameter types, and the options several commands
share, so that one concept has one option, one type and one multiplicity everywhere.

* Every type rejects a bad value while the command line is parsed, before anything runs: click
  reports it as one line naming the option, and ``ddpprof`` exits 2. Numbers are finite
  (``nan`` and ``inf`` are refused) and in range.
* A list option (``--variant``, ``--model``, ``--nproc``, ``--bucket-cap-mib``,
  ``--world-size``, ...) takes one value or a comma-separated list, and may be repeated:
  ``--nproc 1,2 --nproc 4`` is ``1, 2, 4``. An empty list is refused.
* Outputs: ``--json FILE|-`` (the full result, with ``schema`` and ``version``), ``--csv
  FILE|-`` and ``--markdown FILE|-`` (the table), ``--html`` (the page, under ``reports/``)
  or ``--html-out FILE``; ``-`` is standard output, which then carries only that file.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import click

from .units import GIB, KIB, MIB

F = TypeVar("F", bound=Callable[..., Any])
#: The bucket caps ``simulate`` predicts and ``sweep`` records unless told, in MiB.
WHAT_IF_CAPS_MIB = "1,2,5,10,25,50,100"


class FiniteFloat(click.ParamType):
    """A finite float in ``[min, max]``; ``min_open``/``max_open`` exclude the bound."""

    name = "number"

    def __init__(self, min: float | None = None, max: float | None = None,
                 min_open: bool = False, max_open: bool = False) -> None:
        self.min, self.max, self.min_open, self.max_open = min, max, min_open, max_open

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.min is not None and (number < self.min or (self.min_open and number == self.min)):
            self.fail(f"{value!r} is not {self._range()}", param, ctx)
        if self.max is not None and (number > self.max or (self.max_open and number == self.max)):
            self.fail(f"{value!r} is not {self._range()}", param, ctx)
        return number

    def _range(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f"{'>' if self.min_open else '>='} {self.min:g}")
        if self.max is not None:
            parts.append(f"{'<' if self.max_open else '<='} {self.max:g}")
        return " and ".join(parts)

    def __repr__(self) -> str:
        return f"FiniteFloat({self._range()})"


class ListOf(click.ParamType):
    """One value or a comma-separated list, each checked by ``item``. ``everything``: what
    ``all`` stands for (``--variant all``)."""

    name = "list"

    def __init__(self, item: click.ParamType, everything: Sequence[str] | None = None) -> None:
        self.item, self.everything = item, everything

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> list[Any]:
        if isinstance(value, list):
            return value
        parts = [part.strip() for part in str(value).split(",") if part.strip()]
        if not parts:
            self.fail(f"{value!r}: expected a value, or several separated by commas", param,
                      ctx)
        if self.everything is not None and parts == ["all"]:
            return list(self.everything)
        return [self.item.convert(part, param, ctx) for part in parts]

    def __repr__(self) -> str:
        return f"ListOf({self.item!r})"


class RunName(click.ParamType):
    """One path component: a run folder's name under ``--out``. Not empty, no separator, not
    ``.`` or ``..``, not hidden (analyze skips folders whose name starts with a dot), and no
    control character (a newline in a name would break every table it is printed in)."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        name = str(value)
        separators = {os.sep, os.altsep or os.sep, "\0"}
        if not name or name in (".", ".."):
            self.fail(f"{name!r} is not a folder name", param, ctx)
        if any(s in name for s in separators):
            self.fail(f"{name!r} must be one folder name, without {os.sep!r}", param, ctx)
        if name.startswith("."):
            self.fail(f"{name!r}: a name starting with '.' is hidden from analyze", param, ctx)
        if not name.isprintable():
            self.fail(f"{name!r}: a name must not hold control characters", param, ctx)
        return name


class Endpoint(click.ParamType):
    """``HOST:PORT`` (``[v6-address]:PORT`` for IPv6), the port in 1-65535."""

    name = "host:port"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        host, _, port = str(value).rpartition(":")
        if not host.strip("[]") or not port.isdigit() or not 1 <= int(port) <= 65535:
            self.fail(f"{value!r} is not HOST:PORT with a port in 1-65535", param, ctx)
        return str(value)


class ByteSize(click.ParamType):
    """A size in bytes, as nccl-tests writes them: ``4096``, ``4K``, ``256M``, ``1G`` (binary:
    K = 1024 bytes), at least ``min`` bytes."""

    name = "size"
    _UNITS: ClassVar[dict[str, int]] = {"": 1, "K": KIB, "M": MIB, "G": GIB}

    def __init__(self, min: int = 1) -> None:
        self.min = min

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper().removesuffix("IB").removesuffix("B")
        unit = text[-1:] if text[-1:] in ("K", "M", "G") else ""
        digits = text[:len(text) - len(unit)]
        if not digits.isdigit() or len(digits) > 30:
            self.fail(f"{value!r} is not a size in bytes (4096, 4K, 256M, 1G)", param, ctx)
        size = int(digits) * self._UNITS[unit]
        if size < self.min:
            self.fail(f"{value!r} is less than {self.min} bytes", param, ctx)
        return size


class Option(click.Option):
    """A click option that also answers to deprecated spellings, kept out of ``--help``
    (``--bucket-cap-mb`` for ``--bucket-cap-mib``)."""

    def __init__(self, *args: Any, aliases: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aliases = tuple(aliases)

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        shown = self.opts
        self.opts = [*shown, *self.aliases]
        try:
            super().add_to_parser(parser, ctx)
        finally:
            self.opts = shown


POSITIVE_INT = click.IntRange(min=1)
NON_NEGATIVE_INT = click.IntRange(min=0)
#: torch.manual_seed takes 64 bits, and the workloads derive seeds from it (seed + rank,
#: seed * 1,000,003 + batch index); 32 bits leave room for both.
SEED = click.IntRange(min=0, max=2**32 - 1)
POSITIVE_FLOAT = FiniteFloat(min=0, min_open=True)
NON_NEGATIVE_FLOAT = FiniteFloat(min=0)
#: Timeouts end up in timedelta and in milliseconds as C integers: a week is plenty.
TIMEOUT_S = FiniteFloat(min=0, max=7 * 24 * 3600, min_open=True)
#: A world size beyond any real cluster is bad input, not a question.
WORLD_SIZE = click.IntRange(min=1, max=1 << 20)
RUN_NAME = RunName()
ENDPOINT = Endpoint()
OUTPUT = click.Path(path_type=Path, allow_dash=True)
FOLDER = click.Path(path_type=Path)


def check_run_name(name: str) -> str | None:
    """Why ``name`` cannot be a run folder's name, or None when it can."""
    try:
        RUN_NAME.convert(name, None, None)
    except click.BadParameter as error:
        return error.message
    return None


# --- options shared by several commands -----------------------------------------------------

def list_option(*decls: str, item: click.ParamType, help: str, default: str | None = None,
                everything: Sequence[str] | None = None, sort: bool = False,
                metavar: str = "X[,X...]", aliases: Sequence[str] = ()
                ) -> Callable[[F], F]:
    """A repeatable option taking one value or a comma list (see the module docstring); the
    command gets a list without duplicates, sorted when ``sort``; ``[]`` when it is not given
    and has no ``default``."""

    def join(ctx: click.Context, param: click.Parameter, value: Iterable[list[Any]]
             ) -> list[Any]:
        unique = list(dict.fromkeys(v for chunk in value or () for v in chunk))
        return sorted(unique) if sort else unique

    return click.option(*decls, cls=Option, type=ListOf(item, everything), multiple=True,
                        default=(default,) if default is not None else None,
                        show_default=default is not None, metavar=metavar, callback=join,
                        help=help + " Repeatable, or comma-separated.", aliases=aliases)


def variant_option(default: str, bucketed: bool = False) -> Callable[[F], F]:
    """``--variant``: any of the registry's variants, or with ``bucketed`` those with buckets
    (``all`` is then every bucketed one)."""
    from .variants import BUCKETED_VARIANT_NAMES, VARIANT_NAMES

    offered = BUCKETED_VARIANT_NAMES if bucketed else VARIANT_NAMES
    return list_option("--variant", "variants", item=click.Choice(VARIANT_NAMES),
                       everything=offered, default=default, metavar="VARIANT",
                       aliases=("--variants",),
                       help=f"all, or of: {', '.join(offered)} (`ddpprof variants`).")


def model_option(default: str | None, what: str = "") -> Callable[[F], F]:
    from workloads.configs import MODEL_NAMES

    return list_option("--model", "models", item=click.STRING, default=default,
                       metavar="MODEL", aliases=("--models",),
                       help=f"{what}One of: {', '.join(MODEL_NAMES)}.")


def nproc_option(default: str) -> Callable[[F], F]:
    return list_option("--nproc", "nprocs", item=POSITIVE_INT, default=default, sort=True,
                       metavar="N", help="Ranks per node.")


def bucket_cap_option(default: str, help: str) -> Callable[[F], F]:
    return list_option("--bucket-cap-mib", "bucket_caps_mib", item=POSITIVE_FLOAT, sort=True,
                       default=default, metavar="MIB", aliases=("--bucket-cap-mb",),
                       help=help)


def out_option(default: str, help: str) -> Callable[[F], F]:
    return click.option("--out", type=FOLDER, default=Path(default), show_default=True,
                        help=help)


def outputs(json: str, table: bool = True, html: str | None = None,
            progress: bool = False) -> Callable[[F], F]:
    """``--json`` (``json`` names what it holds), and with ``table`` ``--csv``,
    ``--markdown`` and ``--wide``; ``--html``/``--html-out`` with ``html`` (the page's default
    name under ``reports/``); ``--quiet`` with ``progress``. The command gets them as one
    ``outputs`` argument (``ddpprof.report.output.Outputs``)."""
    chosen = [click.option("--json", "json_file", type=OUTPUT, metavar="FILE|-",
                           help=f"Write {json} as JSON (- for standard output).")]
    if table:
        chosen += [
            click.option("--csv", "csv_file", type=OUTPUT, metavar="FILE|-",
                         help="Write the table, every column, as CSV (- for standard output)."),
            click.option("--markdown", "markdown_file", type=OUTPUT, metavar="FILE|-",
                         help="Write the table as Markdown (- for standard output)."),
            click.option("--wide", is_flag=True,
                         help="Print every column (the default fits 100 columns).")]
    if html is not None:
        chosen += [
            click.option("--html", "html", is_flag=True,
                         help=f"Write the self-contained HTML page to reports/{html}.html."),
            click.option("--html-out", "html_file", type=OUTPUT, metavar="FILE",
                         help="Write the HTML page to FILE instead.")]
    if progress:
        chosen.append(click.option("--quiet", is_flag=True,
                                   help="No progress display (none under CI=true, or when "
                                        "standard error is not a terminal)."))

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_outputs(*args: Any, json_file: Path | None = None,
                         csv_file: Path | None = None, markdown_file: Path | None = None,
                         wide: bool = False, html: bool = False, html_file: Path | None = None,
                         quiet: bool = False, **kwargs: Any) -> Any:
            from .report.output import Outputs

            return command(*args, outputs=Outputs(json_file, csv_file, markdown_file,
                                                  html or html_file is not None, html_file,
                                                  wide, quiet), **kwargs)

        for option in reversed(chosen):
            with_outputs = option(with_outputs)
        return with_outputs  # type: ignore[return-value]

    return decorate


def keep_last_step_option() -> Callable[[F], F]:
    """``--keep-last-step``: the analyzed window (``ddpprof.analysis.options.LastStep``)."""
    return click.option("--keep-last-step", is_flag=True,
                        help="Analyze the last ProfilerStep too (HTA drops it by default).")


def world_size_option(help: str) -> Callable[[F], F]:
    return list_option("--world-size", "world_sizes", item=WORLD_SIZE, sort=True, metavar="N",
                       help=help)


def config_options(fields: Sequence[dataclasses.Field[Any]], only: Iterable[str],
                   **defaults: Any) -> Callable[[F], F]:
    """Click options generated from dataclass fields declared with ``help``/``type``/``flag``
    metadata (``ddpprof.record.config.option``): ``--field-name``, its type, the field's default
    (or the one given here) and its help. ``only`` picks and orders the fields."""
    by_name = {f.name: f for f in fields}
    chosen = [by_name[name] for name in only]

    def decorate(command: F) -> F:
        for f in reversed(chosen):
            meta, flag = f.metadata, "--" + f.name.replace("_", "-")
            default = defaults.get(f.name, f.default)
            if meta["flag"]:
                command = click.option(flag, is_flag=True, default=default,
                                       help=meta["help"])(command)
            else:
                command = click.option(flag, type=meta["type"], default=default,
                                       show_default=default is not None,
                                       help=meta["help"])(command)
        return command

    return decorate


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
        click.option("--step-factor", default=2.0, show_default=True,
                     type=FiniteFloat(min=1, min_open=True),
                     help="Each size is the previous one times this."),
        click.option("--warmup-iters", default=5, show_default=True, type=NON_NEGATIVE_INT,
                     help="Untimed calls per size."),
        click.option("--iters", default=20, show_default=True, type=POSITIVE_INT,
                     help="Timed calls per size (their median is the size's time)."))


def cost_model_options() -> Callable[[F], F]:
    """Where ``simulate`` takes its cost model and its measured points from."""
    return _stack(
        click.option("--calibration", type=FOLDER,
                     help="A `ddpprof calibrate` file [default: calibration.json in the run "
                          "folder or its parent, else a fit over the run's collectives, else "
                          "a sweep now]."),
        click.option("--bandwidth-gbps", type=POSITIVE_FLOAT,
                     help="Use this bus bandwidth (GB/s) instead of a calibration or fit."),
        click.option("--latency-us", type=NON_NEGATIVE_FLOAT,
                     help="Use this per-call latency (µs) instead of a calibration or fit."),
        click.option("--shared-cores", type=POSITIVE_INT, metavar="C",
                     help="Every rank, at any world size, shares these C cores (the ranks of a "
                          "CPU run on one host): where the ranks' threads outnumber them, all "
                          "work slows in proportion. [default: each rank brings its own]"),
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
        click.option("--engine", type=click.Choice(["native", "hta"]), default="native",
                     show_default=True,
                     help="hta: HolisticTraceAnalysis computes the GPU shares."),
        keep_last_step_option(),
        click.option("--critical-path", is_flag=True,
                     help="Also each step's critical path across ranks (see `ddpprof "
                          "critical-path`)."),
        click.option("--jobs", type=POSITIVE_INT, help="Ranks analyzed in parallel."),
        click.option("--scheduler", envvar="DDPPROF_SCHEDULER", metavar="ADDRESS",
                     help="Analyze the ranks on this Dask cluster (tcp://host:8786) [env: "
                          "DDPPROF_SCHEDULER]; the workers read the traces."))


def edit_options(each: str) -> Callable[[F], F]:
    """The graph edits ``critical-path`` and ``simulate`` replay (``ddpprof.graph.whatif``);
    ``each`` says what one of them gives."""
    return _stack(
        click.option("--faster", multiple=True, metavar="CLASS=PCT",
                     help="Replay with the work of CLASS (gemm or compute) PCT % shorter, e.g. "
                          f"gemm=20. Repeatable: {each}."),
        click.option("--faster-network", multiple=True, metavar="PCT",
                     help=f"Replay with every collective's transfer PCT % shorter. Repeatable: "
                          f"{each}."),
        click.option("--rank-delay", multiple=True, metavar="RANK=US",
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
                                             "configuration become their median."))


def bench_options() -> Callable[[F], F]:
    """``bench``'s repetitions, warm-up and profiled run."""
    return _stack(
        click.option("--repeats", default=3, show_default=True, type=POSITIVE_INT,
                     help="Timed runs per configuration, interleaved."),
        click.option("--warmup-steps", default=2, show_default=True, type=NON_NEGATIVE_INT,
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


def exits(one: str) -> str:
    """A command's exit statuses, for its help (``one``: what exit status 1 means)."""
    return (f"Exit status: 0 done; 1 {one}; 2 bad input (one line on stderr, nothing run)."
            if one else "Exit status: 0 done; 2 bad input (one line on stderr).")
