"""One table, three renderings: aligned text for terminals (rich), Markdown and CSV.

A :class:`Table` is typed rows and the columns to show; the module that owns the rows defines
the columns, once. Everything a table prints is escaped for where it goes: a control character
(or a bidirectional override) never reaches a terminal, a Markdown cell holds no line break,
no ``|`` and no ``<`` (so no ``<!--`` can hide the rows after it in a PR comment), and a CSV
cell that a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``, tab, CR) starts
with ``'``.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

#: What a cell holds.
Cell = str | int | float | bool | None
#: Control characters, line and paragraph separators, and the bidirectional formatting
#: characters that can make text read otherwise than it is stored ("Trojan Source").
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e"
                      r"\u2066-\u2069]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Column:
    key: str                        # the row's attribute (or key), and the CSV header
    header: str = ""                # what the terminal and Markdown show [default: key]
    wide: bool = False              # shown only under --wide (CSV has every column)
    max_width: int | None = None    # the terminal folds longer cells
    scale: float = 1.0              # shown divided by this (bytes as MiB); CSV keeps the value

    @property
    def title(self) -> str:
        return self.header or self.key


@dataclass(frozen=True)
class Table:
    columns: Sequence[Column]
    rows: Sequence[object]          # dataclasses or Structs (or mappings) with those keys
    title: str | None = None

    def shown(self, wide: bool) -> list[Column]:
        return [c for c in self.columns if wide or not c.wide]

    def value(self, row: object, key: str) -> Cell:
        if isinstance(row, Mapping):
            return row.get(key)
        value: Cell = getattr(row, key, None)
        return value

    def shown_value(self, row: object, column: Column) -> Cell:
        value = self.value(row, column.key)
        if column.scale != 1 and isinstance(value, int | float) and not isinstance(value, bool):
            return value / column.scale
        return value


def columns(*keys: str, wide: Sequence[str] = ()) -> list[Column]:
    """Columns named by their keys; those in ``wide`` only under ``--wide``."""
    return [Column(key) for key in keys] + [Column(key, wide=True) for key in wide]


def format_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:,.2f}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)


def terminal_text(text: str) -> str:
    """``text`` with control characters written as escapes (``\\n``), for a terminal."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def markdown_text(text: str) -> str:
    """``text`` safe in a Markdown table cell or paragraph: one line, ``|`` escaped, and no
    HTML (``<`` as ``&lt;``, so neither a tag nor a comment opener)."""
    text = _CONTROL.sub(" ", text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")


def csv_cell(value: Any) -> Any:
    """A value CSV can carry safely: text a spreadsheet would run as a formula gets a
    leading ``'``."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


#: The most rows a table prints on a terminal (a file can list ten thousand process groups:
#: ``--json``, ``--csv`` and ``--markdown`` hold every one).
MAX_TERMINAL_ROWS = 500


def to_text(table: Table, wide: bool = False, terminal: bool = False) -> str:
    """The table aligned for a terminal (numbers right-aligned); ``terminal``: bold headers.
    At most ``MAX_TERMINAL_ROWS`` rows, then a line saying how many more there are."""
    from rich import box
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    shown = table.shown(wide)
    more = len(table.rows) - MAX_TERMINAL_ROWS
    cells = [[table.shown_value(row, c) for c in shown]
             for row in table.rows[:MAX_TERMINAL_ROWS]]
    rich = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                     collapse_padding=True, header_style="bold" if terminal else "",
                     title=table.title, title_justify="left")
    for index, column in enumerate(shown):
        numeric = bool(cells) and all(isinstance(r[index], int | float) or r[index] is None
                                      for r in cells)
        rich.add_column(Text(column.title), justify="right" if numeric else "left",
                        max_width=None if wide else column.max_width, overflow="fold")
    for row in cells:
        rich.add_row(*(Text(terminal_text(format_cell(v))) for v in row))
    buffer = io.StringIO()
    Console(file=buffer, width=100_000, color_system="standard" if terminal else None,
            highlight=False, emoji=False).print(rich)
    text = "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"
    if more > 0:
        text += f"... and {more:,} more rows (--json, --csv or --markdown lists them all)\n"
    return text


def to_markdown(table: Table, wide: bool = True) -> str:
    shown = table.shown(wide)
    lines = ["| " + " | ".join(markdown_text(c.title) for c in shown) + " |",
             "|" + " --- |" * len(shown)]
    lines += ["| " + " | ".join(markdown_text(format_cell(table.shown_value(row, c)))
                                for c in shown) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """Every column, keys as headers, values as they are (not rounded, not scaled)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([c.key for c in table.columns])
    for row in table.rows:
        writer.writerow([csv_cell(table.value(row, c.key)) for c in table.columns])
    return buffer.getvalue()


def template_environment(html: bool) -> Any:
    """jinja2 over the templates shipped in the package; HTML ones are autoescaped."""
    import jinja2  # only templates need it: keep it off the CLI's start-up

    loader = jinja2.FunctionLoader(
        lambda name: resources.files("ddpprof").joinpath("templates", name).read_text())
    environment = jinja2.Environment(loader=loader, autoescape=html, keep_trailing_newline=True)
    environment.filters["cell"] = lambda v: markdown_text(format_cell(v))
    return environment
