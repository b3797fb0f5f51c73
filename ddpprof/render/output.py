"""What a command gives back and what the user asked of it, and how the one is written out as
the other: the terminal table, ``--json``, ``--csv``, ``--markdown``, ``--html``.

Nothing is written that was not asked for. When an output is ``-`` (standard output), it alone
goes there: with ``--json -`` what would have been printed goes to stderr; with ``--markdown -``
or ``--csv -`` that is the table, printed once.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..core.atomic import check_outputs, is_stdout, json_text, refuse_inputs, write_output
from ..core.errors import without_secrets
from .table import (
    Table,
    markdown_text,
    terminal_text,
    terminal_width,
    to_csv,
    to_markdown,
    to_text,
    wrap,
)


@dataclass(frozen=True)
class Outputs:
    """The output options of one command line (``ddpprof.grammar.options.outputs``)."""

    json: Path | None = None
    csv: Path | None = None
    markdown: Path | None = None
    html: bool = False                # --html: reports/<name>.html
    html_out: Path | None = None      # --html-out FILE (implies --html)
    wide: bool = False
    quiet: bool = False

    def page(self, name: str) -> Path | None:
        """Where the HTML page goes, ``name`` naming the default; None when not asked."""
        if self.html_out is not None:
            return self.html_out
        return Path("reports") / f"{name}.html" if self.html else None

    def files(self, page_name: str) -> dict[str, str | os.PathLike[str] | None]:
        return {"--json": self.json, "--csv": self.csv, "--markdown": self.markdown,
                self.page_option: self.page(page_name)}

    @property
    def page_option(self) -> str:
        return "--html-out" if self.html_out is not None else "--html"

    @property
    def to_stdout(self) -> bool:
        return any(is_stdout(path) for path in (self.json, self.csv, self.markdown,
                                                 self.html_out))

    def check(self, page_name: str, files: Iterable[Path] = (), folders: Iterable[Path] = (),
              runs_under: Iterable[Path] = (), what: str = "") -> None:
        """Refuse, before any work, an output that cannot be written, two on standard output,
        or one that would land on an input (``files``) or in a run being recorded."""
        check_outputs(json=self.json, csv=self.csv, markdown=self.markdown,
                      **{self.page_option[2:].replace("-", "_"): self.page(page_name)})
        refuse_inputs(self.files(page_name), files=files, folders=folders,
                      runs_under=runs_under, what=what)


@dataclass(frozen=True)
class Section:
    """Lines printed after the tables, under a title (``### title`` in Markdown)."""

    title: str | None
    lines: list[str]


@dataclass
class Output:
    """What a command gives back: ``document`` for ``--json`` (a Struct or dataclass with
    ``schema`` and ``version``), tables (the first is ``--csv``'s), then sections, a summary,
    notes for stderr, the HTML page (rendered only when asked), and how it ended."""

    document: Any
    tables: list[Table] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    intro: list[str] = field(default_factory=list)   # printed before the tables
    summary: str | None = None
    notes: list[str] = field(default_factory=list)
    page: Callable[[], str] | None = None
    page_name: str = "report"         # --html writes reports/<page_name>.html
    title: str = "ddpprof"            # the Markdown file's heading
    errors: list[str] = field(default_factory=list)
    exit_code: int = 0
    ran: bool = False                 # something was run: a failed write is exit 1, not 2


def document_text(document: Any) -> str:
    """A result document (a Struct or dataclass; ``analyze``'s is built as a dict) as
    standard JSON, non-finite numbers as null."""
    if isinstance(document, dict):
        return json_text(document)
    return json_text(msgspec.to_builtins(document, enc_hook=_builtin))


def _builtin(value: Any) -> Any:
    # subclasses of the builtins (numpy's float64) as the builtins themselves
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def markdown(output: Output, wide: bool) -> str:
    parts = [f"### {markdown_text(output.title)}\n"]
    if output.intro:
        parts.append("".join(markdown_text(line) + "  \n" for line in output.intro))
    parts += [(f"#### {markdown_text(t.title)}\n\n" if t.title else "") + to_markdown(t, wide)
              for t in output.tables]
    for section in output.sections:
        title = f"#### {markdown_text(section.title)}\n\n" if section.title else ""
        parts.append(title + "\n".join(markdown_text(line) for line in section.lines) + "\n")
    if output.summary:
        parts.append(f"**{markdown_text(output.summary)}**\n")
    return "\n".join(parts)


_LEAD = re.compile(r"^(\s*(?:\d+\.|-|\*)?\s*)")


def paragraph(line: str, width: int) -> str:
    """One line of text wrapped to ``width`` at word boundaries (``table.wrap``), the lines
    after the first indented as far as its text starts (past ``1. `` or ``- ``)."""
    indent = " " * len(_LEAD.match(line).group(1))  # type: ignore[union-attr]
    return "".join(part + "\n" for part in wrap(terminal_text(line), width, indent,
                                                  prose=True))


def terminal(output: Output, wide: bool, tty: bool, width: int | None = None) -> str:
    """What is printed: the tables fitted to ``width`` (the terminal's), text wrapped to it."""
    width = width or terminal_width()
    text = "".join(paragraph(line, width) for line in output.intro)
    text += "".join(to_text(t, wide, tty, width) for t in output.tables if t.rows)
    for section in output.sections:
        lines = ([section.title] if section.title else []) + section.lines
        text += "\n" + "".join(paragraph(line, width) for line in lines)
    if output.summary:
        text += paragraph(output.summary, width)
    return text


def emit(output: Output, outputs: Outputs) -> None:
    """Write the files asked for, then print the rest (on stderr when a file went to
    standard output), then the notes and errors on stderr."""
    def write(option: str, path: Path | None, make: Callable[[], str]) -> None:
        if path is not None:
            # (a URL's password given on the command line never reaches a file)
            write_output(option, path, without_secrets(make()), output.ran)

    write("--json", outputs.json, lambda: document_text(output.document))
    if output.tables:
        write("--csv", outputs.csv, lambda: to_csv(output.tables[0]))
    write("--markdown", outputs.markdown, lambda: markdown(output, outputs.wide))
    page = outputs.page(output.page_name) if output.page is not None else None
    if output.page is not None:
        write(outputs.page_option, page, output.page)
    if not (is_stdout(outputs.markdown) or is_stdout(outputs.csv)):
        # JSON on standard output: the table for the person goes to stderr; a table written
        # there as Markdown or CSV already is the table
        stream = sys.stderr if outputs.to_stdout else sys.stdout
        stream.write(without_secrets(terminal(output, outputs.wide, stream.isatty())))
        stream.flush()
    notes = output.notes + ([f"report: {page}"] if page is not None else [])
    notes += [f"ddpprof: error: {error}" for error in output.errors]
    # one line each: a note or an error is greppable, and bad input is one line
    sys.stderr.write("".join(terminal_text(without_secrets(note)) + "\n" for note in notes))
