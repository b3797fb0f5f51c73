"""One table, four renderings: aligned text for terminals, Markdown, CSV and JSON."""

from __future__ import annotations

import csv
import io
from importlib import resources
from typing import Any

Row = dict[str, Any]


def format_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)


def template_environment(html: bool):
    """jinja2 over the templates shipped in the package; HTML ones are autoescaped."""
    import jinja2  # only templates need it: keep it off the CLI's start-up

    loader = jinja2.FunctionLoader(
        lambda name: resources.files("ddpprof").joinpath("templates", name).read_text())
    environment = jinja2.Environment(loader=loader, autoescape=html, keep_trailing_newline=True)
    environment.filters["cell"] = lambda v: format_cell(v).replace("|", "\\|")
    return environment


def to_text(rows: list[Row], columns: list[str]) -> str:
    cells = [[format_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def to_markdown(rows: list[Row], columns: list[str]) -> str:
    template = template_environment(html=False).get_template("table.md.j2")
    return template.render(rows=rows, columns=columns)


#: The terminal shows this many findings; ``--json`` and the report have them all.
SHOWN_FINDINGS = 10


def findings_text(findings: list, markdown: bool = False) -> str:
    """The "What to change" list, ranked as given (``ddpprof.findings.Finding``s), the first
    ``SHOWN_FINDINGS`` of it."""
    if not findings:
        return ""
    title = "### What to change" if markdown else "What to change (ranked by estimated gain):"
    lines = ["", title]
    for number, finding in enumerate(findings[:SHOWN_FINDINGS], 1):
        gain = (f", gain ~{finding.estimated_gain_pct:.0f}% of the step"
                if finding.estimated_gain_pct is not None
                else f", costs ~{finding.impact_pct:.0f}% of the step")
        lines.append(f"{number}. [{finding.severity}{gain}] {finding.run}: {finding.code}: "
                     f"{finding.message}")
    if len(findings) > SHOWN_FINDINGS:
        lines.append(f"... and {len(findings) - SHOWN_FINDINGS} more (--json, --html)")
    return "\n".join(lines) + "\n"


def to_csv(rows: list[Row], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def to_json(rows: list[Row], schema: str, version: int = 1) -> str:
    from ..atomic import json_text

    return json_text({"schema": schema, "version": version, "rows": rows})
