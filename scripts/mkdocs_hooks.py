"""mkdocs hooks: the command-line reference (docs/cli.md) generated from the click commands
themselves, as ``ddpprof COMMAND --help`` prints them: each command's whole help, its usage,
every option with its help and its default exactly as ``--help`` shows them (click's own
help records), and its epilogue (the exit statuses). The page holds the marker
``<!-- cli-reference -->`` where the reference goes."""

from __future__ import annotations

import inspect
import re
from typing import Any

MARKER = "<!-- cli-reference -->"


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell: one line, ``|`` and ``<`` escaped."""
    return (" ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")
            .replace("[", "\\["))


def _paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", inspect.cleandoc(text)) if
            p.strip()]


def cli_reference() -> str:
    """The reference, in Markdown: the commands in the order ``ddpprof --help`` lists them."""
    import click

    from ddpprof.cli import cli

    root = click.Context(cli, info_name="ddpprof")
    lines = ["| command | what it does |", "| --- | --- |"]
    lines += [f"| [`ddpprof {name}`](#ddpprof-{name}) | {_cell(_paragraphs(c.help or '')[0])} |"
              for name, c in cli.commands.items()]
    for name, command in cli.commands.items():
        ctx = click.Context(command, info_name=name, parent=root)
        usage = " ".join(command.collect_usage_pieces(ctx))
        lines += ["", f"## ddpprof {name}", "", *(f"{p}\n" for p in _paragraphs(
            command.help or "")), "```text", f"ddpprof {name} {usage}", "```", "",
            "| option | what it does |", "| --- | --- |"]
        for param in command.get_params(ctx):
            record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            if record is not None:
                lines.append(f"| `{_cell(record[0])}` | {_cell(record[1])} |")
        if command.epilog:
            lines.append("")
            lines += [f"{p}\n" for p in _paragraphs(command.epilog)]
    return "\n".join(lines) + "\n"


METRICS_MARKER = "<!-- metric-reference -->"


def metric_reference() -> str:
    """Every metric of ``ddpprof.metrics.registry``: the one name tables, CSV, Markdown, JSON
    and the gate use, its unit and definition, by the command whose output holds it."""
    from ddpprof.metrics.registry import METRICS, RENAMED

    lines = []
    for command in dict.fromkeys(m.command for m in METRICS.values()):
        lines += ["", f"**{command}**", "", "| name | unit | definition |", "| --- | --- | --- |"]
        lines += [f"| `{m.name}` | {_cell(m.unit)} | {_cell(m.definition)} |"
                  for m in METRICS.values() if m.command == command]
    lines += ["", "Renamed (the gate still reads the old name, with a note): " + ", ".join(
        f"`{old}` → `{new}`" for old, new in RENAMED.items()) + "."]
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    if METRICS_MARKER in markdown:
        markdown = markdown.replace(METRICS_MARKER, metric_reference())
    return markdown


#: A Sphinx role left in a docstring, as the page renders it: ``:func:`x``` becomes
#: ``:func:<code>x</code>``.
ROLE = re.compile(r":(?:func|class|meth|data|attr|mod|obj):(?:<code>([^<]+)</code>|`([^`]+)`)")


def on_page_content(html: str, page: Any, **_: Any) -> str:
    """The API page's cross-references (Sphinx roles in the docstrings) as links to the
    object's entry on the page where it has one, else as code."""
    if page.file.src_uri != "api.md":
        return html
    ids = set(re.findall(r'id="([\w.]+)"', html))

    def link(match: re.Match[str]) -> str:
        target = (match.group(1) or match.group(2)).strip("~").rstrip("()")
        found = target if target in ids else next(
            (i for i in sorted(ids) if i.endswith("." + target)), None)
        code = f"<code>{target.rsplit('.', 1)[-1] if found else target}</code>"
        return f'<a href="#{found}">{code}</a>' if found else code

    return ROLE.sub(link, html)
