"""Click parameter types for every command's options, defined once.

Each type rejects a bad value while the command line is parsed, before anything runs: click
reports it as one line naming the option, and ``ddpprof`` exits 2. Numbers are finite (``nan``
and ``inf`` are refused) and in range; names, endpoints and comma-separated lists are checked
the same way.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import click


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
        except (TypeError, ValueError):
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


class NumberList(click.ParamType):
    """Comma-separated numbers of one type (``1,2,5``), each checked by ``item``; the result is
    sorted with duplicates removed."""

    name = "list"

    def __init__(self, item: click.ParamType) -> None:
        self.item = item

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> list:
        if isinstance(value, list):
            return value
        parts = [part.strip() for part in str(value).split(",") if part.strip()]
        if not parts:
            self.fail(f"{value!r}: expected numbers separated by commas", param, ctx)
        return sorted({self.item.convert(part, param, ctx) for part in parts})


class RunName(click.ParamType):
    """One path component: a run folder's name under ``--out``. Not empty, no separator, not
    ``.`` or ``..``, and not hidden (analyze skips folders whose name starts with a dot)."""

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
    _UNITS: ClassVar[dict[str, int]] = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}

    def __init__(self, min: int = 1) -> None:
        self.min = min

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper().removesuffix("IB").removesuffix("B")
        unit = text[-1:] if text[-1:] in ("K", "M", "G") else ""
        digits = text[:len(text) - len(unit)]
        if not digits.isdigit():
            self.fail(f"{value!r} is not a size in bytes (4096, 4K, 256M, 1G)", param, ctx)
        size = int(digits) * self._UNITS[unit]
        if size < self.min:
            self.fail(f"{value!r} is less than {self.min} bytes", param, ctx)
        return size


POSITIVE_INT = click.IntRange(min=1)
NON_NEGATIVE_INT = click.IntRange(min=0)
#: torch.manual_seed takes 64 bits, and the workloads derive seeds from it (seed + rank,
#: seed * 1,000,003 + batch index); 32 bits leave room for both.
SEED = click.IntRange(min=0, max=2**32 - 1)
POSITIVE_FLOAT = FiniteFloat(min=0, min_open=True)
NON_NEGATIVE_FLOAT = FiniteFloat(min=0)
#: Timeouts end up in timedelta and in milliseconds as C integers: a week is plenty.
TIMEOUT_S = FiniteFloat(min=0, max=7 * 24 * 3600, min_open=True)
POSITIVE_INT_LIST = NumberList(POSITIVE_INT)
POSITIVE_FLOAT_LIST = NumberList(POSITIVE_FLOAT)
RUN_NAME = RunName()
ENDPOINT = Endpoint()


def check_run_name(name: str) -> str | None:
    """Why ``name`` cannot be a run folder's name, or None when it can."""
    try:
        RUN_NAME.convert(name, None, None)
    except click.BadParameter as error:
        return error.message
    return None


def config_options(fields: Sequence[dataclasses.Field], only: Iterable[str] | None = None,
                   **defaults: Any) -> Callable[[Callable], Callable]:
    """Click options generated from dataclass fields declared with ``help``/``type``/``flag``
    metadata (``ddpprof.record.config.option``): ``--field-name``, its type, the field's default
    (or the one given here) and its help. ``only`` picks and orders the fields."""
    by_name = {f.name: f for f in fields}
    chosen = [by_name[name] for name in only] if only is not None else list(fields)

    def decorate(command: Callable) -> Callable:
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
