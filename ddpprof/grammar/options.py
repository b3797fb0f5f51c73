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
import ipaddress
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import click

from ..core.limits import (
    MAX_BANDWIDTH_GBPS,
    MAX_DELAY_US,
    MAX_LATENCY_US,
    MAX_RANKS,
    MIN_BANDWIDTH_GBPS,
)
from ..core.numbers import ascii_decimal, ascii_whole
from ..core.units import GIB, KIB, MIB
from ..metrics.registry import suggestion
from ..render.output import Outputs
from ..trace.work_names import WORK_CLASSES
from ..variants import BUCKETED_VARIANT_NAMES, VARIANT_NAMES, VARIANTS_IN_ALL
from .params import FiniteFloat, Suggesting, Whole
from .params import ListOf as ListOf

F = TypeVar("F", bound=Callable[..., Any])
if TYPE_CHECKING:
    ParamType = click.ParamType[Any]
else:   # click before 8.2 has a ParamType that takes no type parameters at run time
    ParamType = click.ParamType
#: The bucket caps ``simulate`` predicts and ``sweep`` records unless told, in MiB.
WHAT_IF_CAPS_MIB = "1,2,5,10,25,50,100"


class RunName(ParamType):
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


class Endpoint(ParamType):
    """``HOST:PORT`` (``[v6-address]:PORT`` for IPv6), the port in 1-65535."""

    name = "host:port"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        host, _, port = str(value).rpartition(":")
        number = ascii_whole(port)
        if not _is_host(host) or number is None or not 1 <= number <= 65535:
            self.fail(f"{value!r} is not HOST:PORT with a port in 1-65535", param, ctx)
        return str(value)


_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_][A-Za-z0-9_-]{0,62})*\.?")


def _is_host(host: str) -> bool:
    """A host name or IPv4 address (dot-separated labels), or ``[IPv6 address]``: what
    torchrun's rendezvous accepts."""
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return False
        return True
    return _HOST_NAME.fullmatch(host) is not None


class InjectDelay(ParamType):
    """``RANK:MS``: a rank and a delay in milliseconds (finite, at least 0), kept as text."""

    name = "rank:ms"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        rank, _, ms = str(value).partition(":")
        number, delay = ascii_whole(rank), ascii_decimal(ms)
        if number is None or number < 0 or delay is None or not math.isfinite(delay) \
                or delay < 0:
            self.fail(f"{value!r} is not RANK:MS (a rank and a delay in ms, e.g. 1:20)",
                      param, ctx)
        return f"{number}:{delay:g}"


class WhatIf(ParamType):
    """A graph edit (``graph.whatif``), checked and kept as text: ``CLASS=PCT`` (``--faster``,
    0 ≤ PCT < 100), ``PCT`` (``--faster-network``) or ``RANK=US`` (``--rank-delay``: a rank
    below ``MAX_RANKS``, |US| ≤ ``MAX_DELAY_US``; the run's ranks:
    :func:`ddpprof.graph.whatif.check_rank_edits`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = {"faster": "class=pct", "faster-network": "pct"}.get(kind, "rank=us")

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        text = str(value).strip()
        target, _, amount_text = text.rpartition("=")
        amount = ascii_decimal(amount_text)
        if amount is None or (self.kind == "faster-network" and target):
            self.fail(f"{value!r} is not {self.name.upper()}", param, ctx)
        if not math.isfinite(amount):
            self.fail(f"{value!r}: not a finite number", param, ctx)
        if self.kind == "rank-delay":
            rank = ascii_whole(target)
            if rank is None or not 0 <= rank < MAX_RANKS:
                self.fail(f"{value!r}: RANK must be a rank number (digits 0-9)", param, ctx)
            if abs(amount) > MAX_DELAY_US:
                self.fail(f"{value!r}: a delay is at most {MAX_DELAY_US:g} µs either way",
                          param, ctx)
            return f"{rank}={amount_text.strip()}"
        if self.kind == "faster" and target.strip() not in WORK_CLASSES:
            self.fail(f"{value!r}: the class is one of {', '.join(WORK_CLASSES)}", param, ctx)
        if not 0 <= amount < 100:
            self.fail(f"{value!r}: the percentage must be in [0, 100)", param, ctx)
        return text


class ByteSize(ParamType):
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
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 30:
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


POSITIVE_INT = Whole(min=1)
NON_NEGATIVE_INT = Whole(min=0)
#: torch.manual_seed takes 64 bits, and the workloads derive seeds from it (seed + rank,
#: seed * 1,000,003 + batch index); 32 bits leave room for both.
SEED = Whole(min=0, max=2**32 - 1)
#: Calls or steps repeated at each point of a measurement (calibrate's ``--iters``, bench's
#: ``--repeats``): a million is beyond any use, and bounds the lists kept of them.
REPEATS = Whole(min=1, max=10**6)
NON_NEGATIVE_REPEATS = Whole(min=0, max=10**6)
POSITIVE_FLOAT = FiniteFloat(min=0, min_open=True)
NON_NEGATIVE_FLOAT = FiniteFloat(min=0)
#: ``--run-noise``: a part's run-to-run noise, % of it (the noise model squares it: beyond
#: 1,000 % it is no prior but a refusal to compare).
RUN_NOISE_PCT = FiniteFloat(min=0, max=1000)
#: ``calibrate --step-factor``: each size the previous one times it.
STEP_FACTOR = FiniteFloat(min=1, max=1024, min_open=True)
BANDWIDTH_GBPS = FiniteFloat(min=MIN_BANDWIDTH_GBPS, max=MAX_BANDWIDTH_GBPS)
LATENCY_US = FiniteFloat(min=0, max=MAX_LATENCY_US)
#: Timeouts end up in timedelta and in milliseconds as C integers: a week is plenty.
TIMEOUT_S = FiniteFloat(min=0, max=7 * 24 * 3600, min_open=True)
WORLD_SIZE = Whole(min=1, max=MAX_RANKS)
SHARED_CORES = Whole(min=0, max=MAX_RANKS)
FASTER, FASTER_NETWORK, RANK_DELAY = (WhatIf(kind) for kind in ("faster", "faster-network",
                                                               "rank-delay"))
#: A confidence level (``--significance``), strictly between 0 and 1.
LEVEL = FiniteFloat(min=0, max=1, min_open=True, max_open=True)
RUN_NAME = RunName()
ENDPOINT = Endpoint()
INJECT_DELAY = InjectDelay()
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

def list_option(*decls: str, item: ParamType, help: str, default: str | None = None,
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
    (``all`` is then every bucketed one, else every variant of ``VARIANTS_IN_ALL``)."""
    if bucketed:
        offered = everything = BUCKETED_VARIANT_NAMES
        note = ""
    else:
        offered, everything = VARIANT_NAMES, VARIANTS_IN_ALL
        left_out = [name for name in VARIANT_NAMES if name not in VARIANTS_IN_ALL]
        note = f"; all is every variant but the tensor-parallel {', '.join(left_out)}"
    return list_option("--variant", "variants",
                       item=Suggesting(VARIANT_NAMES, "variant", "`ddpprof variants`"),
                       everything=everything, default=default, metavar="VARIANT",
                       aliases=("--variants",),
                       help=f"all, or of: {', '.join(offered)} (`ddpprof variants`){note}.")


def model_option(default: str | None, what: str = "") -> Callable[[F], F]:
    # the workloads: torchrun's side, off the analysis's start
    from workloads.configs import MODEL_NAMES

    return list_option("--model", "models", item=click.STRING, default=default,
                       metavar="MODEL", aliases=("--models",),
                       help=f"{what}One of: {', '.join(MODEL_NAMES)}.")


def unknown_model(model: str) -> str:
    """What to say of a model name that is not one of ``workloads.configs.MODEL_NAMES``: the
    closest one, and where the names are."""
    # the workloads: torchrun's side, off the analysis's start
    from workloads.configs import MODEL_NAMES

    return (f"unknown model {model!r}{suggestion(model, MODEL_NAMES)}; one of "
            f"{', '.join(MODEL_NAMES)}, or give --model-path")


def nproc_option(default: str) -> Callable[[F], F]:
    return list_option("--nproc", "nprocs", item=POSITIVE_INT, default=default, sort=True,
                       metavar="N", help="Ranks per node.")


def bucket_cap_option(default: str, help: str) -> Callable[[F], F]:
    return list_option("--bucket-cap-mib", "bucket_caps_mib", item=POSITIVE_FLOAT, sort=True,
                       default=default, metavar="MIB", aliases=("--bucket-cap-mb",),
                       help=help)


def out_option(default: str, help: str) -> Callable[[F], F]:
    return click.option("--out", "-o", "out", type=FOLDER, default=Path(default),
                        show_default=True, help=help)


def outputs(json: str, table: bool = True, html: str | None = None,
            progress: bool = False) -> Callable[[F], F]:
    """``--json`` (``json`` names what it holds), and with ``table`` ``--csv``,
    ``--markdown`` and ``--wide``; ``--html``/``--html-out`` with ``html`` (the page's default
    name under ``reports/``); ``--quiet`` with ``progress``. The command gets them as one
    ``outputs`` argument (``ddpprof.render.output.Outputs``)."""
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
        chosen.append(click.option("--quiet", "-q", "quiet", is_flag=True,
                                   help="No progress display (none under CI=true, or when "
                                        "standard error is not a terminal)."))

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_outputs(*args: Any, json_file: Path | None = None,
                         csv_file: Path | None = None, markdown_file: Path | None = None,
                         wide: bool = False, html: bool = False, html_file: Path | None = None,
                         quiet: bool = False, **kwargs: Any) -> Any:
            return command(*args, outputs=Outputs(json_file, csv_file, markdown_file,
                                                  html or html_file is not None, html_file,
                                                  wide, quiet), **kwargs)

        for option in reversed(chosen):
            with_outputs = option(with_outputs)
        return with_outputs  # type: ignore[return-value]

    return decorate


def keep_last_step_option() -> Callable[[F], F]:
    """``--keep-last-step``: the analyzed window (``ddpprof.trace.last_step.LastStep``)."""
    return click.option("--keep-last-step", is_flag=True,
                        help="Analyze the last ProfilerStep too (HTA drops it by default).")


def run_noise_option() -> Callable[[F], F]:
    """``--run-noise PCT``: the prior of ``ddpprof.diff.noise`` for another machine."""
    return click.option("--run-noise", "run_noise_pct", type=RUN_NOISE_PCT,
                        metavar="PCT",
                        help="Run-to-run noise of a recording's mean, % of each part, for "
                             "this machine, taken to hold for every run [default: 26.2, "
                             "measured on a shared 2-core CPU machine, for gloo CPU runs on "
                             "2 host cores only; see docs/diff.md#noise].")


def world_size_option(help: str) -> Callable[[F], F]:
    return list_option("--world-size", "world_sizes", item=WORLD_SIZE, sort=True, metavar="N",
                       help=help)


def config_options(fields: Sequence[dataclasses.Field[Any]], only: Iterable[str],
                   **defaults: Any) -> Callable[[F], F]:
    """Click options generated from dataclass fields declared with ``help``/``type``/``flag``
    metadata (``ddpprof.run.config.option``): ``--field-name``, its type, the field's default
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


def exits(one: str) -> str:
    """A command's exit statuses, for its help (``one``: what exit status 1 means)."""
    return (f"Exit status: 0 done; 1 {one}; 2 bad input (one line on stderr, nothing run)."
            if one else "Exit status: 0 done; 2 bad input (one line on stderr).")
