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
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..core.units import GIB, KIB, MIB

#: What a cell holds.
Cell = str | int | float | bool | None
#: Control characters, line and paragraph separators, and the bidirectional formatting
#: characters that can make text read otherwise than it is stored ("Trojan Source").
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e"
                      r"\u2066-\u2069]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Column:
    key: str                        # the name: the header everywhere (terminal, Markdown, CSV)
    attr: str = ""                  # the row's attribute (or key) it shows [default: key]
    wide: bool = False              # shown only under --wide (CSV has every column)
    max_width: int | None = None    # where the table is too wide, longer cells wrap first
    scale: float = 1.0              # shown divided by this (bytes as MiB; the key says so)

    @property
    def title(self) -> str:
        return self.key

    @property
    def source(self) -> str:
        return self.attr or self.key


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
        value = self.value(row, column.source)
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


def counted(count: int, noun: str) -> str:
    """``1 rank``, ``2 ranks``."""
    return f"{count} {noun}{'s' * (count != 1)}"


def format_bytes(size: float) -> str:
    """Bytes in the largest binary unit that keeps a whole number in front: 5.58 MiB."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(size) >= scale:
            return f"{size / scale:,.2f} {unit}"
    return f"{size:,.0f} B"


def format_value(value: Any, unit: str) -> str:
    """A figure with its unit, as a person reads it: ``5.58 MiB``, ``12.3%``, ``1.50×``."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, str | bool) or not isinstance(value, int | float):
        return str(value)
    if unit == "B":
        return format_bytes(value)
    if unit == "%":
        return f"{value:,.1f}%"
    if unit == "pp":
        return f"{value:,.1f} points"
    if unit == "x":
        return f"{value:,.2f}×"
    text = f"{value:,}" if isinstance(value, int) else format_cell(value)
    return f"{text} {unit}" if unit else text


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


#: The width a table or paragraph is fitted to when the terminal's is unknown.
DEFAULT_WIDTH = 100
#: Narrower than this, nothing fits anyway: lay out for this many columns.
MIN_WIDTH = 40
_GAP = 2                            # spaces between two columns
#: Where a cell or a header may break: after a space, a separator or an underscore.
_BREAKS = re.compile(r"(?<=[\s/,_-])")
#: Where prose may break: after a space or a hyphen (never inside a name_with_underscores).
_PROSE_BREAKS = re.compile(r"(?<=[\s-])")
#: A number as a cell shows it (``-5,459.42``): never broken.
_NUMBER = re.compile(r"[-+]?[\d,]*\.?\d+")


def terminal_width() -> int:
    """``COLUMNS`` when set, else the width of the terminal standard output is, else
    :data:`DEFAULT_WIDTH` (a pipe, a file, CI)."""

    return max(MIN_WIDTH, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def wrap(text: str, width: int, indent: str = "", prose: bool = False) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken only at spaces and after
    ``/ , _ -`` (``prose``: at spaces and after hyphens), never inside a word (a word longer
    than the line has a line of its own); lines after the first start with ``indent``."""
    if _NUMBER.fullmatch(text):
        return [text]
    lines: list[str] = []
    line = ""
    for piece in (p for p in (_PROSE_BREAKS if prose else _BREAKS).split(text) if p):
        limit = width - (len(indent) if lines else 0)
        if line and len(line) + len(piece.rstrip()) > limit:
            lines.append(line.rstrip())
            line = piece.lstrip()
        else:
            line += piece
    lines.append(line.rstrip())
    return [lines[0], *(indent + rest for rest in lines[1:])]


def _longest_piece(text: str) -> int:
    """The widest a column holding ``text`` can be made: its longest unbreakable part."""
    if _NUMBER.fullmatch(text):
        return len(text)
    return max((len(p.rstrip()) for p in _BREAKS.split(text) if p.strip()), default=0)


def _fit(headers: list[str], cells: list[list[str]], numeric: list[bool],
         max_widths: list[int | None], width: int) -> list[int] | None:
    """Each column's width so that the table fits ``width``: numbers never wrap, text and
    headers wrap at word boundaries down to their longest word; None when even that does not
    fit."""
    natural, least = [], []
    for k, header in enumerate(headers):
        content = [row[k] for row in cells]
        longest = max((len(c) for c in content), default=0)
        floor = max([_longest_piece(header),
                     *(len(c) if numeric[k] else _longest_piece(c) for c in content)])
        natural.append(max(len(header), longest))
        least.append(floor)
    widths = list(natural)
    if sum(widths) + _GAP * (len(widths) - 1) > width:   # first, long text to its own width
        widths = [max(min(w, cap), floor) if cap is not None and not number else w
                  for w, cap, floor, number in zip(widths, max_widths, least, numeric,
                                                   strict=True)]
    excess = sum(widths) + _GAP * (len(widths) - 1) - width
    while excess > 0:
        # the first column (what names the row) keeps its width longest; of the others, the
        # one with the most room gives a character
        room = [(k > 0, widths[k] - least[k], k) for k in range(len(widths))
                if widths[k] > least[k]]
        if not room:
            return None
        *_, widest = max(room)
        widths[widest] -= 1
        excess -= 1
    return widths


#: The most rows a table prints on a terminal (a file can list ten thousand process groups:
#: ``--json``, ``--csv`` and ``--markdown`` hold every one).
MAX_TERMINAL_ROWS = 500


def to_text(table: Table, wide: bool = False, terminal: bool = False,
            width: int | None = None) -> str:
    """The table aligned for a terminal ``width`` wide (:func:`terminal_width`): numbers
    right-aligned, text and headers wrapped at word boundaries. Columns that do not fit are
    left out, and said so; with ``wide`` every column is shown, as a table of one row per
    column where the table itself does not fit. ``terminal``: bold headers. At most
    ``MAX_TERMINAL_ROWS`` rows, then a line saying how many more there are."""
    width = width or terminal_width()
    shown = table.shown(wide)
    more = len(table.rows) - MAX_TERMINAL_ROWS
    if more > 0:
        table = Table(table.columns, table.rows[:MAX_TERMINAL_ROWS], table.title)
    values = [[table.shown_value(row, c) for c in shown] for row in table.rows]
    cells = [[terminal_text(format_cell(v)) for v in row] for row in values]
    numeric = [bool(values) and all(isinstance(r[k], int | float) or r[k] is None
                                    for r in values) for k in range(len(shown))]
    headers = [c.title for c in shown]
    maxima = [None if wide else c.max_width for c in shown]
    widths = _fit(headers, cells, numeric, maxima, width)
    if widths is None and wide and len(table.rows) > 0:
        return _transposed(table, shown, cells, terminal, width)
    note = ""
    while widths is None and len(shown) > 1:
        shown, headers, numeric, maxima = shown[:-1], headers[:-1], numeric[:-1], maxima[:-1]
        cells = [row[:-1] for row in cells]
        widths = _fit(headers, cells, numeric, maxima, width)
        note = (f"({len(table.shown(wide)) - len(shown)} more columns do not fit in {width} "
                "columns: --wide shows every column)\n")
    widths = widths or [max([len(h), *(len(r[k]) for r in cells)])
                        for k, h in enumerate(headers)]
    rest = (f"... and {more:,} more rows (--json, --csv or --markdown lists them all)\n"
            if more > 0 else "")
    return _render(table.title, headers, cells, numeric, widths, terminal, width) + note + rest


def _render(title: str | None, headers: list[str], cells: list[list[str]],
            numeric: list[bool], widths: list[int], terminal: bool, width: int) -> str:
    from rich import box  # rich: 50-170 ms, off a command's start until it prints
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    rich = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                     collapse_padding=True, header_style="bold" if terminal else "",
                     title=title, title_justify="left")
    for k, header in enumerate(headers):
        rich.add_column(Text("\n".join(wrap(header, widths[k]))),
                        justify="right" if numeric[k] else "left", width=widths[k],
                        no_wrap=True)
    for row in cells:
        rich.add_row(*(Text("\n".join(wrap(cell, widths[k]))) for k, cell in enumerate(row)))
    buffer = io.StringIO()
    Console(file=buffer, width=max(width, sum(widths) + _GAP * len(widths)),
            color_system="standard" if terminal else None, highlight=False,
            emoji=False).print(rich)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def _transposed(table: Table, shown: list[Column], cells: list[list[str]], terminal: bool,
                width: int) -> str:
    """``--wide`` when the columns do not fit: a column's name, then its value in each row,
    as many rows side by side as fit, and the next rows in the next table."""
    names = [c.title for c in shown]
    label = max(len(n) for n in names)
    blocks: list[list[int]] = [[]]
    used = label
    for k, row in enumerate(cells):
        need = _GAP + min(max(len(c) for c in row), max(24, (width - label) // 2))
        if blocks[-1] and used + need > width:
            blocks.append([])
            used = label
        blocks[-1].append(k)
        used += need
    out = []
    for number, block in enumerate(blocks):
        headers = ["metric", *(cells[k][0] for k in block)]
        rows = [[name, *(cells[k][i] for k in block)] for i, name in enumerate(names)][1:]
        numeric = [False] + [True] * len(block)
        widths = _fit(headers, rows, [False] * len(headers), [None] * len(headers), width) or [
            max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
        title = table.title if number == 0 else None
        out.append(_render(title, headers, rows, numeric, widths, terminal, width))
    return "\n".join(out)


def to_markdown(table: Table, wide: bool = True) -> str:
    shown = table.shown(wide)
    lines = ["| " + " | ".join(markdown_text(c.title) for c in shown) + " |",
             "|" + " --- |" * len(shown)]
    lines += ["| " + " | ".join(markdown_text(format_cell(table.shown_value(row, c)))
                                for c in shown) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """Every column, names as headers, values not rounded (a column named in MiB in MiB)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([c.key for c in table.columns])
    for row in table.rows:
        writer.writerow([csv_cell(table.shown_value(row, c)) for c in table.columns])
    return buffer.getvalue()


def template_environment(html: bool) -> Any:
    """jinja2 over the templates shipped in the package; HTML ones are autoescaped."""
    import jinja2  # only templates need it: keep it off the CLI's start-up

    loader = jinja2.FunctionLoader(
        lambda name: resources.files("ddpprof").joinpath("templates", name).read_text())
    environment = jinja2.Environment(loader=loader, autoescape=html, keep_trailing_newline=True)
    environment.filters["cell"] = lambda v: markdown_text(format_cell(v))
    return environment


def ranks_text(ranks: Iterable[int]) -> str:
    """``0, 1, 2``: the first 16 ranks, then ``...``."""
    shown = sorted(set(ranks))
    return ", ".join(map(str, shown[:16])) + (", ..." if len(shown) > 16 else "")
