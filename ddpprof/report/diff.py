"""``ddpprof diff`` as tables, lines and a self-contained page: the change of the step split
into its parts, the items that moved, the collectives, the buckets and the configuration."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import plotly.graph_objects as go

from ..core.units import MIB
from ..diff.compare import Delta, ItemDelta, PairDiff
from ..render.charts import colour, embed, generated, layout, plotly_js, rounded
from ..render.table import Column, Table, format_cell, template_environment

PART_COLUMNS = [
    Column("pair", wide=True, max_width=40), Column("part", attr="label", max_width=34),
    Column("before_ms"), Column("after_ms"), Column("delta_ms"), Column("low_ms"),
    Column("high_ms"), Column("of_step_delta_pct"), Column("verdict"),
    Column("most_on_rank", attr="rank", wide=True), Column("rank_delta_ms", wide=True)]
ITEM_COLUMNS = [
    Column("pair", wide=True, max_width=40), Column("part", max_width=26),
    Column("item", max_width=48), Column("name", wide=True), Column("shape", wide=True),
    Column("before_ms"), Column("after_ms"), Column("delta_ms"),
    Column("before_calls", wide=True), Column("after_calls", wide=True)]
COLLECTIVE_COLUMNS = [
    Column("pair", wide=True, max_width=40), Column("kind"),
    Column("group", attr="process_group"), Column("before_calls"), Column("after_calls"),
    Column("before_ms"), Column("after_ms"),
    Column("before_mib_per_call", attr="before_bytes_per_call", scale=MIB, wide=True),
    Column("after_mib_per_call", attr="after_bytes_per_call", scale=MIB, wide=True),
    Column("before_busbw_gbps"), Column("after_busbw_gbps")]
BUCKET_COLUMNS = [
    Column("pair", wide=True, max_width=40), Column("bucket", attr="index"),
    Column("before_mib", attr="before_size_bytes", scale=MIB, wide=True),
    Column("after_mib", attr="after_size_bytes", scale=MIB, wide=True),
    *(Column(key) for key in ("before_launch_ms", "after_launch_ms", "launch_delta_ms",
                              "before_exposed_ms", "after_exposed_ms", "exposed_delta_ms"))]


def pair_name(pair: PairDiff) -> str:
    return f"{pair.before} → {pair.after}"


def _side(name: str, runs: list[str]) -> str:
    shown = ", ".join(runs[:4]) + (f" and {len(runs) - 4} more" if len(runs) > 4 else "")
    return f"{name} ({len(runs)} recording{'s' if len(runs) > 1 else ''}: {shown})"


def _rows(pairs: Sequence[PairDiff], get: Callable[[PairDiff], Sequence[msgspec.Struct]]
          ) -> list[dict[str, Any]]:
    rows = []
    for pair in pairs:
        for row in get(pair):
            fields = msgspec.structs.asdict(row)
            if isinstance(row, Delta):
                fields["verdict"] = row.verdict
            if isinstance(row, ItemDelta):      # an item: its name, and its shape where known
                fields["item"] = f"{row.name} [{row.shape}]" if row.shape else row.name
            rows.append({"pair": pair_name(pair), **fields})
    return rows


def tables(pairs: Sequence[PairDiff]) -> list[Table]:
    """The parts (the CSV), then what moved inside them, the collectives and the buckets."""
    found = [Table(PART_COLUMNS, _rows(pairs, lambda p: [p.step, *p.parts]),
                   title="Where the change of the step comes from (ms per step)"),
             Table(ITEM_COLUMNS, _rows(pairs, lambda p: p.items),
                   title="What moved inside the parts (ms per step)")]
    collectives = _rows(pairs, lambda p: p.collectives)
    if collectives:
        found.append(Table(COLLECTIVE_COLUMNS, collectives, title="Collectives per step"))
    buckets = _rows(pairs, lambda p: p.buckets)
    if buckets:
        found.append(Table(BUCKET_COLUMNS, buckets, title="Gradient buckets (launch: ms after "
                                                          "backward's first gradient)"))
    return found


def _signed(value: float) -> str:
    return f"{value:+.2f}"


def headline(pair: PairDiff, significance: float) -> str:
    step = pair.step
    change = f" ({100 * step.delta_ms / step.before_ms:+.1f}%)" if step.before_ms else ""
    if step.low_ms is None or step.high_ms is None:
        return (f"step {step.before_ms:.2f} → {step.after_ms:.2f} ms{change}, "
                f"{_signed(step.delta_ms)} ms: {pair.verdict}")
    changed = sum(p.significant for p in pair.parts)
    parts = f"{changed} part{'s' if changed != 1 else ''} beyond the noise"
    return (f"step {step.before_ms:.2f} → {step.after_ms:.2f} ms{change}, "
            f"{_signed(step.delta_ms)} ms in [{_signed(step.low_ms)}, {_signed(step.high_ms)}] "
            f"({step.verdict}; {significance:.0%}, simultaneous over the parts), {parts}: "
            f"{pair.verdict}")


def summary_lines(pair: PairDiff, significance: float) -> list[str]:
    """What a person reads first: the runs, the configuration's changes, the step's change,
    where it comes from."""
    lines = [f"{_side(pair.before, pair.before_runs)} → {_side(pair.after, pair.after_runs)}"]
    lines += [f"  configuration: {c.field} {c.before} → {c.after}" for c in pair.config_changes]
    lines.append(f"  {headline(pair, significance)}")
    changed = [p for p in pair.parts if p.significant][:3] or pair.parts[:1]
    for part in changed:
        moved = part.rank_delta_ms
        where = (f"; mostly on rank {part.rank} ({_signed(moved)} ms)"
                 if part.on_one_rank and moved is not None else "")
        lines.append(f"  {part.label}: {part.before_ms:.2f} → {part.after_ms:.2f} ms "
                     f"({_signed(part.delta_ms)}, {part.verdict}){where}")
    lines += [f"  {note}" for note in pair.notes]
    lines.append(f"  noise: {pair.noise}")
    if abs(pair.unattributed_ms) > 1e-6 * max(abs(pair.step.before_ms), 1.0):
        lines.append(f"  not attributed to a part: {pair.unattributed_ms:+.4f} ms")
    return lines


def _mark(part: Delta) -> str:
    if part.significant:
        return ""
    return " (noise)" if part.low_ms is not None else " (no verdict)"


def waterfall_figure(pair: PairDiff) -> go.Figure:
    """The step before, each part's change (a bar from where the parts before it left the
    step), the step after: one row each, so every part's name can be read."""
    parts = pair.parts
    labels = ["before", *(p.label for p in parts), "after"]
    bases, deltas, level = [], [], pair.step.before_ms
    for part in parts:
        bases.append(level)
        deltas.append(part.delta_ms)
        level += part.delta_ms
    fig = go.Figure()
    series = (("step", [0.0, 0.0], [pair.step.before_ms, pair.step.after_ms],
               ["before", "after"], "#2f7ed8"),
              ("longer", [b for b, d in zip(bases, deltas, strict=True) if d >= 0],
               [d for d in deltas if d >= 0], [p.label for p in parts if p.delta_ms >= 0],
               "#d64550"),
              ("shorter", [b for b, d in zip(bases, deltas, strict=True) if d < 0],
               [d for d in deltas if d < 0], [p.label for p in parts if p.delta_ms < 0],
               "#2f9e44"))
    notes = {p.label: _mark(p) for p in parts}
    for name, base, size, names, color in series:
        if names:
            fig.add_trace(go.Bar(
                name=name, y=names, x=rounded(size), base=rounded(base), orientation="h",
                marker_color=color, text=[f"{v:+.2f}{notes.get(n, '')}" if name != "step"
                                          else f"{v:.2f}" for v, n in zip(size, names,
                                                                          strict=True)],
                textposition="none", hovertemplate="%{y}: %{text} ms<extra></extra>"))
    return layout(fig, f"{pair_name(pair)}: the step's change by part (ms per step)",
                  barmode="overlay", xaxis_title="ms per step", height=160 + 26 * len(labels),
                  yaxis=dict(categoryorder="array", categoryarray=labels, autorange="reversed"))


def side_by_side_figure(pair: PairDiff) -> go.Figure:
    """Both sides' steps stacked by part, a colour each."""
    fig = go.Figure()
    for index, part in enumerate(sorted(pair.parts, key=lambda p: p.part)):
        fig.add_trace(go.Bar(name=part.label, x=["before", "after"],
                             y=rounded([part.before_ms, part.after_ms]),
                             marker_color=colour(index),
                             hovertemplate=f"{part.label}: %{{y:.3f}} ms<extra></extra>"))
    return layout(fig, "Both sides' steps by part (ms per step)", barmode="stack",
                  yaxis_title="ms per step", height=460 + 12 * len(pair.parts))


def render_page(pairs: Sequence[PairDiff], title: str, significance: float,
                notes: Sequence[str]) -> str:
    sections = []
    for pair in pairs:
        figures = [embed(waterfall_figure(pair)), embed(side_by_side_figure(pair))]
        sections.append({"name": pair_name(pair), "lines": summary_lines(pair, significance),
                         "figures": figures,
                         "tables": [_html_table(t, pair_name(pair)) for t in tables([pair])]})
    result: str = template_environment(html=True).get_template("diff.html.j2").render(
        title=title, generated=generated(), sections=sections, notes=list(notes),
        figure_count=sum(len(s["figures"]) for s in sections), plotly_js=plotly_js())
    return result


def _html_table(table: Table, pair: str) -> dict[str, Any]:
    """A table as the page shows it: the pair is the section's, an item its name and shape."""
    left_out = {"pair", "name", "shape"} if any(c.key == "item" for c in table.columns) \
        else {"pair"}
    shown = [c for c in table.columns if c.key not in left_out]
    return {"title": table.title, "headers": [c.title for c in shown],
            "rows": [[format_cell(table.shown_value(row, c)) for c in shown]
                     for row in table.rows]}
