"""The parameter types of the command line that are not about one concept: whole numbers and
finite floats written in ASCII digits, comma-separated lists, choices that suggest the name
meant. :mod:`ddpprof.grammar.options` builds the shared options on them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from ..core.numbers import ascii_decimal, ascii_whole
from ..metrics.registry import suggestion

if TYPE_CHECKING:
    ParamType = click.ParamType[Any]
else:   # click before 8.2 has a ParamType that takes no type parameters at run time
    ParamType = click.ParamType


class Whole(click.IntRange):
    """A whole number in ``[min, max]``, written in ASCII digits (see :func:`ascii_whole`)."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str) and ascii_whole(value) is None:
            self.fail(f"{value!r} is not a whole number (digits 0-9)", param, ctx)
        return super().convert(value, param, ctx)


class FiniteFloat(ParamType):
    """A finite float in ``[min, max]``; ``min_open``/``max_open`` exclude the bound. Text must
    be a number written in ASCII (see :func:`ascii_decimal`)."""

    name = "number"

    def __init__(self, min: float | None = None, max: float | None = None,
                 min_open: bool = False, max_open: bool = False) -> None:
        self.min, self.max, self.min_open, self.max_open = min, max, min_open, max_open

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        try:
            number = ascii_decimal(value) if isinstance(value, str) else float(value)
        except (TypeError, ValueError, OverflowError):
            number = None
        if number is None:
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


class ListOf(ParamType):
    """One value or a comma-separated list, each checked by ``item``. ``everything``: what
    ``all`` stands for (``--variant all``)."""

    name = "list"

    def __init__(self, item: ParamType, everything: Sequence[str] | None = None) -> None:
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


class Suggesting(click.Choice):  # type: ignore[type-arg]  # click 8.1's Choice is not generic
    """A choice that answers a mistyped value with the closest one (``did you mean``) and
    where the whole list is, rather than printing the list."""

    def __init__(self, choices: Sequence[str], what: str, listed_by: str = "") -> None:
        super().__init__(choices)
        self.what, self.listed_by = what, listed_by

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if value in self.choices:
            return value

        close = suggestion(str(value), [str(c) for c in self.choices])
        where = (f"; {self.listed_by} lists them" if self.listed_by
                 else f"; one of: {', '.join(map(str, self.choices))}")
        self.fail(f"{value!r} is not a {self.what}{close}{where}", param, ctx)
